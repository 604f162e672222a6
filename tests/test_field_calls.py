"""Calls RAG code already makes: CrossEncoder-style predict/rank, compress_batch's progress bar,
and the async API that must not block the event loop."""

import asyncio
import time

import numpy as np
import pytest

from thresher.scorers.scale import LOGIT, PROBABILITY, rerank_scale

from .conftest import load_jsonl

PAIRS = [("Who wrote Hamlet?", "Hamlet is a tragedy. It was written by William Shakespeare."),
         ("Who wrote Hamlet?", "Paris is the capital of France."),
         ("What do cats do?", {"title": "Cats", "text": "Cats sleep most of the day."})]


def test_predict_activations(logit_compressor, default_compressor, cosine_compressor):
    assert logit_compressor.rerank_scale == LOGIT == rerank_scale(logit_compressor.scorer)
    raw = logit_compressor.score(PAIRS)
    default = logit_compressor.predict(PAIRS)
    assert default.dtype == np.float32 and default.shape == (3,)
    np.testing.assert_allclose(default, 1 / (1 + np.exp(-raw.astype(np.float64))), rtol=1e-6)
    assert ((default > 0) & (default < 1)).all() and default[0] > default[1]
    np.testing.assert_array_equal(logit_compressor.predict(PAIRS, activation_fn="none"), raw)
    np.testing.assert_array_equal(logit_compressor.predict(PAIRS, activation_fn="sigmoid"), default)
    # the shipped default's rerank score is already a calibrated probability: no second sigmoid
    assert default_compressor.rerank_scale == PROBABILITY
    calibrated = default_compressor.predict(PAIRS)
    np.testing.assert_array_equal(calibrated, default_compressor.score(PAIRS))
    assert ((calibrated > 0) & (calibrated < 1)).all() and calibrated[0] > calibrated[1]
    # a cosine is not a logit: the default leaves it as it is
    assert cosine_compressor.rerank_scale == "cosine"
    np.testing.assert_array_equal(cosine_compressor.predict(PAIRS), cosine_compressor.score(PAIRS))
    with pytest.raises(ValueError, match="activation_fn must be one of"):
        default_compressor.predict(PAIRS, activation_fn="softmax")
    with pytest.raises(TypeError, match="wrap a single pair in a list"):
        default_compressor.predict(PAIRS[0])


def test_rank_is_independent_of_batch_size(default_compressor, capsys):
    row = load_jsonl("hotpotqa_distractor", limit=1)[0]
    docs = ["".join(s) for _, s in row["context"]]
    whole = default_compressor.rank(row["question"], docs, return_documents=True)
    assert [d["corpus_id"] for d in whole] == list(np.argsort(-default_compressor.score(
        [(row["question"], d) for d in docs]), kind="stable"))
    assert all(d["text"] == docs[d["corpus_id"]] for d in whole)
    capsys.readouterr()
    small = default_compressor.rank(row["question"], docs, batch_size=3, top_k=4, show_progress_bar=True)
    assert small == [{"corpus_id": d["corpus_id"], "score": d["score"]} for d in whole[:4]]
    assert "compress" in capsys.readouterr().err  # the bar was asked for
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        default_compressor.rank("q", ["a"], batch_size=0)


def test_progress_bar_only_when_long_or_asked(default_compressor, capsys):
    few = [("Who wrote Hamlet?", ["Shakespeare wrote Hamlet."])] * 3
    default_compressor.compress_batch(few)
    assert capsys.readouterr().err == ""
    default_compressor.compress_batch(few, progress=True)
    assert "3/3" in capsys.readouterr().err
    many = [("Who wrote Hamlet?", ["Shakespeare wrote Hamlet."])] * 101
    default_compressor.compress_batch(many, batch_size=32)
    assert "101/101" in capsys.readouterr().err
    default_compressor.compress_batch(many, progress=False, batch_size=32)
    assert capsys.readouterr().err == ""


def test_async_calls_keep_the_event_loop_running(default_compressor):
    row = load_jsonl("hotpotqa_distractor", limit=1)[0]
    passages = [{"title": t, "text": "".join(s)} for t, s in row["context"]] * 4

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        before, started = ticks, time.perf_counter()
        result = await default_compressor.acompress(row["question"], passages, keep_ratio=0.3)
        during, elapsed = ticks - before, time.perf_counter() - started
        batch = await default_compressor.acompress_batch([(row["question"], passages[:3])] * 2)
        before = ticks
        default_compressor.compress(row["question"], passages, keep_ratio=0.3)  # blocking, for contrast
        blocked = ticks - before
        stop.set()
        await task
        return result, batch, during, elapsed, blocked

    result, batch, during, elapsed, blocked = asyncio.run(main())
    assert result.pruned_passages == default_compressor.compress(row["question"], passages,
                                                                 keep_ratio=0.3).pruned_passages
    assert [b.pruned_passages for b in batch] == [
        r.pruned_passages for r in default_compressor.compress_batch([(row["question"], passages[:3])] * 2)]
    assert blocked == 0
    # the loop ran while the model did: at least a tenth of the 5 ms ticks that fit in the call
    assert during >= max(3, int(0.1 * elapsed / 0.005)), (during, elapsed)
