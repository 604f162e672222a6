"""Prometheus metrics, prefixed `thresher_`, in a registry per app (several apps can share a
process, e.g. in tests). Buckets follow TEI: geometric durations, powers of two for sizes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = tuple(1e-4 * 1.5**i for i in range(30))  # 0.1 ms .. ~19 min
SIZE_BUCKETS = tuple(float(2**i) for i in range(11))  # 1 .. 1024
TOKEN_BUCKETS = tuple(float(2**i) for i in range(4, 19))  # 16 .. 262144


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("thresher_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.request_duration = Histogram("thresher_request_duration_seconds",
                                          "HTTP request latency by route and status, queueing included",
                                          ["route", "status"], buckets=DURATION_BUCKETS, registry=r)
        self.failures = Counter("thresher_request_failure", "Error responses by error_type", ["error_type"],
                                registry=r)
        self.dropped = Counter("thresher_dropped", "Queued engine requests dropped before computing, by "
                               "reason (disconnected: the client left; timeout: the deadline passed)",
                               ["reason"], registry=r)
        self.queue_size = Gauge("thresher_queue_size", "Engine requests waiting in the queue", registry=r)
        self.batch_requests = Histogram("thresher_batch_requests", "Engine requests per computed batch",
                                        buckets=SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("thresher_batch_tokens", "Estimated tokens per computed batch",
                                      buckets=TOKEN_BUCKETS, registry=r)
        self.stage_duration = Histogram("thresher_stage_duration_seconds",
                                        "Time per stage: queue (per request), inference (per batch) and the "
                                        "engine's stages (segment, tokenize, pack, run, reduce, assemble)",
                                        ["stage"], buckets=DURATION_BUCKETS, registry=r)
