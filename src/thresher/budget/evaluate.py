"""Load-free evaluation from a sweep: SLO compliance, quality and mean k per strategy.

Each question's latency and quality at every k were measured in the sweep, so a strategy (a
static k, SAGE's per-question k, the oracle) is scored by looking up its choices. SAGE's own
cost (running the forest) is measured and added to its latencies.
"""

from __future__ import annotations

import time

import numpy as np

from thresher.budget.oracle import SweepRow, arrays, oracle_labels
from thresher.budget.policy import BudgetPolicy

STATIC_KS = (2, 5, 10, 20)


def strategy_row(name: str, chosen_idx: np.ndarray, latency: np.ndarray, quality: np.ndarray,
                 ks: tuple[int, ...], slo_ms: float, extra_ms: float = 0.0) -> dict:
    rows = np.arange(latency.shape[0])
    lat = latency[rows, chosen_idx] + extra_ms
    return {"strategy": name, "compliance": float((lat <= slo_ms).mean()),
            "quality": float(quality[rows, chosen_idx].mean()),
            "mean_k": float(np.asarray(ks)[chosen_idx].mean()), "p95_ms": float(np.percentile(lat, 95)),
            "n": int(lat.shape[0])}


def load_free(rows: list[SweepRow], policy: BudgetPolicy, slo_ms: float | None = None,
              static_ks: tuple[int, ...] = STATIC_KS, others: dict[str, BudgetPolicy] | None = None) -> list[dict]:
    """One dict per strategy: static k's, SAGE, the `others` policies by name (e.g. SAGE's
    paper configuration), and the oracle (an upper bound, not deployable)."""
    if not rows:
        raise ValueError("no sweep rows to evaluate")
    ks = rows[0].ks
    slo = policy.slo_ms if slo_ms is None else float(slo_ms)
    feats, latency, quality = arrays(rows)
    col = {k: i for i, k in enumerate(ks)}
    missing = [k for k in static_ks if k not in col]
    if missing:
        raise ValueError(f"static k {missing} were not swept (K = {list(ks)})")
    out = [strategy_row(f"static k={k}", np.full(len(rows), col[k]), latency, quality, ks, slo)
           for k in static_ks]
    for name, p in {"SAGE": policy, **(others or {})}.items():
        t0 = time.perf_counter()
        chosen = np.array([col[int(p.choose(f)[0])] for f in feats])  # one call per question, as served
        policy_ms = (time.perf_counter() - t0) * 1e3 / len(rows)
        out.append({**strategy_row(name, chosen, latency, quality, ks, slo, policy_ms), "policy_ms": policy_ms})
    out.append(strategy_row("oracle (bound)", oracle_labels(latency, quality, slo), latency, quality, ks, slo))
    return out
