"""What every route shares: body reading, validation, admission, the wait for the batcher.

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
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from thresher.compressor import Compressor
from thresher.engine.request import Options
from thresher.engine.request import Request as EngineRequest
from thresher.server.batcher import Batcher, Outcome
from thresher.server.errors import ServiceError
from thresher.server.metrics import Metrics
from thresher.server.queue import Entry, Queue, QueueFull, estimate_tokens
from thresher.server.settings import Settings

ROUTES = ("/v1/compress", "/rerank", "/v1/rerank", "/v2/rerank", "/info", "/embed", "/health", "/metrics", "/docs")
OPTION_KEYS = frozenset(Options.__dataclass_fields__)


class Service:
    """What the routes share: settings, compressor, queue, batcher, metrics."""

    def __init__(self, settings: Settings, compressor: Compressor):
        self.settings = settings
        self.compressor = compressor
        self.metrics = Metrics()
        self.queue: Queue | None = None
        self.batcher: Batcher | None = None
        self.draining = False
        self._probe_lock = asyncio.Lock()
        self._last_probe: float | None = None

    async def start(self) -> None:
        self.queue = Queue(self.settings.max_queued_requests)
        self.batcher = Batcher(self.compressor, self.queue, self.settings, self.metrics)
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

        async def read() -> None:
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limit:
                    raise ServiceError("payload_too_large", f"the body is over the limit of {limit:,} bytes "
                                                            "(max_body_bytes)")

        try:
            await asyncio.wait_for(read(), self.settings.body_timeout_s)
        except asyncio.TimeoutError:
            raise ServiceError("body_timeout", f"the body did not arrive within body_timeout_s="
                                               f"{self.settings.body_timeout_s:g} s") from None
        except ClientDisconnect:
            raise ClientGone from None
        if not body.strip():
            raise ServiceError("malformed", "the body is empty; send a JSON object")
        try:
            return json.loads(body)
        except UnicodeDecodeError as e:
            raise ServiceError("malformed", f"the body is not valid UTF-8: {e}") from None
        except json.JSONDecodeError as e:
            raise ServiceError("malformed", f"the body is not valid JSON: {e}") from None
        except RecursionError:
            raise ServiceError("malformed", "the body nests JSON too deeply to parse") from None
        except ValueError as e:  # e.g. an integer of more than 4,300 digits
            raise ServiceError("malformed", f"the body holds a value JSON parsing refuses: {e}") from None

    def compress_request(self, item: Any, where: str) -> EngineRequest:
        """One /v1/compress item -> an engine Request, through the engine's validator."""
        if not isinstance(item, dict):
            raise ServiceError("validation", f"{where or 'the body '}must be a JSON object, got {json_type(item)}")
        unknown = set(item) - {"question", "passages"} - OPTION_KEYS
        if unknown:
            raise ServiceError("validation", f"{where}unknown keys {sorted(unknown)}; allowed: "
                                             f"question, passages, {', '.join(sorted(OPTION_KEYS))}")
        for key in ("question", "passages"):
            if key not in item:
                raise ServiceError("validation", f"{where}'{key}' is missing")
        try:
            options = {k: item[k] for k in OPTION_KEYS & item.keys()}
            return self.compressor.validate(item["question"], item["passages"], **options)
        except (TypeError, ValueError, OverflowError) as e:
            raise ServiceError("validation", f"{where}{e}") from None

    async def health(self) -> dict[str, Any]:
        """Liveness from state, not from the queue: ok when the batcher runs and a batch succeeded
        within health_interval_s; otherwise one tiny probe through the model beside the queue (at
        most once per interval, however many probes arrive)."""
        if self.draining:
            raise ServiceError("shutting_down", "the server is shutting down")
        if self.batcher is None or not self.batcher.running:
            raise ServiceError("unhealthy", "the batcher is not running")
        async with self._probe_lock:
            age = self._answered_s()
            if age is None or age > self.settings.health_interval_s:
                loop = asyncio.get_running_loop()
                try:
                    await loop.run_in_executor(None, self.compressor.compress, "health probe",
                                               ["The server is healthy."])
                except Exception as e:  # noqa: BLE001 - any failure of the model is unhealthy
                    raise ServiceError("unhealthy", f"the model failed the health probe: "
                                                    f"{type(e).__name__}: {e}") from None
                self._last_probe = time.monotonic()
        return {"status": "ok", "model": self.compressor.model, "kind": self.compressor.kind,
                "queued": len(self.queue), "last_success_s": round(self._answered_s(), 3)}

    def _answered_s(self) -> float | None:
        """Seconds since the model last answered (a batch or a probe); None if it never has."""
        times = [t for t in (self.batcher.last_success, self._last_probe) if t is not None]
        return time.monotonic() - max(times) if times else None

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
            raise ClientGone
        return [e.future.result() for e in entries]  # raises the first failed entry's ServiceError


class ClientGone(Exception):
    """The client left before its answer was ready."""


async def _client_gone(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the client disconnects (the body is already read, so receive() only wakes
    up for that)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def timing_headers(outcomes: list[Outcome], arrived: float) -> dict[str, str]:
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


def result_dict(outcome: Outcome) -> dict[str, Any]:
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
