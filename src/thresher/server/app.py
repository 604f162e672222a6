"""The HTTP app: a Service around a loaded Compressor, the router, error handlers, metrics."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from thresher.compressor import Compressor
from thresher.server import docs_page, playground, rerank_api
from thresher.server.errors import ServiceError
from thresher.server.routes import router
from thresher.server.service import ClientGone, MetricsMiddleware, Service
from thresher.server.settings import Settings

CLIENT_CLOSED = 499  # nginx's convention; the client that left never sees it


def create_app(settings: Settings | None = None, compressor: Compressor | None = None) -> FastAPI:
    """The app for `compressor` (loaded from `settings.model` when not given; tests share one),
    under the server's request limits."""
    settings = settings or Settings.from_env()
    compressor = compressor or Compressor.load(settings.model)
    service = Service(settings, Compressor(compressor.scorer, settings.limits))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    # docs_page serves /docs from local files (FastAPI's own pages load Swagger UI/ReDoc from a CDN)
    docs = {} if settings.docs else {"openapi_url": None}
    app = FastAPI(title="thresher", summary="RAG context compression with dynamic batching",
                  lifespan=lifespan, docs_url=None, redoc_url=None, **docs)
    app.state.service = service
    app.add_middleware(MetricsMiddleware, service=service)
    app.include_router(router)
    app.include_router(rerank_api.router)
    app.include_router(playground.router)
    if settings.docs:
        app.include_router(docs_page.router)

    def error_response(e: ServiceError) -> JSONResponse:
        service.metrics.failures.labels(e.kind).inc()
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(ServiceError)
    async def on_service_error(request: Request, e: ServiceError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(ClientGone)
    async def on_client_gone(request: Request, e: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, e: Exception) -> JSONResponse:
        return error_response(ServiceError("internal", f"{type(e).__name__}: {e}"))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "malformed")
        return error_response(ServiceError(kind, str(e.detail), dict(e.headers or {})))

    return app
