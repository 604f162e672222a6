"""The public API on the embedded default model: result contract, options, bad input."""

import json

import numpy as np
import pytest

import thresher

from .conftest import load_jsonl

PASSAGES = [
    "Hamlet is a tragedy. It was written by William Shakespeare around 1600. The play is set in Denmark.",
    {"title": "Paris", "text": "Paris is the capital of France.  It has many museums.\nThe Louvre is one."},
    "",
    "A single sentence without a final stop",
]


def _check_contract(result, passages):
    assert len(result.passages) == len(passages)
    total = kept = 0
    for p in result.passages:
        src = passages[p.index]
        text = src if isinstance(src, str) else src["text"]
        assert p.text == text
        spans = [(s.start, s.end) for s in p.sentences]
        assert spans == sorted(spans)
        for (a, b), s in zip(spans, p.sentences):
            assert 0 <= a < b <= len(text)
            assert text[a:b] == text[a:b].strip()
            assert np.isfinite(s.score)
        # every non-space character belongs to a sentence: nothing silently lost
        covered = np.zeros(len(text), bool)
        for a, b in spans:
            covered[a:b] = True
        assert all(c.isspace() for c, cov in zip(text, covered) if not cov)
        # pruned text: kept sentences, byte-exact, original order
        pos = 0
        for j, s in enumerate(p.sentences):
            if s.kept:
                at = p.pruned_text.find(p.sentence_text(j), pos)
                assert at >= 0
                pos = at + len(p.sentence_text(j))
        if not any(s.kept for s in p.sentences):
            assert p.pruned_text == ""
        total += len(text)
        kept += len(p.pruned_text)
    assert result.compression_rate == pytest.approx(1 - kept / total if total else 0.0)


def test_compress_contract(default_compressor):
    r = default_compressor.compress("Who wrote Hamlet?", PASSAGES)
    _check_contract(r, PASSAGES)
    assert [p.index for p in r.passages] == [0, 1, 2, 3]
    hamlet = r.passages[0]
    assert hamlet.sentences[1].kept and "Shakespeare" in hamlet.pruned_text
    assert r.passages[1].title == "Paris"
    assert r.passages[2].sentences == () and r.passages[2].pruned_text == ""
    assert len(r.passages[3].sentences) == 1
    assert set(r.timings_ms) >= {"segment", "tokenize", "pack", "run", "reduce", "assemble", "total"}
    d = json.loads(json.dumps(r.to_dict()))
    assert d["passages"][0]["sentences"][1]["text"] == hamlet.sentence_text(1)
    assert d["compression_rate"] == r.compression_rate


def test_threshold_is_monotone(default_compressor):
    q = "Who wrote Hamlet?"
    loose = default_compressor.compress(q, PASSAGES, threshold=-1.0)
    strict = default_compressor.compress(q, PASSAGES, threshold=1.01)
    assert loose.compression_rate == pytest.approx(0.0, abs=0.02)  # only inter-run spaces differ
    assert strict.compression_rate == 1.0
    assert all(p.pruned_text == "" for p in strict.passages)


def test_keep_ratio_budget(default_compressor):
    records = load_jsonl("hotpotqa_distractor", limit=3)
    for rec in records:
        passages = [{"title": t, "text": "".join(s)} for t, s in rec["context"]]
        for ratio in (0.2, 0.5):
            r = default_compressor.compress(rec["question"], passages, keep_ratio=ratio)
            kept_chars = sum(s.end - s.start for p in r.passages for s in p.sentences if s.kept)
            all_chars = sum(s.end - s.start for p in r.passages for s in p.sentences)
            assert kept_chars >= ratio * all_chars
            # the kept set is the best-scoring prefix: no dropped sentence beats a kept one
            kept = [s.score for p in r.passages for s in p.sentences if s.kept]
            dropped = [s.score for p in r.passages for s in p.sentences if not s.kept]
            assert not dropped or min(kept) >= max(dropped)


def test_reorder_top_k_and_rank(default_compressor):
    q = "Who wrote Hamlet?"
    r = default_compressor.compress(q, PASSAGES, reorder=True, top_k=2)
    scores = [p.rerank_score for p in r.passages]
    assert len(r.passages) == 2 and scores == sorted(scores, reverse=True)
    assert r.passages[0].index == 0
    ranked = default_compressor.rank(q, [p if isinstance(p, str) else p["text"] for p in PASSAGES],
                                     return_documents=True)
    assert [x["corpus_id"] for x in ranked][:1] == [0] and "text" in ranked[0]
    pair_scores = default_compressor.score([(q, PASSAGES[0]), (q, PASSAGES[1]["text"])])
    assert pair_scores.dtype == np.float32 and pair_scores[0] > pair_scores[1]


def test_batch_equals_single(default_compressor):
    records = load_jsonl("hotpotqa_distractor", limit=5)
    items = [(r["question"], ["".join(s) for _, s in r["context"]]) for r in records]
    batched = default_compressor.compress_batch(items, progress=False, batch_size=3)
    for (q, ps), got in zip(items, batched):
        want = default_compressor.compress(q, ps)
        assert [p.pruned_text for p in got.passages] == [p.pruned_text for p in want.passages]
        for a, b in zip(got.passages, want.passages):
            np.testing.assert_allclose([s.score for s in a.sentences], [s.score for s in b.sentences],
                                       atol=1e-5)


def test_megabyte_passage_is_processed_completely(default_compressor):
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "
    text = sentence * (1_000_000 // len(sentence))
    text += "Word " * 2000  # one sentence far longer than the model window, without punctuation
    r = default_compressor.compress("Where does the fox jump?", [text], threshold=-1.0)
    p = r.passages[0]
    assert len(p.sentences) == 1_000_000 // len(sentence) + 1
    assert p.sentences[-1].end == len(text.rstrip())
    assert len(p.pruned_text) == len(text.rstrip())


@pytest.mark.parametrize(
    ("question", "passages", "options", "error", "words"),
    [
        ("", ["x"], {}, ValueError, "question is empty"),
        (None, ["x"], {}, TypeError, "question must be a string"),
        (3, ["x"], {}, TypeError, "question"),
        ("q", "just a string", {}, TypeError, "passages must be a list"),
        ("q", [1], {}, TypeError, "passages[0]"),
        ("q", ["ok", {"txt": "x"}], {}, ValueError, "passages[1] has unknown keys"),
        ("q", [{"title": "t"}], {}, ValueError, "without 'text'"),
        ("q", [{"text": 5}], {}, TypeError, "passages[0].text"),
        ("q", ["x"], {"threshold": float("nan")}, ValueError, "threshold must be a finite number"),
        ("q", ["x"], {"keep_ratio": 0.0}, ValueError, "keep_ratio must be in (0, 1]"),
        ("q", ["x"], {"keep_ratio": 0.5, "threshold": 0.1}, ValueError, "either threshold or keep_ratio"),
        ("q", ["x"], {"top_k": 0}, ValueError, "top_k must be >= 1"),
        ("q", ["x"], {"top_k": 1.5}, TypeError, "top_k must be an int"),
        ("q", ["x"], {"reorder": "yes"}, TypeError, "reorder must be a bool"),
        ("q" * 5000, ["x"], {}, ValueError, "question has 5,000 characters"),
    ],
)
def test_bad_input_names_the_field(default_compressor, question, passages, options, error, words):
    with pytest.raises(error, match=None) as info:
        default_compressor.compress(question, passages, **options)
    assert words in str(info.value)


def test_limits_are_enforced():
    from thresher.engine.request import Limits, Options, validate

    limits = Limits(max_passages=2, max_passage_chars=10, max_request_chars=15)
    with pytest.raises(ValueError, match="passages has 3 items; the limit is 2"):
        validate("q", ["a", "b", "c"], Options(), limits)
    with pytest.raises(ValueError, match=r"passages\[1\] has 11 characters; the limit is 10"):
        validate("q", ["a", "x" * 11], Options(), limits)
    with pytest.raises(ValueError, match="16 characters together"):
        validate("q", ["x" * 8, "y" * 8], Options(), limits)


def test_empty_passage_list(default_compressor):
    r = default_compressor.compress("anything?", [])
    assert r.passages == () and r.compression_rate == 0.0


def test_compress_batch_errors_name_the_item(default_compressor):
    with pytest.raises(ValueError, match=r"items\[1\]: question is empty"):
        default_compressor.compress_batch([("q", ["a"]), ("", ["b"])], progress=False)
    with pytest.raises(TypeError, match=r"items\[0\]"):
        default_compressor.compress_batch(["not a pair"], progress=False)


def test_import_loads_neither_torch_nor_triton():
    import subprocess
    import sys

    code = "import sys, thresher; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_cached_default_loads_and_runs_without_torch(default_compressor):
    """Only the first load exports (with torch); later loads need only ONNX Runtime."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises
            "import thresher\n"
            "r = thresher.Compressor.load('default').compress('Who wrote Hamlet?', ['Shakespeare wrote it. Rain.'])\n"
            "print(len(r.passages[0].sentences), 'torch' in sys.modules and sys.modules['torch'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "False"]


def test_list_models_names_the_default():
    assert "default" in thresher.list_models()
