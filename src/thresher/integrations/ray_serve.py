"""`thresher serve` on Ray Serve: every replica runs thresher's own FastAPI app as its ingress,
so the HTTP API (/v1/compress, /v1/rerank, /health, /metrics), the validation, the errors and
the request batching (the app's queue + batcher, started by the app's lifespan inside the
replica) are exactly those of `thresher serve`. Serve adds replicas across a cluster and routes
between them.

    import ray; from thresher.integrations.ray_serve import run
    url = run(Settings(model="default"), port=8000, replicas=2)   # POST {url}/v1/compress
"""

from __future__ import annotations

from dataclasses import asdict

from thresher.server.settings import Settings


class ThresherReplica:
    """One replica: builds the app (and loads the model) in the replica's process at start."""

    def __init__(self, settings: dict):
        self.settings = Settings(**settings)

    def __serve_build_asgi_app__(self):
        from thresher.server.app import create_app

        return create_app(self.settings)


def _require_serve():
    try:
        from ray import serve
    except ImportError:
        raise ImportError("Ray Serve is needed: pip install 'thresher[ray]'") from None
    return serve


def deployment(settings: Settings | None = None, *, replicas: int = 1, cpus_per_replica: int = 1):
    """The bound Serve application. Each replica gets `cpus_per_replica` CPUs and as many ONNX
    Runtime threads. Serve lets up to `max_queued_requests` requests into a replica at once
    (its default of 5 would starve the replica's batcher)."""
    serve = _require_serve()
    settings = settings or Settings.from_env()
    for name, value in (("replicas", replicas), ("cpus_per_replica", cpus_per_replica)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    ingress = serve.ingress()(ThresherReplica)
    actor = {"num_cpus": cpus_per_replica, "runtime_env": {"env_vars": {"THRESHER_THREADS": str(cpus_per_replica)}}}
    return serve.deployment(ingress, name="thresher", num_replicas=replicas, ray_actor_options=actor,
                            max_ongoing_requests=settings.max_queued_requests).bind(asdict(settings))


def run(settings: Settings | None = None, *, host: str = "127.0.0.1", port: int = 8000, replicas: int = 1,
        cpus_per_replica: int = 1) -> str:
    """Start Serve's HTTP proxy on host:port (on the running Ray, or a local one), deploy the
    app, wait until its replicas are up, and return the base URL."""
    serve = _require_serve()
    app = deployment(settings, replicas=replicas, cpus_per_replica=cpus_per_replica)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name="thresher", route_prefix="/")
    return f"http://{host}:{port}"
