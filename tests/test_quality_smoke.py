"""benchmarks/quality_sweep.py (and its common_quality.py): gold-sentence mapping, coverage rule and the
sweep on real dev records."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from thresher.training.data import fold_of

from .conftest import load_jsonl

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def quality():
    spec = importlib.util.spec_from_file_location("bench_quality", BENCH / "quality_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # puts benchmarks/ on sys.path
    import common_quality

    return SimpleNamespace(**{**vars(common_quality), **vars(module)})


def _passage(quality, text, spans, scores, gold):
    ns = np.fromiter((not c.isspace() for c in text), dtype=np.int64, count=len(text))
    cum = np.zeros(len(text) + 1, np.int64)
    np.cumsum(ns, out=cum[1:])
    return quality.PassageEval(text, np.array(spans, np.int64).reshape(-1, 2),
                               np.array(scores, np.float32), np.array(gold, np.int64).reshape(-1, 2), cum)


def test_gold_spans_point_at_the_gold_sentences(quality):
    sentences = ["Alpha is a letter.", " Beta follows it.", " Gamma is third."]
    text = "".join(sentences)
    spans = quality.gold_spans(sentences, [2, 0])
    assert [text[a:b] for a, b in spans.tolist()] == [sentences[2], sentences[0]]
    assert quality.gold_spans(sentences, [7]).shape == (0, 2)  # out of range: ignored, not an error


def test_recall_needs_half_of_the_gold_characters(quality):
    text = "aaaa bbbb. cccc dddd."
    # thresher split the gold sentence "aaaa bbbb. cccc dddd." (one gold) into two halves
    p = _passage(quality, text, [(0, 10), (11, 21)], [0.9, 0.1], [(0, 21)])
    assert quality.recalled(p, np.array([True, False])).tolist() == [True]  # 9 of 16 non-space
    p = _passage(quality, text, [(0, 4), (5, 21)], [0.9, 0.1], [(0, 21)])
    assert quality.recalled(p, np.array([True, False])).tolist() == [False]  # 4 of 16
    assert quality.recalled(p, np.array([False, False])).tolist() == [False]


def test_choose_threshold_takes_most_removal_at_target_recall(quality):
    curve = [{"threshold": 0.1, "recall": 0.99, "removed": 0.2},
             {"threshold": 0.2, "recall": 0.86, "removed": 0.4},
             {"threshold": 0.3, "recall": 0.80, "removed": 0.6}]
    assert quality.choose_threshold(curve)["threshold"] == 0.2
    assert quality.choose_threshold(curve[2:]) is None


def test_sweep_endpoints_on_real_dev_records(quality, default_compressor):
    records = load_jsonl("hotpotqa_distractor", limit=3)
    data = quality.score_records(default_compressor, records, batch_size=3)
    keep_all = quality.evaluate(data, quality.by_threshold(-2.0))
    keep_none = quality.evaluate(data, quality.by_threshold(2.0))
    assert keep_all["recall"] == 1.0 and keep_all["removed"] < 0.05
    assert keep_none["recall"] == 0.0 and keep_none["removed"] == 1.0
    mid = quality.evaluate(data, quality.by_threshold(default_compressor.threshold))
    # the offline sweep over batched scores reproduces what compress() returns one at a time
    rates = [default_compressor.compress(r["question"], quality.hotpot_passages(r),
                                         threshold=default_compressor.threshold).compression_rate for r in records]
    assert mid["removed"] == pytest.approx(float(np.mean(rates)), abs=1e-9)
    half = quality.evaluate(data, quality.by_ratio(0.5))
    assert 0.3 < half["removed"] < 0.7


def _bench(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["hotpotqa_distractor", "clapnq", "squad_v2.0_dev", "nq_open_oracle"])
def test_every_setting_is_judged_by_the_engines_rules(name, default_compressor):
    """quality.py's endpoints on real validation questions: keep everything -> full quality and
    nothing emptied; keep nothing -> zero quality, all removed, every unanswerable emptied; the
    model's own operating point equals what compress() returns."""
    pytest.importorskip("bm25s")
    sets = _bench("common_sets")
    quality = _bench("quality")
    qs = sets.load_set(name, limit=12)
    if name == "squad_v2.0_dev":  # both kinds of question
        qs = [q for q in sets.load_set(name, limit=60) if q.answerable][:6] + \
             [q for q in sets.load_set(name, limit=60) if not q.answerable][:6]
    assert qs and all(fold_of(q.qid) == "validation" for q in qs)
    scored = sets.score(default_compressor, qs, batch_size=4)
    everything = sets.judge(qs, scored, quality.by_threshold(-1.0, None))
    nothing = sets.judge(qs, scored, quality.by_threshold(2.0, None))
    assert sets.quality_of(everything) == 1.0 and everything["removed"] < 0.05
    assert sets.quality_of(nothing) == 0.0 and nothing["removed"] == 1.0
    if "emptied" in nothing:
        assert nothing["emptied"] == 1.0 and everything["emptied"] == 0.0
    t, cut = default_compressor.threshold, default_compressor.passage_threshold
    at = sets.judge(qs, scored, quality.by_threshold(t, cut, default_compressor.relative_threshold))
    answerable = [q for q in qs if q.answerable]
    rates = [default_compressor.compress(q.question, q.passages).compression_rate for q in answerable]
    assert at["removed"] == pytest.approx(float(np.mean(rates)), abs=1e-9)


def test_platt_fit_recovers_a_known_calibration():
    calibrate = _bench("calibrate")
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, 20000)
    y = (rng.random(x.size) < 1 / (1 + np.exp(-(0.5 * x - 1.0)))).astype(float)
    a, b = calibrate.fit_platt(x, y, np.full(x.size, 1 / x.size))
    assert a == pytest.approx(0.5, abs=0.03) and b == pytest.approx(-1.0, abs=0.06)
    # nearly separable data: the damped steps still end finite and steep, not at 1e8
    a, _ = calibrate.fit_platt(np.r_[-np.ones(50), np.ones(50)] * 3, np.r_[np.zeros(50), np.ones(50)],
                               np.full(100, 0.01))
    assert np.isfinite(a) and 1 < a < 20
