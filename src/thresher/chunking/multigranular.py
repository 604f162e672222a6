"""LGMGC's multi-granular chunker: every parent also yields children of ~size/2 and ~size/4 words.

Children are whole sentence units packed greedily inside their parent, so a child never splits
a sentence and never crosses its parent's boundary; the children of one level partition their
parent exactly. A child identical to its parent or to a coarser child is dropped (a short
parent has no finer children). Retrieval indexes every level and scores a parent by the best of
itself and its children (small-to-big, see retrieve.py).
"""

from __future__ import annotations

import numpy as np

from thresher.chunking.base import (
    Chunk,
    Chunker,
    check_text,
    chunk_units,
    pack_units,
    word_starts,
    words_in,
)

LEVEL_DIVISORS = (2, 4)  # children of size // 2 and size // 4 words


class MultiGranularChunker:
    """Parents from `parent_chunker` (LGMGC's logits-guided chunker, or any baseline)."""

    def __init__(self, parent_chunker: Chunker, size: int | None = None, segmenter: str = "rules"):
        self.parents = parent_chunker
        self.size = int(size or parent_chunker.size)
        self.segmenter = getattr(parent_chunker, "segmenter", segmenter)
        self.name = f"mg-{parent_chunker.name}"

    def chunk(self, text: str) -> list[Chunk]:
        return self.add_children(check_text(text), self.parents.chunk(text))

    def chunk_many(self, texts: list[str]) -> list[list[Chunk]]:
        many = getattr(self.parents, "chunk_many", None)
        parents = many(texts) if many else [self.parents.chunk(t) for t in texts]
        return [self.add_children(t, p) for t, p in zip(texts, parents)]

    def add_children(self, text: str, parents: list[Chunk]) -> list[Chunk]:
        """parents (level 0, in order) followed by their children, level by level."""
        if not parents:
            return []
        units = chunk_units(text, self.size, self.segmenter)
        starts = word_starts(text)
        out = list(parents)
        seen = {(c.start, c.end) for c in parents}
        for divisor in LEVEL_DIVISORS:
            child_size = max(1, self.size // divisor)
            for p, parent in enumerate(parents):
                inner = units[(units > parent.start) & (units < parent.end)]
                bounds = np.concatenate([[parent.start], inner, [parent.end]]).astype(np.int64)
                group = pack_units(words_in(bounds, starts), child_size)
                edges = np.concatenate([bounds[group], [parent.end]]).tolist()
                for a, b in zip(edges, edges[1:]):
                    if (a, b) not in seen:
                        seen.add((a, b))
                        out.append(Chunk(a, b, LEVEL_DIVISORS.index(divisor) + 1, p))
        return out
