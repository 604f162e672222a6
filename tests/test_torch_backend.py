"""The torch backend (the GPU path's code: tree mask, fused head in place of the LM head, keep
kernel after an encoder) on CPU tensors with the kernels interpreted, against one-prompt-per-
sentence references; and the backend seam that Compressor.load(device=, backend=) selects."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from thresher.kernels.sentence_keep import sentence_keep_reference

from .test_kernels import _gen, _seed


def _tiny_causal_lm(kind: str):
    import transformers

    common = dict(vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=512)
    if kind == "llama":
        config = transformers.LlamaConfig(**common)
    elif kind == "gemma":
        config = transformers.GemmaConfig(**common)
    else:  # gemma2: soft-capping and sliding-window layers (window shorter than the prompts)
        config = transformers.Gemma2Config(**common, final_logit_softcapping=30.0, sliding_window=12)
    config._attn_implementation = "sdpa"
    torch.manual_seed(_seed(kind))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger norm weights than the zero init, so (1 + w) vs w matters
        model.model.norm.weight.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("kind", ["llama", "gemma", "gemma2"])
def test_torch_backend_tree_matches_one_prompt_per_sentence(kind):
    from thresher._native import pack_tree
    from thresher.engine.torch_backend import CausalYesNoTorch

    model = _tiny_causal_lm(kind)
    g = _gen(_seed(kind, "tree"))
    prefixes = [torch.randint(1, 96, (int(n),), generator=g).numpy() for n in (9, 14)]
    branches = [torch.randint(1, 96, (int(n),), generator=g).numpy() for n in (3, 5, 1, 7, 4)]
    group = np.array([0, 0, 0, 1, 1], np.int64)
    pcu = np.concatenate([[0], np.cumsum([len(p) for p in prefixes])]).astype(np.int64)
    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    rows = pack_tree(np.concatenate(prefixes), pcu, np.concatenate(branches), bcu, group, 22, 0)
    scorer = CausalYesNoTorch(model, yes_id=5, no_id=7, width_step=8)
    logits, p_yes = scorer.logits(rows["input_ids"], rows["position_ids"], rows["branch_ids"], rows["score_index"])
    with torch.no_grad():
        for k, branch in enumerate(branches):
            prompt = torch.from_numpy(np.concatenate([prefixes[group[k]], branch]))[None]
            full = model(input_ids=prompt).logits[0, -1]  # the reference: full-vocabulary logits
            ref = full[[5, 7]]
            assert torch.allclose(logits[k], ref, rtol=0, atol=1e-4), (k, logits[k], ref)
            assert abs(float(p_yes[k]) - float(torch.softmax(ref, 0)[0])) < 1e-4
    assert scorer.self_check() < 1e-5  # fp32: rounding only
    # Behind the runner contract it returns the same numbers as NumPy.
    from thresher.engine.torch_backend import YesNoTorchRunner

    feeds = {k: rows[k] for k in ("input_ids", "position_ids", "branch_ids", "score_index")}
    (got,) = YesNoTorchRunner(scorer, 8192).run(feeds)
    np.testing.assert_allclose(got, logits.numpy(), rtol=0, atol=1e-6)


def test_torch_backend_encoder_pruner_matches_pair_at_a_time():
    import transformers

    from thresher.engine.batch import pack
    from thresher.engine.torch_backend import EncoderPrunerTorch

    config = transformers.DebertaV2Config(
        vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=512, relative_attention=True, position_buckets=32, norm_rel_ebd="layer_norm",
        pos_att_type=["p2c", "c2p"], position_biased_input=False, share_att_key=True, type_vocab_size=0)
    torch.manual_seed(_seed("deberta"))
    backbone = transformers.DebertaV2Model(config).eval()
    token_head = torch.nn.Linear(32, 2)
    rank_head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    g = _gen(_seed("pairs"))
    question = torch.randint(3, 120, (6,), generator=g)
    sentence_lens = [[5, 9, 3], [12], [30, 25], [4, 4, 4, 2], [1]]  # rows of 3 length groups
    seqs, labels, sentence_passage, sid = [], [], [], 0
    for p, lens in enumerate(sentence_lens):
        body = torch.randint(3, 120, (sum(lens),), generator=g)
        seqs.append(torch.cat([torch.tensor([1]), question, torch.tensor([2]), body, torch.tensor([2])]))
        lab = [-1] * (len(question) + 2)
        for n in lens:
            lab += [sid] * n
            sentence_passage.append(p)
            sid += 1
        labels.append(torch.tensor(lab + [-1], dtype=torch.int32))
    cu = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    packed = pack(torch.cat(seqs).numpy(), cu, torch.cat(labels).numpy(), row_len=128, max_seqs_per_row=1)
    pruner = EncoderPrunerTorch(backbone, token_head, rank_head, width_step=24)  # buckets wider than rows
    out = pruner.run(packed.input_ids, packed.segment_ids, packed.labels, packed.placement[:, 0],
                     np.array(sentence_passage, np.int32), 0.5, strict=True)
    with torch.no_grad():
        for p, seq in enumerate(seqs):  # the reference: one pair at a time, no padding
            hidden = backbone(input_ids=seq[None]).last_hidden_state
            probs = torch.softmax(token_head(hidden)[0], -1)[:, 1]
            ref = sentence_keep_reference(probs[None], labels[p][None], torch.tensor(sentence_passage, dtype=torch.int32),
                                          len(seqs), 0.5, strict=True)
            mine = torch.tensor(sentence_passage) == p
            torch.testing.assert_close(out.keep.score[mine], ref.score[mine], rtol=0, atol=1e-5)
            assert torch.allclose(out.rank[p], rank_head(hidden[:, 0]).reshape(()), atol=1e-5)
    assert out.keep.passage_length.tolist() == [sum(x) for x in sentence_lens]


def test_torch_backend_cuda_request_without_cuda_is_a_clear_error():
    from thresher.engine.torch_backend import resolve_device, resolve_dtype

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("int8")
    assert resolve_device("cpu").type == "cpu"


def test_torch_backend_agrees_with_exported_yesno_head():
    """CausalYesNoTorch (fused kernel) and export.yesno.YesNoHead (the ONNX graph's module) give the
    same logits on the same tree rows."""
    from thresher._native import pack_tree
    from thresher.engine.torch_backend import CausalYesNoTorch
    from thresher.export.yesno import YesNoHead

    model = _tiny_causal_lm("gemma2")
    g = _gen(_seed("yesnohead"))
    prefix = torch.randint(1, 96, (11,), generator=g).numpy()
    branches = [torch.randint(1, 96, (n,), generator=g).numpy() for n in (4, 2, 6)]
    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    rows = pack_tree(prefix, np.array([0, 11], np.int64), np.concatenate(branches), bcu, np.zeros(3, np.int64), 64, 0)
    args = [torch.from_numpy(rows[k]) for k in ("input_ids", "position_ids", "branch_ids", "score_index")]
    with torch.no_grad():
        theirs = YesNoHead(model, 5, 7).eval()(*args)
    mine, _ = CausalYesNoTorch(model, 5, 7, width_step=8).logits(*args)
    torch.testing.assert_close(mine, theirs.float(), rtol=0, atol=1e-4)


def test_gpu_session_config_prefers_gpu_providers_and_falls_back():
    """onnxruntime-gpu is not installed here: the config names TensorRT/CUDA first, and
    open_session keeps only the available ones (CPU)."""
    import onnxruntime as ort

    from thresher.engine.runner import gpu_session_config

    config = gpu_session_config(intra_op_threads=1)
    assert config.providers == ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
    assert config.intra_op_threads == 1
    available = set(ort.get_available_providers())
    assert [p for p in config.providers if p in available][-1] == "CPUExecutionProvider"


# ---------------------------------------------------------------- the backend seam


@pytest.mark.parametrize("kwargs, error, match", [
    ({"device": "cuda"}, RuntimeError, "onnxruntime-gpu"),
    ({"device": "cuda", "backend": "torch"}, RuntimeError, "torch.cuda.is_available"),
    ({"device": "tpu"}, ValueError, "device must be"),
    ({"backend": "jax"}, ValueError, "backend must be one of"),
    ({"call_tokens": 0}, ValueError, "call_tokens must be an int >= 1"),
])
def test_load_names_a_missing_device_or_package(kwargs, error, match):
    import thresher

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(error, match=match):
        thresher.Compressor.load("default", **kwargs)


def test_torch_backend_refuses_kinds_it_does_not_run():
    import thresher

    with pytest.raises(ValueError, match="backend='torch' runs"):
        thresher.Compressor.load("minilm-cosine", backend="torch")


def test_default_model_in_torch_agrees_with_onnx(default_compressor):
    """backend="torch" runs the trained pruner's own network (fp32) behind the same scorer; the
    shipped graph is int8, so scores agree to quantisation error and keep flags almost always."""
    import thresher

    from .conftest import load_jsonl

    torch_c = thresher.Compressor.load("default", backend="torch")
    assert torch_c.scorer._runner.__class__.__name__ == "EncoderTorchRunner"
    agree = total = 0
    for record in load_jsonl("hotpotqa_distractor", 4):
        passages = [{"title": t, "text": " ".join(s)} for t, s in record["context"]]
        a = default_compressor.compress(record["question"], passages)
        b = torch_c.compress(record["question"], passages)
        sa = np.array([s.score for p in a.passages for s in p.sentences])
        sb = np.array([s.score for p in b.passages for s in p.sentences])
        assert np.abs(sa - sb).mean() < 0.01 and np.abs(sa - sb).max() < 0.1  # measured 0.001-0.004 / 0.06
        ra = np.array([p.rerank_score for p in a.passages])
        rb = np.array([p.rerank_score for p in b.passages])
        assert np.corrcoef(ra, rb)[0, 1] > 0.99  # rank logits: measured 0.999
        agree += int(np.sum([x.kept == y.kept for p, q in zip(a.passages, b.passages)
                             for x, y in zip(p.sentences, q.sentences)]))
        total += sa.size
    assert agree / total >= 0.9


def test_call_budget_does_not_change_results(default_compressor):
    """call_tokens only groups rows into calls: one huge call gives the same answer."""
    import thresher

    big = thresher.Compressor.load("default", call_tokens=1 << 20)
    passages = ["Hamlet is a tragedy. It was written by Shakespeare.", "Cats sleep. Dogs bark. " * 40]
    a = default_compressor.compress("Who wrote Hamlet?", passages).to_dict()
    b = big.compress("Who wrote Hamlet?", passages).to_dict()
    a.pop("timings_ms"), b.pop("timings_ms")
    assert a == b
