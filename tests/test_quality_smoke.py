"""benchmarks/quality.py (and its common_quality.py): gold-sentence mapping, coverage rule and the
sweep on real dev records."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from .conftest import load_jsonl

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def quality():
    spec = importlib.util.spec_from_file_location("bench_quality", BENCH / "quality.py")
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
    rates = [default_compressor.compress(r["question"], quality.hotpot_passages(r)).compression_rate
             for r in records]
    assert mid["removed"] == pytest.approx(float(np.mean(rates)), abs=1e-9)
    half = quality.evaluate(data, quality.by_ratio(0.5))
    assert 0.3 < half["removed"] < 0.7
