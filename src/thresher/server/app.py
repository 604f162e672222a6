"""The HTTP app: routes, body reading, admission and error responses.

A request's life: read the body (413 past max_body_bytes, 400 if not JSON) -> validate with the
engine's one validator (422) -> append to the queue (503 when full) -> wait for the batcher to
resolve its future, while watching for the client leaving and the deadline (504) -> JSON with
`x-*` timing headers.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from thresher.engine.request import Options, validate
from thresher.engine.request import Request as EngineRequest
from thresher.scorers.base import Scorer
from thresher.server import schemas
from thresher.server.batcher import Batcher, Outcome
from thresher.server.errors import ServiceError, openapi_responses
from thresher.server.metrics import Metrics
from thresher.server.queue import Entry, Queue, QueueFull, estimate_tokens
from thresher.server.settings import Settings

ROUTES = ("/v1/compress", "/v1/rerank", "/health", "/metrics")
OPTION_KEYS = frozenset(Options.__dataclass_fields__)
CLIENT_CLOSED = 499  # nginx's convention; the client that left never sees it

# Error kinds each route can answer with (the OpenAPI document is generated from these).
ENGINE_KINDS = ("overloaded", "shutting_down", "timeout", "internal")
WORK_KINDS = ("malformed", "unauthorized", "payload_too_large", "validation", *ENGINE_KINDS)


class Service:
    """What the routes share: settings, scorer, queue, batcher, metrics."""

    def __init__(self, settings: Settings, scorer: Scorer):
        self.settings = settings
        self.scorer = scorer
        self.limits = settings.limits
        self.metrics = Metrics()
        self.queue: Queue | None = None
        self.batcher: Batcher | None = None
        self.draining = False

    async def start(self) -> None:
        self.queue = Queue(self.settings.max_queued_requests)
        self.batcher = Batcher(self.scorer, self.queue, self.settings, self.metrics)
        self.batcher.start()

    async def stop(self) -> None:
        self.draining = True
        await self.batcher.stop(self.settings.drain_timeout_s)

    def authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ServiceError("unauthorized", "missing or wrong bearer token",
                               {"WWW-Authenticate": 'Bearer realm="thresher"'})

    async def read_json(self, request: Request) -> Any:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ServiceError("payload_too_large", f"the body has {int(declared):,} bytes; the limit is "
                                                    f"{limit:,} (max_body_bytes)")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ServiceError("payload_too_large", f"the body is over the limit of {limit:,} bytes "
                                                        "(max_body_bytes)")
        if not body.strip():
            raise ServiceError("malformed", "the body is empty; send a JSON object")
        try:
            return json.loads(body)
        except UnicodeDecodeError as e:
            raise ServiceError("malformed", f"the body is not valid UTF-8: {e}") from None
        except json.JSONDecodeError as e:
            raise ServiceError("malformed", f"the body is not valid JSON: {e}") from None

    def compress_request(self, item: Any, where: str) -> EngineRequest:
        """One /v1/compress item -> an engine Request, through the engine's validator."""
        if not isinstance(item, dict):
            raise ServiceError("validation", f"{where or 'the body '}must be a JSON object, got {_json_type(item)}")
        unknown = set(item) - {"question", "passages"} - OPTION_KEYS
        if unknown:
            raise ServiceError("validation", f"{where}unknown keys {sorted(unknown)}; allowed: "
                                             f"question, passages, {', '.join(sorted(OPTION_KEYS))}")
        for key in ("question", "passages"):
            if key not in item:
                raise ServiceError("validation", f"{where}'{key}' is missing")
        try:
            options = Options(**{k: item[k] for k in OPTION_KEYS & item.keys()})
            return validate(item["question"], item["passages"], options, self.limits)
        except (TypeError, ValueError) as e:
            raise ServiceError("validation", f"{where}{e}") from None

    async def run(self, request: Request, engine_requests: list[EngineRequest]) -> list[Outcome]:
        """Queue the requests, wait for all their outcomes; drop them if the client leaves or the
        deadline passes first."""
        if self.draining:
            raise ServiceError("shutting_down", "the server is shutting down")
        arrived = request.state.arrived
        loop = asyncio.get_running_loop()
        entries = [Entry(r, loop.create_future(), estimate_tokens(r)) for r in engine_requests]
        wait_s = self.batcher.estimated_queue_wait_s()
        retry = {"Retry-After": str(max(1, math.ceil(wait_s - self.settings.max_queue_wait_s)))}
        if wait_s > self.settings.max_queue_wait_s:
            raise ServiceError("overloaded", f"overloaded: the queued work is estimated to take {wait_s:.1f} s; "
                                             f"the limit is max_queue_wait_s={self.settings.max_queue_wait_s:g}",
                               retry)
        try:
            self.queue.append(entries)
        except QueueFull as e:
            raise ServiceError("overloaded", f"overloaded: {e}; retry later", retry) from None
        self.metrics.queue_size.set(len(self.queue))
        timeout = self.settings.request_timeout_s - (time.perf_counter() - arrived)
        waiter = asyncio.ensure_future(asyncio.wait([e.future for e in entries]))
        watcher = asyncio.ensure_future(_client_gone(request.receive))
        try:
            done, _ = await asyncio.wait({waiter, watcher}, timeout=max(timeout, 0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            watcher.cancel()
        if waiter not in done or not all(e.future.done() for e in entries):
            reason = "disconnected" if watcher in done else "timeout"
            for e in entries:
                if not e.future.done():
                    e.cancel_reason = reason
                    e.future.cancel()
            if reason == "timeout":
                raise ServiceError("timeout", f"no answer within request_timeout_s="
                                              f"{self.settings.request_timeout_s:g} s")
            raise _ClientGone
        return [e.future.result() for e in entries]  # raises the first failed entry's ServiceError


class _ClientGone(Exception):
    pass


async def _client_gone(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the client disconnects (the body is already read, so receive() only wakes
    up for that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _timing_headers(outcomes: list[Outcome], arrived: float) -> dict[str, str]:
    def join(values) -> str:
        return ",".join(str(v) for v in values)

    return {
        "x-queue-time": join(f"{o.queue_ms:.2f}" for o in outcomes),
        "x-inference-time": join(f"{o.inference_ms:.2f}" for o in outcomes),
        "x-batch-id": join(o.batch_id for o in outcomes),
        "x-batch-size": join(o.batch_size for o in outcomes),
        "x-batch-slot": join(o.batch_slot for o in outcomes),
        "x-total-time": f"{(time.perf_counter() - arrived) * 1e3:.2f}",
    }


def _result_dict(outcome: Outcome) -> dict[str, Any]:
    body = outcome.result.to_dict()
    body["timings_ms"] = {**body["timings_ms"], "queue": outcome.queue_ms}
    return body


class MetricsMiddleware:
    """Counts and times every HTTP request by route and status (pure ASGI, so it never
    interferes with body reading or disconnect detection)."""

    def __init__(self, app, service: Service):
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope.setdefault("state", {})["arrived"] = started = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            m = self.service.metrics
            m.requests.labels(route, str(status)).inc()
            m.request_duration.labels(route, str(status)).observe(time.perf_counter() - started)


def create_app(settings: Settings | None = None, scorer: Scorer | None = None) -> FastAPI:
    """The app; loads `settings.model` unless a loaded scorer is given (tests share one)."""
    settings = settings or Settings.from_env()
    if scorer is None:
        from thresher.models import load_scorer

        scorer = load_scorer(settings.model)
    service = Service(settings, scorer)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="thresher", summary="RAG context compression with dynamic batching",
                  lifespan=lifespan)
    app.state.service = service
    app.add_middleware(MetricsMiddleware, service=service)

    def error_response(e: ServiceError) -> JSONResponse:
        service.metrics.failures.labels(e.kind).inc()
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(ServiceError)
    async def on_service_error(request: Request, e: ServiceError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(_ClientGone)
    async def on_client_gone(request: Request, e: _ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, e: Exception) -> JSONResponse:
        return error_response(ServiceError("internal", f"{type(e).__name__}: {e}"))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "malformed")
        return error_response(ServiceError(kind, str(e.detail), dict(e.headers or {})))

    @app.post("/v1/compress", openapi_extra=schemas.json_body(
                  {"oneOf": [schemas.COMPRESS_ITEM, {"type": "array", "items": schemas.COMPRESS_ITEM}]}),
              responses={200: schemas.json_response(
                  {"oneOf": [schemas.COMPRESS_RESULT, {"type": "array", "items": schemas.COMPRESS_RESULT}]},
                  "The result (a list for a list body), in the engine's to_dict() shape"),
                  **openapi_responses(*WORK_KINDS)})
    async def compress(request: Request) -> Response:
        """Prune passages for a question; a list body holds several requests (batched together)."""
        service.authorize(request)
        body = await service.read_json(request)
        if isinstance(body, list):
            n, most = len(body), settings.max_client_batch_size
            if not 1 <= n <= most:
                raise ServiceError("validation", f"the body lists {n} requests; send 1 to {most} "
                                                 "(max_client_batch_size)")
            engine_requests = [service.compress_request(item, f"[{i}]: ") for i, item in enumerate(body)]
        else:
            engine_requests = [service.compress_request(body, "")]
        outcomes = await service.run(request, engine_requests)
        results = [_result_dict(o) for o in outcomes]
        return JSONResponse(results if isinstance(body, list) else results[0],
                            headers=_timing_headers(outcomes, request.state.arrived))

    @app.post("/v1/rerank", openapi_extra=schemas.json_body(schemas.RERANK_REQUEST),
              responses={200: schemas.json_response(schemas.RERANK_RESULT, "Texts best first"),
                         **openapi_responses(*WORK_KINDS)})
    async def rerank(request: Request) -> Response:
        """text-embeddings-inference's rerank shape: `{query, texts, return_text?}` ->
        `[{index, score, text?}]`, best first; the score is the model's rerank score."""
        service.authorize(request)
        body = await service.read_json(request)
        if not isinstance(body, dict):
            raise ServiceError("validation", f"the body must be a JSON object, got {_json_type(body)}")
        unknown = set(body) - {"query", "texts", "return_text"}
        if unknown:
            raise ServiceError("validation", f"unknown keys {sorted(unknown)}; allowed: query, texts, return_text")
        return_text = body.get("return_text", False)
        if not isinstance(return_text, bool):
            raise ServiceError("validation", f"return_text must be a boolean, got {_json_type(return_text)}")
        texts = body.get("texts")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ServiceError("validation", "texts must be a list of strings")
        engine_request = service.compress_request(
            {"question": body.get("query"), "passages": texts, "reorder": True}, "")
        (outcome,) = await service.run(request, [engine_request])
        ranked = [{"index": p.index, "score": p.rerank_score, **({"text": p.text} if return_text else {})}
                  for p in outcome.result.passages]
        return JSONResponse(ranked, headers=_timing_headers([outcome], request.state.arrived))

    @app.get("/health", responses={200: schemas.json_response(schemas.HEALTH, "The model answered"),
                                   **openapi_responses("unhealthy", *ENGINE_KINDS)})
    async def health(request: Request) -> Response:
        """Runs a one-sentence request through the queue and the model."""
        probe = validate("health probe", ["The server is healthy."], Options())
        try:
            (outcome,) = await service.run(request, [probe])
        except ServiceError as e:
            if e.kind == "internal":
                raise ServiceError("unhealthy", f"the model failed the health probe: {e.message}") from None
            raise
        return JSONResponse({"status": "ok", "model": outcome.result.model, "kind": scorer.kind})

    @app.get("/metrics", response_class=Response,
             responses={200: {"description": "Prometheus text format", "content": {CONTENT_TYPE_LATEST: {}}}})
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
