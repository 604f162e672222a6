"""What every scorer (one per model kind) offers the engine.

A scorer turns segmented requests into per-sentence scores (higher = more useful) and, where
the model has one, a rerank score per passage. It is built from a model directory and holds no
per-call state, so one instance serves concurrent calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from thresher.engine.request import Passage


@dataclass(frozen=True)
class ScoreInput:
    question: str
    passages: tuple[Passage, ...]
    spans: tuple[np.ndarray, ...]  # per passage: int64 [S, 2] sentence offsets into passage.text


@dataclass(frozen=True)
class Scores:
    sentences: tuple[np.ndarray, ...]  # per passage: float32 [S]
    rerank: np.ndarray | None  # float32 [P], or None when the model has no rerank score


class Scorer(Protocol):
    kind: str
    name: str
    threshold: float  # the model's default keep threshold (keep when score >= threshold)
    segmenter: str  # name in thresher.engine.segment.SEGMENTERS
    # Optional: `sentence_joiner: str` makes pruned text the kept sentences joined by it (as a
    # reference system returns them) instead of byte-exact runs; see engine/result.py.

    def score(self, items: list[ScoreInput], timings: dict[str, float]) -> list[Scores]:
        """Score a batch of requests; adds tokenize/pack/run/reduce milliseconds to `timings`."""
        ...
