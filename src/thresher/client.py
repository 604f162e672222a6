"""A small client for `thresher serve` (standard library only).

    from thresher.client import Client
    client = Client("http://127.0.0.1:8080")
    result = client.compress("Who wrote Hamlet?", ["Hamlet is a tragedy. Shakespeare wrote it."])
    result["passages"][0]["pruned_text"]
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any


class ServerError(RuntimeError):
    """The server answered with an error: `status`, `error_type` (see the README's error table),
    `message` and `retry_after` (seconds, for 503 overloaded)."""

    def __init__(self, status: int, error_type: str, message: str, retry_after: float | None = None):
        super().__init__(f"{status} {error_type}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message
        self.retry_after = retry_after


class Client:
    def __init__(self, base_url: str = "http://127.0.0.1:8080", *, api_key: str | None = None,
                 timeout: float = 60.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def compress(self, question: str, passages: Sequence[str | Mapping[str, str]], **options: Any) -> dict:
        """One request; options: threshold, keep_ratio, top_k, reorder. Returns the result dict."""
        return self._call("POST", "/v1/compress", {"question": question, "passages": list(passages), **options})

    def compress_batch(self, items: Sequence[Mapping[str, Any]]) -> list[dict]:
        """Several requests in one call (each a mapping with question, passages and options)."""
        return self._call("POST", "/v1/compress", [dict(item) for item in items])

    def rerank(self, query: str, texts: Sequence[str], *, return_text: bool = False) -> list[dict]:
        """[{index, score(, text)}], best first."""
        return self._call("POST", "/v1/rerank", {"query": query, "texts": list(texts), "return_text": return_text})

    def health(self) -> dict:
        return self._call("GET", "/health", None)

    def _call(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
                error_type, message = err["error_type"], err["error"]
            except (ValueError, KeyError, TypeError):
                error_type, message = "unknown", raw.decode("utf-8", "replace")
            retry = e.headers.get("Retry-After")
            raise ServerError(e.code, error_type, message, float(retry) if retry else None) from None
