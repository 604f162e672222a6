"""The flat varlen batch shared by every scorer: pack sequences (C++), then cut into runs.

Sequences arrive as one flat id buffer + cu_seqlens (+ a per-token label, usually a global
sentence id). thresher._native.Packer places them first-fit-decreasing into rows of at most
row_len tokens; split_runs() then groups rows into model calls of at most call_tokens
(rows x width, the work actually computed with padding). cut_runs() is that one rule on row
lengths alone, used by every scorer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from thresher._native import Packer


@dataclass(frozen=True)
class PackedRows:
    input_ids: np.ndarray  # int64 [R, W]
    position_ids: np.ndarray  # int64 [R, W], restart at 0 per sequence
    segment_ids: np.ndarray  # int32 [R, W], 0 = padding, k = k-th sequence of the row
    labels: np.ndarray  # int32 [R, W], caller's per-token label, -1 = padding
    placement: np.ndarray  # int64 [N, 3]: row, start, length of each input sequence

    @property
    def real_tokens(self) -> int:
        return int(np.count_nonzero(self.segment_ids))

    def rows(self, sl: slice) -> PackedRows:
        """A slice of rows, trimmed to its own fullest row."""
        seg = self.segment_ids[sl]
        width = int((seg > 0).sum(axis=1).max()) if seg.size else 0
        return PackedRows(self.input_ids[sl, :width], self.position_ids[sl, :width], seg[:, :width],
                          self.labels[sl, :width], self.placement)


def pack(ids: np.ndarray, cu_seqlens: np.ndarray, labels: np.ndarray, row_len: int,
         max_seqs_per_row: int = 0, pad_id: int = 0) -> PackedRows:
    out = Packer(row_len, max_seqs_per_row, pad_id).pack(ids, cu_seqlens, labels)
    return PackedRows(**out)


def _narrowest_row_len(ids: np.ndarray, cu: np.ndarray, labels: np.ndarray, row_len: int,
                       max_seqs_per_row: int) -> int:
    """Least row length (binary search, >= the longest sequence) that packs into as few rows as
    row_len does. Costs ~8 extra packs of one request: microseconds in C++."""
    rows = Packer(row_len, max_seqs_per_row).pack(ids, cu, labels)["segment_ids"].shape[0]
    lo, hi = max(int(np.diff(cu).max()), -(-ids.shape[0] // max(rows, 1))), row_len
    while lo < hi:
        mid = (lo + hi) // 2
        if Packer(mid, max_seqs_per_row).pack(ids, cu, labels)["segment_ids"].shape[0] <= rows:
            hi = mid
        else:
            lo = mid + 1
    return hi


def pack_groups(ids: np.ndarray, cu_seqlens: np.ndarray, labels: np.ndarray, group_bounds: np.ndarray,
                row_len: int, min_row_len: int | None = None, max_seqs_per_row: int = 0,
                pad_id: int = 0) -> PackedRows:
    """Pack each group of consecutive sequences (group g = sequences group_bounds[g] to
    group_bounds[g+1]) into rows of its own, then stack all rows fullest first.

    With min_row_len, a group's rows are only as long as its longest sequence (at least
    min_row_len, at most row_len), then narrowed to the least length that still needs no more
    rows: the last row's padding is spread thin instead of padding it to full width.

    A request packed as one group gets the same rows, at the same offsets, whatever else shares
    the call; with int8 models, where a last-bit difference can flip a rounding, that is what
    makes a server's batched answers equal to one-at-a-time answers.
    """
    parts, base = [], 0
    for s0, s1 in zip(group_bounds[:-1], group_bounds[1:]):
        if s1 == s0:
            continue
        t0, t1 = cu_seqlens[s0], cu_seqlens[s1]
        g_ids, g_cu, g_labels = ids[t0:t1], cu_seqlens[s0:s1 + 1] - t0, labels[t0:t1]
        group_len = row_len
        if min_row_len is not None:
            group_len = min(row_len, max(min_row_len, int(np.diff(g_cu).max())))
            group_len = _narrowest_row_len(g_ids, g_cu, g_labels, group_len, max_seqs_per_row)
        part = pack(g_ids, g_cu, g_labels, group_len, max_seqs_per_row, pad_id)
        parts.append((part, base))
        base += part.input_ids.shape[0]
    if not parts:
        return pack(ids[:0], cu_seqlens[:1], labels[:0], row_len, max_seqs_per_row, pad_id)
    width = max(p.input_ids.shape[1] for p, _ in parts)

    def stacked(name: str, fill: int) -> np.ndarray:
        arrays = [getattr(p, name) for p, _ in parts]
        return np.concatenate([np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)
                               for a in arrays])

    rows = PackedRows(stacked("input_ids", pad_id), stacked("position_ids", 0), stacked("segment_ids", 0),
                      stacked("labels", -1),
                      np.concatenate([p.placement + [b, 0, 0] for p, b in parts]))
    order = np.argsort(-(rows.segment_ids > 0).sum(axis=1), kind="stable")
    new_row = np.empty_like(order)
    new_row[order] = np.arange(order.shape[0])
    placement = rows.placement.copy()
    placement[:, 0] = new_row[placement[:, 0]]
    return PackedRows(rows.input_ids[order], rows.position_ids[order], rows.segment_ids[order],
                      rows.labels[order], placement)


def cut_runs(fill: np.ndarray, call_tokens: float, min_fill: float = 0.5) -> Iterator[slice]:
    """Consecutive slices of rows (usually fullest first; fill = real tokens per row) for model calls.

    A run's padded size (rows x its widest row) stays within call_tokens, and a run ends before
    a row filled less than min_fill of the run's widest row so far, so a short tail gets a narrow
    call of its own (min_fill=0: the budget alone decides). A single row always forms a run.
    """
    start, n = 0, len(fill)
    while start < n:
        stop, width = start + 1, int(fill[start])
        while stop < n and fill[stop] >= min_fill * width and (stop + 1 - start) * max(width, int(fill[stop])) <= call_tokens:
            width = max(width, int(fill[stop]))
            stop += 1
        yield slice(start, stop)
        start = stop


def split_runs(packed: PackedRows, call_tokens: int, min_fill: float = 0.5) -> Iterator[PackedRows]:
    """cut_runs over packed rows (fullest first, as pack_groups and the FFD packer leave them)."""
    for run in cut_runs((packed.segment_ids > 0).sum(axis=1), call_tokens, min_fill):
        yield packed.rows(run)
