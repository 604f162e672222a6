"""`thresher serve`: run the HTTP service with uvicorn."""

from __future__ import annotations

import argparse
import sys

from thresher.server.settings import Settings, add_arguments, from_args


def build_server(settings: Settings, compressor=None, log_level: str = "warning"):
    """A uvicorn.Server for the app (not started). Shutdown (SIGINT/SIGTERM, or should_exit=True)
    stops accepting connections, lets in-flight requests finish for up to drain_timeout_s, then
    stops the batcher."""
    import uvicorn

    from thresher.server.app import create_app

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            # The bound address, once listening: with --port 0 this is the port the OS picked.
            for sock in (s for server in self.servers for s in server.sockets):
                host, port = sock.getsockname()[:2]
                sys.stdout.write(f"thresher serving {settings.model} on http://{host}:{port}\n")
                sys.stdout.flush()

    app = create_app(settings, compressor)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=log_level,
                            timeout_graceful_shutdown=settings.drain_timeout_s, access_log=False,
                            lifespan="on", limit_concurrency=settings.max_connections)
    return Server(config)


def _serve(args: argparse.Namespace) -> int:
    build_server(from_args(args)).run()
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP service (POST /v1/compress, /v1/rerank)",
                              description="Every setting is a flag, else the env var THRESHER_<NAME>, "
                                          "else its default.")
    add_arguments(p)
    p.set_defaults(func=_serve)
