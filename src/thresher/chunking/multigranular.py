"""LGMGC's multi-granular chunker: every parent also yields children of ~size/2 and ~size/4 words.

As in the paper, children come from recursive subdivision: each parent is cut into θ/2
children and each θ/2 child into θ/4 children, so a θ/4 child never straddles two θ/2
children. Cuts fall on sentence units packed greedily, so a child never splits a sentence and
the children of a chunk partition it exactly. A child equal to the chunk it subdivides is kept
(the paper gives every chunk its children; a short parent's θ/2 level is then the parent
itself), so every parent has every level. Retrieval indexes every level and scores a parent by
the best of itself and its children (small-to-big, see retrieve.py).
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
        coarser = [Chunk(c.start, c.end, 0, p) for p, c in enumerate(parents)]  # parent = own index
        for level, divisor in enumerate(LEVEL_DIVISORS, start=1):
            child_size = max(1, self.size // divisor)
            finer = []
            for chunk in coarser:
                inner = units[(units > chunk.start) & (units < chunk.end)]
                bounds = np.concatenate([[chunk.start], inner, [chunk.end]]).astype(np.int64)
                group = pack_units(words_in(bounds, starts), child_size)
                edges = np.concatenate([bounds[group], [chunk.end]]).tolist()
                finer += [Chunk(a, b, level, chunk.parent) for a, b in zip(edges, edges[1:])]
            out += finer
            coarser = finer
        return out
