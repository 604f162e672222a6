"""The flat varlen batch shared by every scorer: pack sequences (C++), then cut into runs.

Sequences arrive as one flat id buffer + cu_seqlens (+ a per-token label, usually a global
sentence id). thresher._native.Packer places them first-fit-decreasing into rows of at most
row_len tokens; split_runs() then groups rows into model calls of at most max_batch_tokens
(rows x width, the work actually computed with padding).
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


def split_runs(packed: PackedRows, max_batch_tokens: int) -> Iterator[PackedRows]:
    """Yield consecutive row slices whose padded size (rows x fullest row) fits the budget.

    FFD emits rows fullest first, so slices stay dense. A single row always forms a run.
    """
    fill = (packed.segment_ids > 0).sum(axis=1)
    start, n = 0, fill.shape[0]
    while start < n:
        stop, width = start + 1, int(fill[start])
        while stop < n and (stop + 1 - start) * max(width, int(fill[stop])) <= max_batch_tokens:
            width = max(width, int(fill[stop]))
            stop += 1
        yield packed.rows(slice(start, stop))
        start = stop
