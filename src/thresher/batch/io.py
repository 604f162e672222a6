"""Streaming readers and writers of batch jobs: JSONL (always) and Parquet (with pyarrow).

Readers yield `(line, record)` one at a time, never the whole file: `line` is the 1-based line
of a JSONL file (or row of a Parquet file), and `record` is the parsed object or a `BadLine`.
Writers append one result per call and flush it, so a killed job leaves at most one partial
last line, which `resume_point` detects and cuts off.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAIL_CHUNK = 1 << 16  # bytes read per step when looking for the last complete line


@dataclass(frozen=True)
class BadLine:
    """A line that could not be parsed; the job reports it with its line number."""

    error: str


def input_format(path: str) -> str:
    return "parquet" if str(path).lower().endswith((".parquet", ".pq")) else "jsonl"


def _require_pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("Parquet needs pyarrow: pip install 'thresher[batch]'") from None
    return pq


def count_records(path: str) -> int | None:
    """Number of records, for the progress bar's ETA (None for stdin). Counts newlines in
    1 MiB chunks: one fast pass, bounded memory."""
    if path == "-":
        return None
    if input_format(path) == "parquet":
        return _require_pyarrow().ParquetFile(path).metadata.num_rows
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def read_records(path: str, start_after: int = 0) -> Iterator[tuple[int, Any]]:
    """(line, record or BadLine) for every record after line `start_after`; blank lines skipped."""
    if input_format(path) == "parquet":
        yield from _read_parquet(path, start_after)
        return
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 (closed below)
    try:
        for n, raw in enumerate(f, 1):
            if n <= start_after or not raw.strip():
                continue
            yield n, parse_line(raw)
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def parse_line(raw: bytes | str) -> Any:
    """One JSONL line -> its object, or BadLine naming what is wrong."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as e:
        return BadLine(f"not valid UTF-8 (byte {e.start})")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return BadLine(f"not valid JSON: {e}")


def _read_parquet(path: str, start_after: int) -> Iterator[tuple[int, Any]]:
    pf = _require_pyarrow().ParquetFile(path)
    n = 0
    for batch in pf.iter_batches(batch_size=256):
        if n + batch.num_rows <= start_after:
            n += batch.num_rows
            continue
        for row in batch.to_pylist():
            n += 1
            if n > start_after:
                # Parquet has no "absent": a null option column means the option is not set.
                yield n, {k: v for k, v in row.items() if v is not None}


def dumps(record: dict[str, Any]) -> str:
    """The one serialisation of an output line (the single-process and Ray jobs share it, so
    their outputs are equal byte for byte)."""
    return json.dumps(record, ensure_ascii=False)


def resume_point(path: Path) -> tuple[int, Any] | None:
    """(line, id) of the last complete result in a JSONL output, after cutting off a partial last
    line left by a killed job; None when there is nothing to resume from."""
    if not path.exists():
        return None
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        tail, pos = b"", end
        # Walk back until the tail holds the last newline and the one before the last line.
        while pos > 0 and tail.count(b"\n") < 2:
            step = min(TAIL_CHUNK, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
        cut = tail.rfind(b"\n") + 1  # bytes after the last newline are a partial line
        if cut < len(tail):
            f.truncate(pos + cut)
        lines = tail[:cut].splitlines()
        if not lines:
            return None
        record = parse_line(lines[-1])
        if isinstance(record, BadLine) or not isinstance(record, dict) or "line" not in record:
            raise ValueError(f"{path} does not end with a thresher batch result ({record}); "
                             "remove it or choose another output")
        return record["line"], record.get("id")


class JsonlWriter:
    """Appends one line per record and flushes it (the resume mechanism relies on whole lines)."""

    def __init__(self, path: Path):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def write(self, line: str) -> None:
        self._f.write(line + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class ParquetWriter:
    """Parquet output: `line`, `id` (as a string), `compression_rate`, `pruned_passages` and
    `result` (the JSONL line's text). Rows go out in row groups of `rows_per_group`; the file is
    written under a temporary name and renamed when complete, so it is never half-written."""

    def __init__(self, path: Path, rows_per_group: int = 1024):
        self._pq = _require_pyarrow()
        import pyarrow as pa

        self._pa = pa
        self.path, self._tmp = path, path.with_name(path.name + ".partial")
        self._schema = pa.schema([("line", pa.int64()), ("id", pa.string()), ("compression_rate", pa.float64()),
                                  ("pruned_passages", pa.list_(pa.string())), ("result", pa.string())])
        self._writer = self._pq.ParquetWriter(self._tmp, self._schema)
        self._rows: list[dict[str, Any]] = []
        self._rows_per_group = rows_per_group

    def write(self, line: str) -> None:
        record = json.loads(line)
        self._rows.append({"line": record["line"], "id": str(record["id"]),
                           "compression_rate": record["compression_rate"],
                           "pruned_passages": [p["pruned_text"] for p in record["passages"]], "result": line})
        if len(self._rows) >= self._rows_per_group:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            self._writer.write_table(self._pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
        os.replace(self._tmp, self.path)


def open_writer(path: Path, resume: bool) -> tuple[JsonlWriter | ParquetWriter, tuple[int, Any] | None]:
    """The writer for `path` (by suffix) and where to resume from (JSONL only)."""
    if input_format(str(path)) == "parquet":
        if path.exists():
            raise ValueError(f"{path} exists and Parquet output cannot be resumed; remove it, or write "
                             "JSONL (resumable) and convert afterwards")
        return ParquetWriter(path), None
    point = resume_point(path) if resume else None
    if not resume and path.exists():
        path.unlink()
    return JsonlWriter(path), point
