"""Clients for `thresher serve`, on httpx: keep-alive connections, bounded retries that honour
Retry-After, and answers parsed back into CompressionResult.

    from thresher.client import Client
    with Client("http://127.0.0.1:8080") as client:
        result = client.compress("Who wrote Hamlet?", ["Hamlet is a tragedy. Shakespeare wrote it."])
        result.passages[0].pruned_text

`AsyncClient` has the same methods as coroutines.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from thresher.engine.result import CompressionResult

RETRY_STATUSES = frozenset({503})  # overloaded or draining: the server says when to come back


class ServerError(RuntimeError):
    """The server answered with an error: `status`, `error_type` (see the README's error table),
    `message` and `retry_after` (seconds, for 503 overloaded)."""

    def __init__(self, status: int, error_type: str, message: str, retry_after: float | None = None):
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message
        self.retry_after = retry_after


def _passage_text(p: Any) -> Any:
    return p.get("text") if isinstance(p, Mapping) else p


def _item(item: Mapping[str, Any] | tuple) -> dict[str, Any]:
    if isinstance(item, tuple) and len(item) == 2:
        return {"question": item[0], "passages": list(item[1])}
    if isinstance(item, Mapping):
        return dict(item)
    raise TypeError(f"an item must be a (question, passages) tuple or a mapping, got {type(item).__name__}")


class _Base:
    """Settings, request building and answer parsing shared by Client and AsyncClient."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float, max_retries: int,
                 max_retry_wait_s: float):
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.max_retry_wait_s = max_retry_wait_s
        self._options = {"base_url": self.base_url, "timeout": timeout,
                         "headers": {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}}

    def _wait_s(self, response: httpx.Response | None, attempt: int) -> float:
        """Retry-After when the server sent one (capped), else exponential backoff."""
        given = response.headers.get("retry-after", "") if response is not None else ""
        try:
            wait = float(given)
        except ValueError:
            wait = 0.25 * 2 ** attempt
        return min(max(wait, 0.0), self.max_retry_wait_s)

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        if response.is_success:
            return response.json()
        try:
            err = response.json()
            error_type, message = err["error_type"], err["error"]
        except (ValueError, KeyError, TypeError):
            error_type, message = "unknown", response.text
        retry = response.headers.get("retry-after")
        raise ServerError(response.status_code, error_type, message, float(retry) if retry else None)

    @staticmethod
    def _transport_error(e: httpx.TransportError) -> OSError:
        # OSError subclasses, so callers catch them like any network failure
        cls = TimeoutError if isinstance(e, httpx.TimeoutException) else ConnectionError
        return cls(f"{type(e).__name__}: {e}")

    @staticmethod
    def _compress_body(question: str, passages: Sequence[Any], options: dict[str, Any]) -> dict[str, Any]:
        return {"question": question, "passages": list(passages), **options}

    @staticmethod
    def _results(items: list[dict[str, Any]], answers: list[dict]) -> list[CompressionResult]:
        return [CompressionResult.from_dict(a, [_passage_text(p) for p in i["passages"]])
                for i, a in zip(items, answers)]


class Client(_Base):
    """Blocking client; one keep-alive connection pool per instance (close it, or use `with`).

    max_retries: how often a 503 (overloaded, draining) or a failed connection is retried, after
    the server's Retry-After (at most max_retry_wait_s) or an exponential backoff.
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8080", *, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, max_retry_wait_s: float = 30.0):
        super().__init__(base_url, api_key, timeout, max_retries, max_retry_wait_s)
        self._http = httpx.Client(**self._options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def compress(self, question: str, passages: Sequence[str | Mapping[str, Any]], **options: Any) -> CompressionResult:
        """One request; options: threshold, keep_ratio, relative_threshold, passage_threshold, top_k, reorder."""
        body = self._compress_body(question, passages, options)
        return self._results([body], [self._call("POST", "/v1/compress", body)])[0]

    def compress_batch(self, items: Sequence[Mapping[str, Any] | tuple], *, batch_size: int = 32) -> list[CompressionResult]:
        """Many requests ((question, passages) tuples or mappings with options), sent as list
        bodies of `batch_size` (at most the server's max_client_batch_size)."""
        bodies = [_item(i) for i in items]
        answers: list[dict] = []
        for start in range(0, len(bodies), batch_size):
            answers += self._call("POST", "/v1/compress", bodies[start : start + batch_size])
        return self._results(bodies, answers)

    def rerank(self, query: str, texts: Sequence[str], *, raw_scores: bool = False,
               return_text: bool = False) -> list[dict[str, Any]]:
        """TEI's /rerank: [{index, score(, text)}], best first."""
        return self._call("POST", "/rerank", {"query": query, "texts": list(texts), "raw_scores": raw_scores,
                                              "return_text": return_text})

    def health(self) -> dict:
        return self._call("GET", "/health", None)

    def info(self) -> dict:
        return self._call("GET", "/info", None)

    def _call(self, method: str, path: str, body: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TransportError as e:
                if last:
                    raise self._transport_error(e) from e
                time.sleep(self._wait_s(None, attempt))
                continue
            if response.status_code not in RETRY_STATUSES or last:
                return self._answer(response)
            time.sleep(self._wait_s(response, attempt))
        raise AssertionError("unreachable")


class AsyncClient(_Base):
    """Client's methods as coroutines (close with `await client.aclose()` or `async with`)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", *, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, max_retry_wait_s: float = 30.0):
        super().__init__(base_url, api_key, timeout, max_retries, max_retry_wait_s)
        self._http = httpx.AsyncClient(**self._options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def compress(self, question: str, passages: Sequence[str | Mapping[str, Any]],
                       **options: Any) -> CompressionResult:
        body = self._compress_body(question, passages, options)
        return self._results([body], [await self._call("POST", "/v1/compress", body)])[0]

    async def compress_batch(self, items: Sequence[Mapping[str, Any] | tuple], *,
                             batch_size: int = 32) -> list[CompressionResult]:
        """Like Client.compress_batch; the list bodies are sent concurrently."""
        bodies = [_item(i) for i in items]
        chunks = [bodies[s : s + batch_size] for s in range(0, len(bodies), batch_size)]
        answers = await asyncio.gather(*(self._call("POST", "/v1/compress", c) for c in chunks))
        return self._results(bodies, [a for chunk in answers for a in chunk])

    async def rerank(self, query: str, texts: Sequence[str], *, raw_scores: bool = False,
                     return_text: bool = False) -> list[dict[str, Any]]:
        return await self._call("POST", "/rerank", {"query": query, "texts": list(texts),
                                                    "raw_scores": raw_scores, "return_text": return_text})

    async def health(self) -> dict:
        return await self._call("GET", "/health", None)

    async def info(self) -> dict:
        return await self._call("GET", "/info", None)

    async def _call(self, method: str, path: str, body: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await self._http.request(method, path, json=body)
            except httpx.TransportError as e:
                if last:
                    raise self._transport_error(e) from e
                await asyncio.sleep(self._wait_s(None, attempt))
                continue
            if response.status_code not in RETRY_STATUSES or last:
                return self._answer(response)
            await asyncio.sleep(self._wait_s(response, attempt))
        raise AssertionError("unreachable")
