"""The load-aware budget policy (beyond SAGE): SAGE's per-question k, capped by live load.

SAGE picks k from the question alone, and its SLO numbers assume each query has the machine to
itself. Under concurrent traffic the end-to-end latency is queueing + service, and service time
grows with k for every request in the queue, so the budget that meets the SLO shrinks as load
rises. This policy keeps SAGE's ranking of questions (hard ones still get more than easy ones)
and caps it with two load signals:

- a feedback cap on recent tail latency, AIMD style: every `period` completions, if the p95 of
  the last `window` end-to-end latencies is above `setpoint` x SLO the cap is multiplied by
  `decrease`, otherwise it grows by `increase` (in passages), within [min K, the largest k
  SAGE can choose] (it starts at the top: no load, no cap);
- a feed-forward queue term: each request in flight beyond `queue_free` lowers the allowed k by
  one step of K, because tail latency lags (it moves only after requests have already waited)
  while queue depth moves at once.

Why a cap rather than a feedback controller on the temperature: the forest's predictions are
often confident (one class holds most of the mass), and then no temperature moves the quantile
decision much, so a temperature controller has little authority exactly when it is needed; a cap
on k acts directly on service time. Why AIMD: it needs no latency model (the single-query model
from the sweep is exactly what contention invalidates) and it is stable under delayed feedback
(multiplicative back-off, slow probing up). The costs: the tail-latency signal is noisy at low
request counts, and a cap cannot help when even the smallest k misses the SLO (overload).
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from thresher.budget.policy import BudgetPolicy


class LoadAwarePolicy:
    """Thread-safe: call `started()` when a request is sent, `finished(latency_ms)` when its
    answer arrives, and `choose(features)` for each new question."""

    def __init__(self, policy: BudgetPolicy, slo_ms: float | None = None, *, setpoint: float = 0.8,
                 window: int = 32, period: int = 4, decrease: float = 0.5, increase: float = 1.0,
                 queue_free: int = 2):
        self.policy = policy
        self.slo_ms = float(policy.slo_ms if slo_ms is None else slo_ms)
        if self.slo_ms <= 0:
            raise ValueError(f"slo_ms must be > 0, got {self.slo_ms}")
        if not 0 < setpoint <= 1 or not 0 < decrease < 1 or increase <= 0:
            raise ValueError("need 0 < setpoint <= 1, 0 < decrease < 1 and increase > 0")
        if window < 1 or period < 1 or queue_free < 0:
            raise ValueError("need window >= 1, period >= 1 and queue_free >= 0")
        self.ks = np.array(sorted(policy.ks), np.int64)
        self.setpoint, self.period, self.decrease, self.increase = setpoint, period, decrease, increase
        self.queue_free = queue_free
        self._latencies: deque[float] = deque(maxlen=window)
        # The cap lives in [min K, the largest k SAGE can choose]: above that it would never bind.
        self._cap_max = float(max(policy.classes))
        self._cap = self._cap_max
        self._in_flight = 0
        self._done = 0
        self._lock = threading.Lock()

    @property
    def cap(self) -> float:
        return self._cap

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def allowed_k(self) -> int:
        """The largest k the current load allows."""
        with self._lock:
            cap, depth = self._cap, self._in_flight
        step = int(np.searchsorted(self.ks, cap, side="right")) - 1
        step -= max(0, depth - self.queue_free)
        return int(self.ks[max(step, 0)])

    def choose(self, features: np.ndarray) -> int:
        """k for one question: min(SAGE's k, what the load allows)."""
        return int(min(int(self.policy.choose(features)[0]), self.allowed_k()))

    def started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def finished(self, latency_ms: float) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            self._latencies.append(float(latency_ms))
            self._done += 1
            if self._done % self.period:
                return
            p95 = float(np.percentile(np.fromiter(self._latencies, float), 95))
            if p95 > self.setpoint * self.slo_ms:
                self._cap = max(float(self.ks[0]), self._cap * self.decrease)
            else:
                self._cap = min(self._cap_max, self._cap + self.increase)
