"""Retrieval over the chunks of one document: BM25 (bm25s) or the default dense embedder.

Small-to-big: every chunk of every level is indexed; a parent's score is the maximum over
itself and its children, and the ranking returns parents. For single-level chunkers that is
plain chunk retrieval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from thresher.chunking.base import Chunk

RETRIEVERS = ("bm25", "dense")


@lru_cache(maxsize=1)
def default_embedder() -> Callable[[list[str]], np.ndarray]:
    """texts -> L2-normalised float32 [N, 384] with thresher's default MiniLM (ONNX, int8)."""
    from thresher.compressor import Compressor

    return Compressor.load("minilm-cosine").embed


def _bm25_tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class ChunkIndex:
    """Index the chunks of `text` (parents first, as chunkers return them) for `retriever`."""

    def __init__(self, text: str, chunks: list[Chunk], retriever: str = "bm25",
                 embed: Callable[[list[str]], np.ndarray] | None = None):
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever must be one of {RETRIEVERS}, got {retriever!r}")
        self.retriever = retriever
        self.chunks = chunks
        self.parent_ids = np.asarray([c.parent for c in chunks], np.int64)
        self.n_parents = sum(1 for c in chunks if c.level == 0)
        texts = [c.text(text) for c in chunks]
        if retriever == "bm25":
            import bm25s

            self._bm25 = bm25s.BM25()
            self._bm25.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        else:
            self._embed = embed or default_embedder()
            self._emb = self._embed(texts) if texts else np.zeros((0, 1), np.float32)

    def chunk_scores(self, queries: Sequence[str]) -> np.ndarray:
        """float32 [Q, C]: every chunk's score for every query (BM25 score or cosine)."""
        if not self.chunks:
            return np.zeros((len(queries), 0), np.float32)
        if self.retriever == "dense":
            return (self._embed(list(queries)) @ self._emb.T).astype(np.float32)
        out = np.zeros((len(queries), len(self.chunks)), np.float32)
        for q, tokens in enumerate(_bm25_tokens(queries)):
            ids = self._bm25.get_tokens_ids(tokens)
            if ids:
                out[q] = self._bm25.get_scores_from_ids(ids)
        return out

    def parent_scores(self, queries: Sequence[str]) -> np.ndarray:
        """float32 [Q, P]: each parent's best score over itself and its children."""
        scores = self.chunk_scores(queries)
        best = np.full((len(queries), self.n_parents), -np.inf, np.float32)
        np.maximum.at(best.T, self.parent_ids, scores.T)
        return best

    def search(self, query: str, top_k: int | None = None) -> list[tuple[int, float]]:
        """(parent index, score) pairs, best first; ties keep document order."""
        scores = self.parent_scores([query])[0]
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [(int(i), float(scores[i])) for i in order]
