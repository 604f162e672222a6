"""The oracle sweep: for each question, every budget k in K, retrieve + compress, measure
end-to-end latency and quality; then label each question with its best budget.

Quality: gold supporting-sentence recall where the data has it (HotpotQA: a gold sentence counts
when the kept sentences cover at least half of its characters), else answer-string recall (NQ,
SQuAD: 1 when any answer string occurs, case-insensitively, in the kept text).
Latency: the question's one search (a search of depth 30 costs what a search of depth 2 costs:
both retrievers score the whole corpus) + feature extraction + compressing the top k passages,
measured per k on the real engine.

Sweeps are slow (the engine compresses 2+3+...+30 = 117 passages per question), so rows are
appended to a JSONL cache as they finish and a rerun only measures the questions it lacks.
Rows remember the index key (corpus + embedder) and K, and a row from another setup is ignored.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from thresher.budget.corpus import Question
from thresher.budget.features import FEATURE_NAMES, PROBE_DEPTH, probe_features

log = logging.getLogger(__name__)

K = (2, 3, 5, 7, 10, 15, 20, 25, 30)
GOLD_COVERAGE = 0.5  # fraction of a gold sentence's characters that must be kept


@dataclass(frozen=True)
class SweepRow:
    qid: str
    source: str
    split: str
    ks: tuple[int, ...]
    features: tuple[float, ...]
    probe_ms: float  # search + features
    latency_ms: tuple[float, ...]  # per k: probe_ms + compress(top k)
    quality: tuple[float, ...]  # per k
    setup: str  # index key + model; rows of another setup are not reused


def quality(question: Question, pids: list[str], result) -> float:
    """Quality of one compression result for `question` (see the module docstring). `result` is
    a CompressionResult or its to_dict() form (what the HTTP service returns); `pids` are the
    corpus ids of the passages in the order they were sent."""
    passages = result["passages"] if isinstance(result, dict) else [p.to_dict() for p in result.passages]
    if question.gold:
        kept: dict[str, list[tuple[int, int]]] = {}
        for p in passages:
            kept.setdefault(pids[p["index"]], []).extend((s["start"], s["end"]) for s in p["sentences"] if s["kept"])
        hit = 0
        for pid, a, b in question.gold:
            covered = sum(max(0, min(b, e) - max(a, s)) for s, e in kept.get(pid, ()))
            hit += covered >= GOLD_COVERAGE * (b - a)
        return hit / len(question.gold)
    text = "\n".join(p["pruned_text"] for p in passages).lower()
    return float(any(a.lower() in text for a in question.answers))


def sweep_setup(retriever, compressor) -> str:
    """What a sweep row's numbers depend on: corpus + embedder (the index key; `retriever` is a
    HybridRetriever or its key), the compressing model and its default operating point (threshold
    and cuts), and the thresher version (engine changes move latency)."""
    from thresher import __version__

    key = retriever if isinstance(retriever, str) else retriever.key
    point = (f"t={compressor.threshold}|r={getattr(compressor, 'relative_threshold', None)}"
             f"|p={getattr(compressor, 'passage_threshold', None)}")
    return f"{key}|{compressor.model}|{point}|v{__version__}"


def measure(question: Question, retriever, compressor, ks: tuple[int, ...] = K, setup: str = "") -> SweepRow:
    """Sweep one question over `ks` with real searches and compressions."""
    t0 = time.perf_counter()
    retrieval = retriever.search(question.question, depth=max(max(ks), PROBE_DEPTH))
    feats = probe_features(retrieval, retriever.passages)
    probe_ms = (time.perf_counter() - t0) * 1e3
    latency, qual = [], []
    for k in ks:
        chosen = [retriever.passages[int(i)] for i in retrieval.top(k)]
        t1 = time.perf_counter()
        result = compressor.compress(question.question, [p.as_input() for p in chosen])
        latency.append(probe_ms + (time.perf_counter() - t1) * 1e3)
        qual.append(quality(question, [p.pid for p in chosen], result))
    return SweepRow(question.qid, question.source, question.split, tuple(ks), tuple(map(float, feats)),
                    probe_ms, tuple(latency), tuple(qual), setup)


def sweep(questions: list[Question], retriever, compressor, cache: str | Path | None = None,
          ks: tuple[int, ...] = K, setup: str = "", progress: bool = False) -> list[SweepRow]:
    """Rows for `questions` (in order), measuring only those missing from `cache`."""
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"ks must be ints >= 1, got {ks!r}")
    if list(ks) != sorted(set(ks)):
        raise ValueError(f"ks must be strictly increasing, got {ks!r}")
    done = {r.qid: r for r in read_rows(cache, ks, setup)} if cache is not None else {}
    out = []
    from tqdm.auto import tqdm

    for q in tqdm(questions, disable=not progress, desc="sweep", unit="q"):
        row = done.get(q.qid)
        if row is None:
            row = measure(q, retriever, compressor, ks, setup)
            if cache is not None:
                Path(cache).parent.mkdir(parents=True, exist_ok=True)
                with open(cache, "a", encoding="utf-8") as f:
                    f.write(json.dumps(asdict(row)) + "\n")
        out.append(row)
    return out


def read_rows(cache: str | Path, ks: tuple[int, ...] = K, setup: str = "") -> list[SweepRow]:
    path = Path(cache)
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:  # a row cut off by an interrupted sweep: measured again
                continue
            row = SweepRow(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
            if row.ks == tuple(ks) and row.setup == setup and len(row.features) == len(FEATURE_NAMES):
                rows.append(row)
    return rows


FALLBACKS = ("smallest", "least-violating")


def oracle_labels(latency_ms: np.ndarray, quality_: np.ndarray, slo_ms: float,
                  fallback: str = "smallest") -> np.ndarray:
    """Index into K per question: the smallest k that meets the latency target with the best
    quality among those that meet it. When none does: the smallest k (thresher's default, the
    cheapest budget) or, with fallback="least-violating" (SAGE's paper), the k whose latency
    exceeds the target least. Shapes [N, len(K)]."""
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    latency_ms, quality_ = np.asarray(latency_ms, float), np.asarray(quality_, float)
    if latency_ms.shape != quality_.shape or latency_ms.ndim != 2:
        raise ValueError(f"latency_ms {latency_ms.shape} and quality {quality_.shape} must be equal [N, K]")
    feasible = latency_ms <= slo_ms
    q = np.where(feasible, quality_, -np.inf)
    best = q.max(axis=1, keepdims=True)
    label = np.argmax(feasible & (q >= best - 1e-9), axis=1)  # first (smallest) such k
    none = np.argmin(latency_ms, axis=1) if fallback == "least-violating" else np.zeros_like(label)
    return np.where(feasible.any(axis=1), label, none)


def arrays(rows: list[SweepRow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """features float32 [N, F], latency_ms [N, K], quality [N, K]."""
    return (np.array([r.features for r in rows], np.float32).reshape(len(rows), len(FEATURE_NAMES)),
            np.array([r.latency_ms for r in rows], float), np.array([r.quality for r in rows], float))
