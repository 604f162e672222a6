"""The trained pruner: data labels and folds, train/inference input parity, LoRA delta, the shipped model."""

import json

import numpy as np
import pytest
import torch

from thresher.export.lora import add_adapters, apply_delta, delta_state, merge_adapters, save_delta
from thresher.training.data import Example, fold_of, load_examples

from .conftest import DATA, load_jsonl


@pytest.fixture(scope="module")
def pruner():
    import thresher

    return thresher.Compressor.load("minilm-pruner")


def test_folds_are_stable_disjoint_and_about_a_quarter():
    ids = [f"q{i}" for i in range(4000)]
    folds = [fold_of(i) for i in ids]
    assert folds == [fold_of(i) for i in ids]
    assert 0.22 < folds.count("validation") / len(ids) < 0.28
    load_jsonl("hotpotqa_distractor", limit=1)  # skips without ../shared/data
    ex = load_examples(DATA, max_questions={"squad": 200, "nq_open_oracle": 50})
    train_q = {e.qid for e in ex["train"]}
    val_q = {e.qid for e in ex["validation"]}
    assert train_q and val_q and not train_q & val_q


def test_labels_follow_each_source():
    rec = load_jsonl("hotpotqa_distractor", limit=1)[0]
    ex = [e for f in load_examples(DATA, max_questions={"squad": 300, "nq_open_oracle": 100}).values() for e in f]
    mine = [e for e in ex if e.qid == rec["id"] and e.source == "hotpotqa_distractor"]
    assert len(mine) == len(rec["context"])  # one example per paragraph, distractors included
    gold = {(t, int(i)) for t, i in rec["supporting_facts"]}
    for e in mine:
        assert [(e.title, i) in gold for i in range(len(e.sentences))] == [bool(x) for x in e.labels]
    # fullwiki: retrieved paragraphs, labelled where a supporting title was retrieved
    wiki = load_jsonl("hotpotqa_fullwiki_dev")
    missing = next(r for r in wiki if not r["sf_in_context"] and r["context"])
    assert not any(e.relevant for e in ex if e.qid == missing["id"] and e.source == "hotpotqa_fullwiki_dev"
                   and e.title not in {t for t, _ in missing["supporting_facts"]})
    complete = next(r for r in wiki if r["sf_in_context"])
    got = {(e.title, i) for e in ex if e.qid == complete["id"] and e.source == "hotpotqa_fullwiki_dev"
           for i, x in enumerate(e.labels) if x}
    assert got == {(t, int(i)) for t, i in complete["supporting_facts"]}
    # a question in both HotpotQA sets sits in one fold in both (no validation question trained on)
    shared = {r["id"] for r in wiki} & {r["id"] for r in load_jsonl("hotpotqa_distractor")}
    folds = {(e.qid, f) for f, v in load_examples(DATA, max_questions={"squad": 1, "nq_open_oracle": 1}).items()
             for e in v if e.qid in shared}
    assert shared and len(folds) == len(shared)
    squad = [e for e in ex if e.source == "squad"]
    by_id = {r["id"]: r for r in load_jsonl("squad_v2.0_dev")}
    for e in squad[:300]:
        r = by_id.get(e.qid)
        if r is not None and r["is_impossible"] in (True, "True"):
            assert not e.relevant
        elif r is not None:
            answers = [a for a in r["answers"] if a.strip()]
            assert e.relevant == any(a in s for s in e.sentences for a in answers)
            assert "".join("".join(e.sentences).split()) == "".join(r["context"].split())  # no text lost


def test_training_inputs_are_what_the_scorer_feeds(pruner):
    """encode() must build, token for token, the block the encoder-pruner scorer runs."""
    from thresher.engine.request import Passage
    from thresher.engine.scorer import ScoreInput
    from thresher.training.train import encode

    scorer = pruner.scorer
    sentences = ("Paris is the capital of France.", " It has 2.1 million people.", " Lyon is smaller.")
    e = Example("t", "q", "How many people live in Paris?", "Paris", sentences, (0, 1, 0))
    enc = encode(scorer._tok, [e], 256, scorer._cls, scorer._sep)[0]
    text = "".join(sentences)
    spans = np.array([[0, 31], [32, 58], [59, 75]], np.int64)
    assert [text[a:b] for a, b in spans.tolist()] == [s.strip() for s in sentences]
    item = ScoreInput(e.question, (Passage(text, e.title),), (spans,))
    ids, cu, labels, _, _, _ = scorer._sequences([item], {})
    assert ids.tolist() == enc.ids.tolist()
    assert (labels >= 0).tolist() == (enc.labels >= 0).tolist()
    assert enc.labels[enc.labels >= 0].tolist() == [e.labels[s] for s in labels[labels >= 0]]


def test_lora_delta_round_trip_rebuilds_the_trained_network():
    from thresher.export.bert_pruner import minilm_pruner

    net, _, _ = minilm_pruner(seed=1)
    add_adapters(net, rank=4, alpha=8)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "lora_b" in name or "norm" in name:
                p.add_(torch.randn_like(p) * 0.02)
    ids = torch.randint(1000, 30000, (2, 17))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    with torch.no_grad():
        want = net(ids, mask)
    state = {k: v.clone() for k, v in delta_state(net).items()}
    plain, _, _ = minilm_pruner(seed=2)  # other head initialisation: the delta must overwrite it
    apply_delta(plain, _save(state))
    with torch.no_grad():
        got = plain(ids, mask)
        merged = merge_adapters(net)(ids, mask)
    real = mask.bool()
    assert torch.allclose(merged[0][real], want[0][real], atol=1e-5)
    assert torch.allclose(got[0][real], want[0][real], atol=5e-3)  # fp16 factors and heads
    assert torch.allclose(got[1], want[1], atol=5e-3)


def _save(state):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "delta.safetensors"
    save_delta(state, path)
    return path


def test_train_writes_a_verified_run_and_refuses_a_tampered_delta(tmp_path):
    from thresher.export.bert_pruner import load_trained_pruner
    from thresher.training.train import SELECTION_REMOVED, TrainConfig, train

    load_jsonl("hotpotqa_distractor", limit=1)
    caps = {"hotpotqa_distractor": 8, "2wikimultihopqa": 2, "hotpotqa_fullwiki_dev": 2, "clapnq": 4, "squad": 10,
            "nq_open_oracle": 4}
    record = train(TrainConfig(data_dir=str(DATA), epochs=1, max_questions=caps, batch_tokens=2048, layers=2),
                   tmp_path)
    first = record["history"][0]
    assert first["epoch"] == 1 and np.isfinite(first["train_loss"])
    assert set(first["val_recall_at_removed"]) <= set(SELECTION_REMOVED) and 0 <= first["val_mean"] <= 1
    assert (tmp_path / "epoch-1.safetensors").is_file()  # every epoch's delta is kept
    assert json.loads((tmp_path / "train.json").read_text())["delta_sha256"] == record["delta_sha256"]
    net, config, _, _ = load_trained_pruner(tmp_path)
    assert len(net.bert.layers) == config["num_hidden_layers"] == 2  # the run's --layers is rebuilt
    raw = bytearray((tmp_path / "delta.safetensors").read_bytes())
    raw[-1] ^= 1
    (tmp_path / "delta.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="sha256"):
        load_trained_pruner(tmp_path)


def test_shipped_pruner_ranks_gold_paragraphs_first_and_is_batch_invariant(pruner):
    records = load_jsonl("hotpotqa_distractor", limit=40)
    records = [r for r in records if fold_of(r["id"]) == "validation"][:6]
    items = [(r["question"], [{"title": t, "text": "".join(s)} for t, s in r["context"]]) for r in records]
    batch = pruner.compress_batch(items, progress=False, batch_size=6)
    rr = []
    for r, res, item in zip(records, batch, items):
        gold = {t for t, _ in r["supporting_facts"]}
        order = np.argsort([-p.rerank_score for p in res.passages])
        first = next(i for i, k in enumerate(order) if r["context"][k][0] in gold)
        rr.append(1 / (1 + first))
        single = pruner.compress(*item)
        assert [s.score for p in single.passages for s in p.sentences] == \
               [s.score for p in res.passages for s in p.sentences]
    assert np.mean(rr) > 0.6  # untrained heads rank at chance (MRR ~0.3 for 2 gold of 10)


def test_train_cli_names_a_missing_data_dir(tmp_path, capsys):
    from thresher.cli import main

    assert main(["train", "--data-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "run")]) == 2
    assert "--data-dir" in capsys.readouterr().err
