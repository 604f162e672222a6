"""Hybrid retrieval: BM25 (bm25s) + dense cosine (the default embedder), fused by reciprocal
rank fusion, with an on-disk index cache.

One search scores the whole corpus with both retrievers (a sparse matrix product and a dense
[N, H] x [H] product: a few milliseconds for thousands of passages), so fetching 30 passages costs
the same as fetching 2. The per-retriever ranked lists are kept on the result because the
budget policy's features (score drops, rank gaps, sparse-dense agreement) come from them.

Cache: $THRESHER_HOME/budget/index-<key>/ with the BM25 index (bm25s' own numpy + JSON files,
no pickle) and the passage embeddings (dense.npy). The key hashes the passage ids, the embedder
name and the index format, so a different corpus or model never reuses a stale index. An index
is written into a temporary folder and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from thresher.budget.corpus import CorpusPassage
from thresher.manifest import atomic_directory

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al. 2009): 1 / (RRF_K + rank)
DEPTH = 100  # ranks taken from each retriever before fusion
EMBED_CHUNK = 256  # passages per embedding call (bounds memory, gives progress)


@dataclass(frozen=True)
class Retrieval:
    """One question's ranking. Arrays are best first and `depth` long (or the corpus size)."""

    question: str
    indices: np.ndarray  # int64 [D] corpus indices by fused RRF score
    fused: np.ndarray  # float32 [D] RRF scores
    bm25_indices: np.ndarray  # int64 [D] BM25 ranking
    bm25_scores: np.ndarray  # float32 [D]
    dense_indices: np.ndarray  # int64 [D] dense ranking
    dense_scores: np.ndarray  # float32 [D] cosine
    question_tokens: tuple[str, ...]  # BM25 tokens of the question (stopwords removed)
    timings_ms: dict[str, float] = field(default_factory=dict)

    def top(self, k: int) -> np.ndarray:
        return self.indices[:k]


def _tokenize(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


def _rrf(rankings: list[np.ndarray], n: int) -> np.ndarray:
    fused = np.zeros(n, np.float64)
    for ranking in rankings:
        fused[ranking] += 1.0 / (RRF_K + 1 + np.arange(ranking.shape[0]))
    return fused


class HybridRetriever:
    """BM25 + dense retrieval over a fixed passage list; build with `HybridRetriever.build`."""

    def __init__(self, passages: list[CorpusPassage], compressor, bm25, dense: np.ndarray, key: str = ""):
        if dense.shape[0] != len(passages):
            raise ValueError(f"dense has {dense.shape[0]} rows for {len(passages)} passages")
        self.passages = passages
        self.key = key  # identifies corpus + embedder (the cache key); sweeps record it
        self._compressor = compressor
        self._bm25 = bm25
        self._dense = dense

    @classmethod
    def build(cls, passages: list[CorpusPassage], compressor, cache_dir: str | Path | None = None
              ) -> HybridRetriever:
        """Load the index for these passages from the cache, or build and cache it.

        `compressor` must be an embed-sim Compressor (e.g. `Compressor.load("minilm-cosine")`); it
        embeds passages and questions.
        """
        import bm25s

        if not passages:
            raise ValueError("passages is empty: a retriever needs a corpus")
        if cache_dir is None:
            from thresher.cache import cache_home

            cache_dir = cache_home() / "budget"
        key = index_key(passages, compressor)
        digest = key.split("-", 1)[0]
        final = Path(cache_dir) / f"index-{digest}"
        if not (final / "dense.npy").is_file():
            with atomic_directory(final) as tmp:
                cls._write_index(passages, compressor, tmp)
        bm25 = bm25s.BM25.load(str(final / "bm25"), show_progress=False)
        dense = np.load(final / "dense.npy")
        return cls(passages, compressor, bm25, dense, key=key)

    @staticmethod
    def _write_index(passages: list[CorpusPassage], compressor, out: Path) -> None:
        import bm25s

        t0 = time.perf_counter()
        texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]
        bm25 = bm25s.BM25()
        bm25.index(_tokenize(texts), show_progress=False)
        bm25.save(str(out / "bm25"), show_progress=False)
        chunks = []
        for start in range(0, len(texts), EMBED_CHUNK):
            chunks.append(compressor.embed(texts[start : start + EMBED_CHUNK]))
            log.info("embedded %d/%d passages", min(start + EMBED_CHUNK, len(texts)), len(texts))
        np.save(out / "dense.npy", np.concatenate(chunks).astype(np.float32))
        log.info("built the index of %d passages in %.1f s", len(texts), time.perf_counter() - t0)

    def search(self, question: str, depth: int = DEPTH) -> Retrieval:
        """Rank the corpus for `question`: fused RRF order plus both retrievers' own lists."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        n = len(self.passages)
        depth = min(depth, n)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        tokens = _tokenize([question])[0]
        sparse = self._bm25.get_scores(tokens).astype(np.float32) if tokens else np.zeros(n, np.float32)
        t1 = time.perf_counter()
        q = self._compressor.embed([question])[0]
        cos = self._dense @ q
        t2 = time.perf_counter()
        bm25_idx = _top(sparse, depth)
        dense_idx = _top(cos, depth)
        # A question with no BM25 match contributes no sparse ranking (all-zero scores are ties).
        rankings = [dense_idx] + ([bm25_idx[sparse[bm25_idx] > 0]] if tokens else [])
        fused_all = _rrf(rankings, n)
        order = _top(fused_all, depth)
        t3 = time.perf_counter()
        timings.update(bm25=(t1 - t0) * 1e3, dense=(t2 - t1) * 1e3, fuse=(t3 - t2) * 1e3,
                       total=(t3 - t0) * 1e3)
        return Retrieval(question, order, fused_all[order].astype(np.float32), bm25_idx, sparse[bm25_idx],
                         dense_idx, cos[dense_idx].astype(np.float32), tuple(tokens), timings)


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores, best first; ties broken by corpus index (stable)."""
    if k >= scores.shape[0]:
        return np.argsort(-scores, kind="stable")
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.lexsort((part, -scores[part]))]


def index_key(passages: list[CorpusPassage], compressor) -> str:
    """The key of the index of these passages embedded by `compressor` (HybridRetriever.key),
    known without building or loading the index."""
    digest = hashlib.sha256(json.dumps([INDEX_FORMAT, compressor.model, [p.pid for p in passages]]).encode())
    return f"{digest.hexdigest()[:16]}-{compressor.model}"
