"""Server settings: every limit is a named setting with a CLI flag, an env var and a trade-off.

Precedence: CLI flag > env var THRESHER_<NAME> > default. `settings_table()` renders the
README's settings table from these fields, so the docs cannot drift from the code.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import MISSING, dataclass, field, fields, replace

from thresher.engine.request import Limits

ENV_PREFIX = "THRESHER_"


def _setting(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Settings:
    host: str = _setting("127.0.0.1", "Address to bind. Loopback by default; use 0.0.0.0 only behind auth.")
    port: int = _setting(8080, "TCP port (0 = pick a free one).")
    model: str = _setting("default", "Model name, model directory or checkpoint folder to serve.")
    api_key: str | None = _setting(
        None, "If set, /v1/* requires `Authorization: Bearer <key>` (401 otherwise); /health and "
              "/metrics stay open for probes (/health runs the model at most once per health_interval_s, "
              "beside the queue). Prefer the env var: flags show in the process list.")
    docs: bool = _setting(
        True, "Serve /docs (Swagger UI from local files, so it works offline) and /openapi.json: the API's "
              "shape, no data, so they stay open when api_key is set; false removes them.")
    max_batch_tokens: int = _setting(
        16_384, "Token budget of one batch (estimated as characters/4 before tokenizing). Larger "
                "batches amortise per-call overhead but every request in them waits for the whole batch.")
    max_batch_requests: int = _setting(
        32, "Most requests in one batch; 1 turns dynamic batching off.")
    max_wait_ms: float = _setting(
        0.0, "How long the batcher waits for more work when the next batch is not full. 0 takes what "
             "is queued: work arriving while a batch runs is batched anyway, and on a CPU a batch is "
             "barely cheaper per request than a lone request, so waiting only adds latency.")
    max_queued_requests: int = _setting(
        64, "Queue bound. When full, new work gets 503 + Retry-After instead of waiting; keep "
            "(queue bound x time per request) well under request_timeout_s.")
    max_queue_wait_s: float = _setting(
        10.0, "Queue bound in time: new work gets 503 + Retry-After when the work already queued is "
              "estimated (from recent batches' seconds per token) to take longer than this. Keep it "
              "well under request_timeout_s, so that admitted requests finish before their deadline.")
    max_client_batch_size: int = _setting(
        32, "Most requests in one POST /v1/compress list body.")
    body_timeout_s: float = _setting(
        10.0, "Time a client has to send its whole body once the headers arrived (408 after), so a "
              "slow or stalled upload cannot hold a connection and its buffer indefinitely.")
    max_connections: int = _setting(
        256, "Open connections at most; more get 503 at once. Bounds what slow clients can hold "
             "(uvicorn has no header read timeout: put a proxy in front for that).")
    health_interval_s: float = _setting(
        10.0, "/health answers from the last successful batch when it is this recent; otherwise it "
              "runs one tiny probe through the model beside the queue (at most once per interval).")
    request_timeout_s: float = _setting(
        30.0, "Deadline per request, queueing included; past it the answer is 504 and a request "
              "still queued is dropped before it is computed.")
    max_body_bytes: int = _setting(
        4 * 1024 * 1024, "Largest request body; larger bodies get 413 before they are parsed.")
    max_passages: int = _setting(256, "Passages per request (422 beyond).")
    max_passage_chars: int = _setting(100_000, "Characters per passage (422 beyond).")
    max_question_chars: int = _setting(4_096, "Characters per question (422 beyond).")
    max_request_chars: int = _setting(
        1_000_000, "Passage characters per request, all passages together (422 beyond).")
    drain_timeout_s: float = _setting(
        30.0, "On shutdown, how long in-flight requests may take to finish before connections close.")

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_batch_requests", "max_queued_requests",
                     "max_client_batch_size", "max_body_bytes", "max_passages", "max_passage_chars",
                     "max_question_chars", "max_request_chars", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("max_wait_ms", "max_queue_wait_s", "request_timeout_s", "drain_timeout_s",
                     "body_timeout_s", "health_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("request_timeout_s", "body_timeout_s"):
            if getattr(self, name) == 0:
                raise ValueError(f"{name} must be > 0")
        if not isinstance(self.docs, bool):
            raise ValueError(f"docs must be a bool, got {self.docs!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")

    @property
    def limits(self) -> Limits:
        return Limits(max_question_chars=self.max_question_chars, max_passages=self.max_passages,
                      max_passage_chars=self.max_passage_chars, max_request_chars=self.max_request_chars)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
        """Defaults, then THRESHER_<NAME> env vars, then keyword overrides."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            raw = environ.get(env_name(f.name))
            if raw is not None:
                values[f.name] = _parse(f.name, _kind(f), raw)
        return cls(**{**values, **overrides})


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _flag(raw: str) -> bool:
    value = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
             "off": False}.get(raw.strip().lower())
    if value is None:
        raise ValueError(f"{raw!r} is not one of true/false, yes/no, on/off, 1/0")
    return value


def _kind(f):
    return {"int": int, "float": float, "bool": _flag}.get(str(f.type), str)


def _parse(name: str, kind, raw: str):
    try:
        return kind(raw)
    except ValueError:
        what = "bool" if kind is _flag else kind.__name__
        raise ValueError(f"{env_name(name)}={raw!r} is not a valid {what}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One --flag per setting; a flag left unset falls back to the env var, then the default."""
    for f in fields(Settings):
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=_kind(f), default=None,
                            help=f"{f.metadata['help']} (env {env_name(f.name)}; default {f.default!r})")


def from_args(args: argparse.Namespace) -> Settings:
    given = {f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name, None) is not None}
    return Settings.from_env(**given)


def settings_table() -> str:
    """Markdown table of every setting: flag, env var, default, meaning."""
    rows = ["| flag | env var | default | meaning |", "|---|---|---|---|"]
    for f in fields(Settings):
        default = None if f.default is MISSING else f.default
        rows.append(f"| `--{f.name.replace('_', '-')}` | `{env_name(f.name)}` | `{default!r}` | "
                    f"{f.metadata['help']} |")
    return "\n".join(rows)


__all__ = ["Settings", "add_arguments", "env_name", "from_args", "replace", "settings_table"]
