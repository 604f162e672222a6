"""Vectorised reductions after the model: token values -> sentence scores -> keep flags.

These are the CPU twins of thresher.kernels: one NumPy pass over flat arrays, no Python loop
over tokens or sentences.
"""

from __future__ import annotations

import numpy as np


def segment_mean(values: np.ndarray, labels: np.ndarray, n_segments: int) -> np.ndarray:
    """Mean of `values` rows per label in [0, n_segments); label -1 is ignored.

    values: [N] or [N, D]; labels: int [N]. Returns float32 [n_segments] or [n_segments, D];
    a segment without tokens gets 0.
    """
    ok = labels >= 0
    lab = labels[ok]
    vals = values[ok].astype(np.float64)
    counts = np.bincount(lab, minlength=n_segments)
    if vals.ndim == 1:
        sums = np.bincount(lab, weights=vals, minlength=n_segments)
        return (sums / np.maximum(counts, 1)).astype(np.float32)
    order = np.argsort(lab, kind="stable")
    present = np.flatnonzero(counts)
    sums = np.zeros((n_segments, vals.shape[1]), dtype=np.float64)
    if present.size:
        starts = np.concatenate(([0], np.cumsum(counts[present])[:-1]))
        sums[present] = np.add.reduceat(vals[order], starts, axis=0)
    return (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)


def keep_by_threshold(scores: np.ndarray, threshold: float) -> np.ndarray:
    return scores >= threshold


def keep_by_ratio(scores: np.ndarray, lengths: np.ndarray, ratio: float) -> np.ndarray:
    """Keep the best-scoring sentences until `ratio` of all characters is kept.

    Ties are broken by position (earlier first). At least one sentence is kept when any exist.
    """
    n = scores.shape[0]
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    order = np.lexsort((np.arange(n), -scores))
    cum = np.cumsum(lengths[order])
    budget = ratio * cum[-1]
    count = int(np.searchsorted(cum, budget, side="left")) + 1
    keep[order[: min(count, n)]] = True
    return keep
