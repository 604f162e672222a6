"""Chunkers: LGMGC (logits-guided parents + multi-granular children) and baselines.

    >>> from thresher.chunking import make_chunker
    >>> chunks = make_chunker("lgmgc", 200).chunk(text)   # Chunk(start, end, level, parent)
    >>> parents = [c for c in chunks if c.level == 0]      # partition `text` exactly

Retrieval over chunks (BM25 or dense, small-to-big): thresher.chunking.retrieve.ChunkIndex;
a hit's text is `text[slice(*chunk.returned_span)]` (the sentence window for "sentence-window").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from thresher._lazy import lazy_exports

if TYPE_CHECKING:
    from thresher.chunking.base import Chunk, Chunker

# Chunk and Chunker import numpy: loaded on first use, so `thresher --help` can read METHODS cheaply.
__getattr__, __dir__ = lazy_exports(__name__, {"Chunk": "thresher.chunking.base", "Chunker": "thresher.chunking.base"})

METHODS = ("lgmgc", "logits-guided", "fixed-words", "fixed-tokens", "recursive", "semantic",
           "sentences", "mg-sentences", "sentence-window")


def make_chunker(method: str, size: int, *, model="smollm2-eos") -> Chunker:
    """A chunker by name. `size` is theta in words (tokens for fixed-tokens); `model` is the
    causal-eos model of the logits-guided methods (a name, directory, or CausalEosModel)."""
    from thresher.chunking import baselines
    from thresher.chunking.multigranular import MultiGranularChunker

    if method in ("lgmgc", "logits-guided"):
        from thresher.chunking.logits_guided import LogitsGuidedChunker

        parents = LogitsGuidedChunker(size, model)
        return MultiGranularChunker(parents) if method == "lgmgc" else parents
    simple = {"fixed-words": baselines.FixedWordsChunker, "fixed-tokens": baselines.FixedTokensChunker,
              "recursive": baselines.RecursiveChunker, "semantic": baselines.SemanticChunker,
              "sentences": baselines.SentencesChunker, "sentence-window": baselines.SentenceWindowChunker}
    if method in simple:
        return simple[method](size)
    if method == "mg-sentences":
        return MultiGranularChunker(baselines.SentencesChunker(size))
    raise ValueError(f"unknown chunking method {method!r}; available: {list(METHODS)}")


__all__ = ["METHODS", "Chunk", "Chunker", "make_chunker"]
