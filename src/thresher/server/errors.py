"""Error kinds and their HTTP statuses: the ONE table. Handlers raise ServiceError(kind, message);
the app turns it into `{"error": message, "error_type": kind}` with the table's status, and the
OpenAPI document lists, per route, exactly the kinds that route can raise (from this table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorKind:
    status: int
    description: str


ERRORS: dict[str, ErrorKind] = {
    "malformed": ErrorKind(400, "The body is not valid UTF-8 JSON (or nests deeper than Python's JSON "
                                "parser allows, or holds an integer of more than 4,300 digits)."),
    "unauthorized": ErrorKind(401, "Missing or wrong `Authorization: Bearer <key>` (only when api_key is set)."),
    "not_found": ErrorKind(404, "No such route."),
    "method_not_allowed": ErrorKind(405, "The route exists but not with this method."),
    "body_timeout": ErrorKind(408, "The body did not arrive within body_timeout_s."),
    "payload_too_large": ErrorKind(413, "The body is larger than max_body_bytes."),
    "validation": ErrorKind(422, "The JSON does not describe a valid request (the message names the "
                                 "field), or a limit (passages, characters, client batch size) is exceeded."),
    "internal": ErrorKind(500, "The model failed on a valid request (a bug: please report it)."),
    "overloaded": ErrorKind(503, "The queue is full (max_queued_requests), or its work is estimated to take "
                                 "longer than max_queue_wait_s; retry after Retry-After seconds."),
    "shutting_down": ErrorKind(503, "The server is draining for shutdown and takes no new work."),
    "unhealthy": ErrorKind(503, "The batcher is not running, or the model failed its health probe."),
    "timeout": ErrorKind(504, "The request took longer than request_timeout_s, queueing included; "
                              "if it was still queued it was dropped uncomputed."),
}


class ServiceError(Exception):
    """An error with a kind from ERRORS; `headers` go into the response (e.g. Retry-After)."""

    def __init__(self, kind: str, message: str, headers: dict[str, str] | None = None):
        if kind not in ERRORS:
            raise KeyError(f"unknown error kind {kind!r}; known: {sorted(ERRORS)}. This is a bug.")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return ERRORS[self.kind].status

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.kind}


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error", "error_type"],
    "properties": {"error": {"type": "string"}, "error_type": {"type": "string", "enum": sorted(ERRORS)}},
}


def openapi_responses(*kinds: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses=` for a route that can raise `kinds`, grouped by status."""
    by_status: dict[int, list[str]] = {}
    for kind in kinds:
        by_status.setdefault(ERRORS[kind].status, []).append(kind)
    return {
        status: {
            "description": " / ".join(f"`{k}`: {ERRORS[k].description}" for k in ks),
            "content": {"application/json": {"schema": ERROR_SCHEMA}},
        }
        for status, ks in sorted(by_status.items())
    }


def error_table() -> str:
    """Markdown table for the README."""
    rows = ["| status | error_type | meaning |", "|---|---|---|"]
    rows += [f"| {e.status} | `{k}` | {e.description} |" for k, e in sorted(ERRORS.items(), key=lambda x: x[1].status)]
    return "\n".join(rows)
