"""Retrieve-and-compress with a per-question budget: the call a RAG application makes.

    from thresher.budget import BudgetedCompressor
    bc = BudgetedCompressor.load("../shared/data")  # default model, corpus from that folder
    out = bc.compress("Who wrote Hamlet?")          # SAGE picks k, then retrieve k and compress
    out.k, out.result.pruned_passages
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from thresher.budget.features import PROBE_DEPTH, probe_features
from thresher.budget.policy import BudgetPolicy
from thresher.datadir import data_dir as data_dir_or_env


@dataclass(frozen=True)
class BudgetedResult:
    k: int  # passages retrieved and compressed
    passage_ids: tuple[str, ...]  # corpus ids of those passages, fused rank order
    features: np.ndarray  # the probe features the policy saw
    result: object  # thresher.CompressionResult
    timings_ms: dict[str, float] = field(default_factory=dict)  # probe, policy, compress, total


class BudgetedCompressor:
    """A Compressor, a HybridRetriever and a budget policy (SAGE, or a LoadAwarePolicy)."""

    def __init__(self, compressor, retriever, policy):
        self.compressor = compressor
        self.retriever = retriever
        self.policy = policy

    @classmethod
    def load(cls, data_dir: str | Path | None = None, model: str = "minilm-cosine",
             policy: str | Path | None = None) -> BudgetedCompressor:
        """Default model, the corpus from `data_dir` (default: $THRESHER_DATA), its cached hybrid
        index, and the policy folder (default: the shipped one)."""
        import thresher
        from thresher.budget.corpus import build
        from thresher.budget.retriever import HybridRetriever

        compressor = thresher.Compressor.load(model)
        passages, _ = build(data_dir_or_env(data_dir, "BudgetedCompressor.load(data_dir=...)"))
        return cls(compressor, HybridRetriever.build(passages, compressor), BudgetPolicy.load(policy))

    def compress(self, question: str, *, k: int | None = None, **options) -> BudgetedResult:
        """Probe, choose k (unless given), compress the top k; options go to Compressor.compress."""
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        t0 = time.perf_counter()
        depth = max(k or 0, PROBE_DEPTH)  # the probe search also serves the final k
        retrieval = self.retriever.search(question, depth=depth)
        feats = probe_features(retrieval, self.retriever.passages)
        t1 = time.perf_counter()
        if k is None:
            chosen = self.policy.choose(feats)
            k = int(chosen[0]) if isinstance(chosen, np.ndarray) else int(chosen)
        t2 = time.perf_counter()
        top = [self.retriever.passages[int(i)] for i in retrieval.top(k)]
        result = self.compressor.compress(question, [p.as_input() for p in top], **options)
        t3 = time.perf_counter()
        timings = {"probe": (t1 - t0) * 1e3, "policy": (t2 - t1) * 1e3, "compress": (t3 - t2) * 1e3,
                   "total": (t3 - t0) * 1e3}
        return BudgetedResult(k, tuple(p.pid for p in top), feats, result, timings)
