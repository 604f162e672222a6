"""One compression from validated requests: segment -> score -> select -> assemble."""

from __future__ import annotations

import time

import numpy as np

from thresher.engine.reduce import keep_by_ratio, keep_by_threshold
from thresher.engine.request import Request
from thresher.engine.result import CompressionResult, assemble
from thresher.engine.scorer import ScoreInput, Scorer, Scores
from thresher.engine.segment import get_segmenter
from thresher.engine.timing import timed


def select(request: Request, spans: tuple[np.ndarray, ...], scores: Scores, scorer: Scorer):
    """Keep flags per passage: threshold mode (score >= threshold and >= relative_threshold x the
    passage's best score), or keep_ratio over the whole request; then the passage cut (passages
    whose rerank score is below passage_threshold keep nothing).

    A request without threshold and keep_ratio gets the model's whole operating point (threshold,
    relative and passage cuts). One that sets threshold or keep_ratio gets exactly that, plus only
    the cuts it sets itself: threshold=t means score >= t, as everywhere else."""
    opts = request.options
    model_point = opts.threshold is None and opts.keep_ratio is None
    relative, cut = opts.relative_threshold, opts.passage_threshold
    if model_point:
        relative = getattr(scorer, "relative_threshold", None) if relative is None else relative
        cut = getattr(scorer, "passage_threshold", None) if cut is None else cut
    if opts.keep_ratio is None:
        threshold = scorer.threshold if opts.threshold is None else opts.threshold
        keep = [keep_by_threshold(s, threshold) for s in scores.sentences]
        if relative:  # a share of the passage's best score; a best <= 0 (cosines) cuts nothing
            best = [s.max(initial=0.0) for s in scores.sentences]
            keep = [k & ((b <= 0) | (s >= relative * b)) for k, s, b in zip(keep, scores.sentences, best)]
    else:
        counts = [s.shape[0] for s in scores.sentences]
        if not sum(counts):
            return [np.zeros(0, bool) for _ in counts]
        flat_scores = np.concatenate(scores.sentences)
        lengths = np.concatenate([sp[:, 1] - sp[:, 0] for sp in spans])
        keep = np.split(keep_by_ratio(flat_scores, lengths, opts.keep_ratio), np.cumsum(counts)[:-1])
    if cut is not None and scores.rerank is not None:  # every kind has a rerank score today
        keep = [k & (r >= cut) for k, r in zip(keep, scores.rerank.tolist())]
    return keep


def compress_requests(scorer: Scorer, requests: list[Request]) -> list[CompressionResult]:
    """Run a batch of requests through one scorer call; every result gets the batch's timings."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    segment = get_segmenter(scorer.segmenter)
    with timed(timings, "segment"):
        items = [
            ScoreInput(r.question, r.passages, tuple(segment(p.text) for p in r.passages))
            for r in requests
        ]
    scored = scorer.score(items, timings)
    results = []
    for request, item, scores in zip(requests, items, scored):
        with timed(timings, "reduce"):
            keep = select(request, item.spans, scores, scorer)
        with timed(timings, "assemble"):
            results.append(assemble(request, list(item.spans), list(scores.sentences), keep, scores.rerank,
                                    timings, scorer.name, getattr(scorer, "sentence_joiner", None)))
    timings["total"] = (time.perf_counter() - t0) * 1e3
    return results
