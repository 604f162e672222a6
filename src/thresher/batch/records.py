"""Batch-job records: one input line -> a checked request; a result -> one output line.

A record is `{"id", "question", "passages", "metadata"?, <options>?}`. Passages are strings or
`{"title"?, "text", "id"?, "metadata"?}`; a passage's `id`/`metadata` and the request's
`metadata` are carried to the output unchanged (the engine never sees them). Every problem raises
ValueError/TypeError naming the field, so the job can report it with its line number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thresher.batch.io import dumps
from thresher.engine.request import Limits, Options, validate
from thresher.engine.result import CompressionResult

OPTION_KEYS = frozenset(Options.__dataclass_fields__)
RECORD_KEYS = frozenset({"id", "question", "passages", "metadata"}) | OPTION_KEYS
CARRIED_PASSAGE_KEYS = ("id", "metadata")  # kept from input to output, never sent to the engine


@dataclass(frozen=True)
class Prepared:
    """A checked request, ready for one engine call together with others."""

    line: int
    id: Any
    question: str
    passages: list  # strings or {"title", "text"}: what the engine accepts
    options: dict[str, Any]
    carried: dict[int, dict[str, Any]]  # passage index -> its id/metadata
    metadata: Any
    chars: int  # question + passage characters: the batch budget's unit

    def item(self) -> dict[str, Any]:
        """The mapping `Compressor.compress_batch` takes."""
        return {"question": self.question, "passages": self.passages, **self.options}


def prepare(line: int, record: Any, options: Mapping[str, Any], limits: Limits, *, need_id: bool = True) -> Prepared:
    """Check one record with the engine's validator; job-wide `options` apply unless the record
    sets its own."""
    if not isinstance(record, Mapping):
        raise TypeError(f"a request must be a JSON object, got {type(record).__name__}")
    unknown = set(record) - RECORD_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(RECORD_KEYS))}")
    rid = record.get("id")
    if need_id and rid is None:
        raise ValueError("'id' is missing: every request needs an id (the output's join key)")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int))):
        raise TypeError(f"id must be a string or an integer, got {type(rid).__name__}")
    for key in ("question", "passages"):
        if key not in record:
            raise ValueError(f"'{key}' is missing")
    passages, carried = _split_passages(record["passages"])
    opts = {**options, **{k: record[k] for k in OPTION_KEYS & record.keys()}}
    request = validate(record["question"], passages, Options(**opts), limits)
    chars = len(request.question) + sum(len(p.text) for p in request.passages)
    return Prepared(line, rid, request.question, passages, opts, carried, record.get("metadata"), chars)


def _split_passages(passages: Any) -> tuple[Any, dict[int, dict[str, Any]]]:
    """Passages without their id/metadata (the engine's shape) and what was taken out."""
    if not isinstance(passages, list):
        return passages, {}  # the engine's validator names the problem
    carried: dict[int, dict[str, Any]] = {}
    plain = []
    for i, p in enumerate(passages):
        if isinstance(p, Mapping) and any(k in p for k in CARRIED_PASSAGE_KEYS):
            carried[i] = {k: p[k] for k in CARRIED_PASSAGE_KEYS if k in p}
            p = {k: v for k, v in p.items() if k not in CARRIED_PASSAGE_KEYS}
        plain.append(p)
    return plain, carried


def output_record(prepared: Prepared, result: CompressionResult) -> dict[str, Any]:
    """The output line's object: id, input line, the result without its timings (they differ
    from run to run; without them a rerun or the Ray job writes the same bytes)."""
    body = result.to_dict()
    del body["timings_ms"]
    for p in body["passages"]:
        p.update(prepared.carried.get(p["index"], {}))
    record = {"id": prepared.id, "line": prepared.line, **body}
    if prepared.metadata is not None:
        record["metadata"] = prepared.metadata
    return record


@dataclass(frozen=True)
class Outcome:
    """What became of one input line: an output line, or an error to report."""

    line: int
    id: Any
    text: str | None = None  # the serialised output line
    error: str | None = None
    chars: int = 0  # passage characters in
    kept: int = 0  # passage characters kept

    @classmethod
    def of(cls, prepared: Prepared, result: CompressionResult) -> Outcome:
        chars = sum(len(p["text"]) if isinstance(p, Mapping) else len(p) for p in prepared.passages)
        kept = sum(len(p.pruned_text) for p in result.passages)
        return cls(prepared.line, prepared.id, dumps(output_record(prepared, result)), None, chars, kept)

    def error_record(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "error": self.error}
