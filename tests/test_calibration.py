"""Calibrated scores (manifest "calibration"), the relative cut (relative_threshold) and the
passage cut (passage_threshold), on real ONNX Runtime sessions of the shipped model and a copy
of it with a rewritten manifest."""

import json
import shutil

import numpy as np
import pytest

import thresher
from thresher.manifest import MANIFEST

from .conftest import load_jsonl


def _record():
    rec = load_jsonl("hotpotqa_distractor", limit=1)[0]
    return rec["question"], [{"title": t, "text": "".join(s)} for t, s in rec["context"]]


def _with(raw_default_dir, tmp_path, **changes):
    copy = tmp_path / "model"
    shutil.copytree(raw_default_dir, copy)
    manifest = json.loads((copy / MANIFEST).read_text()) | changes
    (copy / MANIFEST).write_text(json.dumps(manifest))
    return thresher.Compressor.load(copy)


def test_calibration_maps_scores_through_the_fitted_sigmoid(raw_default_dir, tmp_path):
    question, passages = _record()
    raw = thresher.Compressor.load(raw_default_dir).compress(question, passages)
    cal = _with(raw_default_dir, tmp_path, calibration={"sentence": [0.7, -0.4], "rerank": [0.5, 0.25]})
    got = cal.compress(question, passages)
    p = np.clip([s.score for r in raw.passages for s in r.sentences], 1e-7, 1 - 1e-7)
    want = 1 / (1 + np.exp(-(0.7 * np.log(p / (1 - p)) - 0.4)))
    np.testing.assert_allclose([s.score for r in got.passages for s in r.sentences], want, rtol=1e-6)
    z = np.array([r.rerank_score for r in raw.passages], np.float64)
    np.testing.assert_allclose([r.rerank_score for r in got.passages], 1 / (1 + np.exp(-(0.5 * z + 0.25))),
                               rtol=1e-6)
    assert cal.rerank_scale == "probability"  # the rerank front doors then apply no second sigmoid
    # monotone: the same sentences rank in the same order
    assert np.array_equal(np.argsort(want, kind="stable"),
                          np.argsort([s.score for r in got.passages for s in r.sentences], kind="stable"))


def test_passage_cut_empties_exactly_the_passages_below_it(default_compressor):
    question, passages = _record()
    base = default_compressor.compress(question, passages, passage_threshold=-1e9, threshold=0.0)
    rerank = sorted(p.rerank_score for p in base.passages)
    cut = (rerank[4] + rerank[5]) / 2  # half of the passages fall below
    got = default_compressor.compress(question, passages, passage_threshold=cut, threshold=0.0)
    for b, g in zip(base.passages, got.passages):
        if b.rerank_score < cut:
            assert g.pruned_text == "" and not any(s.kept for s in g.sentences)
        else:
            assert g.pruned_text == b.pruned_text != ""
        assert [s.score for s in g.sentences] == [s.score for s in b.sentences]  # scores are not touched


def test_passage_cut_from_the_manifest_is_the_default_and_a_call_overrides_it(raw_default_dir, tmp_path):
    question, passages = _record()
    c = _with(raw_default_dir, tmp_path, passage_threshold=1e9)  # a raw logit never reaches it
    assert c.passage_threshold == 1e9
    assert c.compress(question, passages).compression_rate == 1.0
    assert c.compress(question, passages, passage_threshold=-1e9, threshold=0.0).compression_rate < 0.05
    # an explicit threshold or keep_ratio replaces the model's operating point, cuts included ...
    assert c.compress(question, passages, threshold=0.0).compression_rate < 0.05
    assert c.compress(question, passages, keep_ratio=0.5).compression_rate < 0.6
    # ... unless the call sets a cut itself
    assert c.compress(question, passages, keep_ratio=0.5, passage_threshold=1e9).compression_rate == 1.0


def test_relative_cut_keeps_what_reaches_its_share_of_the_passage_best(default_compressor):
    question, passages = _record()
    base = default_compressor.compress(question, passages, threshold=0.0, relative_threshold=0.0,
                                       passage_threshold=-1e9)
    got = default_compressor.compress(question, passages, threshold=0.0, relative_threshold=0.5,
                                      passage_threshold=-1e9)
    dropped = 0
    for b, g in zip(base.passages, got.passages):
        best = max(s.score for s in b.sentences)
        assert [s.kept for s in g.sentences] == [s.score >= 0.5 * best for s in b.sentences]
        assert any(s.kept for s in g.sentences)  # the passage's best sentence always reaches it
        dropped += sum(not s.kept for s in g.sentences)
    assert dropped  # the cut did something on this request


@pytest.mark.parametrize("options, error", [
    ({"passage_threshold": float("nan")}, "passage_threshold must be a finite number"),
    ({"passage_threshold": "0.2"}, "passage_threshold must be a number"),
    ({"relative_threshold": 1.5}, r"relative_threshold must be in \[0, 1\]"),
])
def test_bad_cut_options_name_the_field(default_compressor, options, error):
    with pytest.raises((TypeError, ValueError), match=error):
        default_compressor.compress("Who?", ["A sentence."], **options)


def test_a_default_relative_cut_merges_with_an_items_keep_ratio(default_compressor):
    """compress_batch / batch jobs merge job-wide options under each item's: a job-wide relative
    cut must not refuse an item in budget mode (it has no effect there)."""
    question, passages = _record()
    got = default_compressor.compress_batch([{"question": question, "passages": passages, "keep_ratio": 0.5}],
                                            relative_threshold=0.3, progress=False)[0]
    want = default_compressor.compress(question, passages, keep_ratio=0.5)
    assert [p.pruned_text for p in got.passages] == [p.pruned_text for p in want.passages]
