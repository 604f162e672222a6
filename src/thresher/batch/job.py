"""The streaming batch job: read requests, compress them in character-budget batches, write
one result per line in input order, resumably.

Memory is bounded by one batch (at most `batch_chars` characters or `batch_requests` requests)
plus the line being read: the input is streamed, results are written as each batch finishes.
Results do not depend on how requests are grouped (see README, "int8 and batch invariance"),
so any batch size, or the Ray job, writes the same bytes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thresher.batch.io import BadLine, count_records, open_writer, read_records
from thresher.batch.records import Outcome, Prepared, prepare
from thresher.engine.result import CompressionResult

BATCH_CHARS = 64_000  # ~16k tokens: a few 10-passage requests per engine call
BATCH_REQUESTS = 32
ON_ERROR = ("skip", "fail")


def check_budget(batch_chars: int, batch_requests: int) -> None:
    for name, value in (("batch_chars", batch_chars), ("batch_requests", batch_requests)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _groups(items: Iterable[Prepared | Outcome], batch_chars: int, batch_requests: int):
    """Consecutive items cut where the requests reach the budget; failed lines ride along in
    place, so that outcomes keep input order."""
    group: list[Prepared | Outcome] = []
    chars = count = 0
    for item in items:
        group.append(item)
        if isinstance(item, Prepared):
            chars, count = chars + item.chars, count + 1
            if chars >= batch_chars or count >= batch_requests:
                yield group
                group, chars, count = [], 0, 0
    if group:
        yield group


def _run_group(compressor, group: list[Prepared | Outcome]) -> list[Outcome]:
    prepared = [g for g in group if isinstance(g, Prepared)]
    try:
        results = compressor.compress_batch([p.item() for p in prepared], progress=False,
                                            batch_size=max(len(prepared), 1))
    except (TypeError, ValueError):
        results = None  # a request the validator passed failed in the engine: find which, alone
    done: dict[int, Outcome] = {}
    for i, p in enumerate(prepared):
        if results is not None:
            done[p.line] = Outcome.of(p, results[i])
            continue
        try:
            done[p.line] = Outcome.of(p, compressor.compress_batch([p.item()], progress=False)[0])
        except (TypeError, ValueError) as e:
            done[p.line] = Outcome(p.line, p.id, error=str(e))
    return [g if isinstance(g, Outcome) else done[g.line] for g in group]


def _prepared(lines: Iterable[tuple[int, Any]], options: Mapping[str, Any], limits) -> Iterator[Prepared | Outcome]:
    for line, record in lines:
        rid = record.get("id") if isinstance(record, Mapping) else None
        if isinstance(record, BadLine):
            yield Outcome(line, None, error=record.error)
            continue
        try:
            yield prepare(line, record, options, limits)
        except (TypeError, ValueError) as e:
            yield Outcome(line, rid, error=str(e))


def outcomes(compressor, lines: Iterable[tuple[int, Any]], *, options: Mapping[str, Any] | None = None,
             batch_chars: int = BATCH_CHARS, batch_requests: int = BATCH_REQUESTS) -> Iterator[Outcome]:
    """One Outcome per (line, record), in input order. The Ray job's actors call this too."""
    check_budget(batch_chars, batch_requests)
    for group in _groups(_prepared(lines, options or {}, compressor.limits), batch_chars, batch_requests):
        yield from _run_group(compressor, group)


def iter_compress(compressor, requests: Iterable[Mapping[str, Any] | tuple], *, batch_chars: int = BATCH_CHARS,
                  batch_requests: int = BATCH_REQUESTS, **options: Any) -> Iterator[CompressionResult]:
    """Compress a stream of requests ({"question", "passages", options...}, "id" optional; or
    (question, passages) tuples), yielding CompressionResults in input order. At most one batch
    is read ahead, so a generator of any length runs in bounded memory. A bad request raises
    ValueError/TypeError naming its index, after the results before its batch were yielded."""
    check_budget(batch_chars, batch_requests)

    def prepared() -> Iterator[Prepared]:
        for i, r in enumerate(requests):
            if isinstance(r, tuple) and len(r) == 2:
                r = {"question": r[0], "passages": r[1]}
            try:
                yield prepare(i, r, options, compressor.limits, need_id=False)
            except (TypeError, ValueError) as e:
                raise type(e)(f"requests[{i}]: {e}") from None

    for group in _groups(prepared(), batch_chars, batch_requests):
        yield from compressor.compress_batch([p.item() for p in group], progress=False, batch_size=len(group))


@dataclass
class Summary:
    """Counts, compression and throughput of one run (resumed lines are not re-counted)."""

    input: str
    output: str
    resumed_after_line: int = 0
    requests: int = 0  # written by this run
    bad_lines: int = 0
    chars: int = 0  # passage characters of the written requests
    kept_chars: int = 0
    seconds: float = 0.0
    errors_file: str | None = None

    @property
    def compression_rate(self) -> float:
        return 1.0 - self.kept_chars / self.chars if self.chars else 0.0

    def to_dict(self) -> dict[str, Any]:
        rate = self.requests / self.seconds if self.seconds else 0.0
        return {**asdict(self), "compression_rate": round(self.compression_rate, 6),
                "requests_per_s": round(rate, 3),
                "chars_per_s": round(self.chars / self.seconds if self.seconds else 0.0, 1)}


def errors_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".errors.jsonl")


def _prepare_errors_file(path: Path, keep_through: int) -> None:
    """Drop reports of lines after the resume point (they are read again); keep earlier ones."""
    if not path.exists():
        return
    kept = [ln for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and keep_through and json.loads(ln).get("line", 0) <= keep_through]
    path.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")


def start_line(input_path: str, point: tuple[int, Any] | None) -> int:
    """The input line a run resumes after, checked against the id the output recorded there."""
    if point is None:
        return 0
    line, rid = point
    for n, record in read_records(input_path, line - 1):
        found = record.get("id") if isinstance(record, Mapping) else None
        if n != line or found != rid:
            break
        return line
    raise ValueError(f"the output's last result is id {rid!r} from input line {line}, but the input has "
                     "another record there: it was written from a different input; choose another output")


class Sink:
    """Where outcomes go: results to the writer, errors to the errors file (or a failure)."""

    def __init__(self, writer, summary: Summary, errors_path: Path, on_error: str, where: str):
        self.writer, self.summary, self.errors_path = writer, summary, errors_path
        self.on_error, self.where = on_error, where
        self._errors = None

    def put(self, o: Outcome) -> None:
        s = self.summary
        if o.error is None:
            self.writer.write(o.text)
            s.requests, s.chars, s.kept_chars = s.requests + 1, s.chars + o.chars, s.kept_chars + o.kept
            return
        s.bad_lines += 1
        if self.on_error == "fail":
            raise ValueError(f"{self.where} line {o.line}: {o.error} (--on-error skip reports it and goes on)")
        if self._errors is None:
            self._errors = open(self.errors_path, "a", encoding="utf-8")  # noqa: SIM115
            s.errors_file = str(self.errors_path)
        self._errors.write(json.dumps(o.error_record(), ensure_ascii=False) + "\n")
        self._errors.flush()

    def close(self) -> None:
        self.writer.close()
        if self._errors is not None:
            self._errors.close()


def open_sink(input_path: str, output: Path, *, on_error: str, errors_path: Path | None,
              resume: bool) -> tuple[Sink, int]:
    """The sink of a run and the input line to resume after (shared with the Ray job)."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if input_path != "-" and Path(input_path).resolve() == output.resolve():
        raise ValueError("the output must not be the input file")
    writer, point = open_writer(output, resume)
    try:
        after = start_line(input_path, point)
    except BaseException:
        writer.close()
        raise
    errors_path = errors_path or errors_path_for(output)
    _prepare_errors_file(errors_path, after)
    summary = Summary(str(input_path), str(output), resumed_after_line=after)
    return Sink(writer, summary, errors_path, on_error, input_path), after


def progress_bar(input_path: str, after: int, enabled: bool):
    from tqdm.auto import tqdm

    total = count_records(input_path) if enabled else None
    return tqdm(total=total, initial=after, disable=not enabled, unit="req", desc="batch", smoothing=0.1)


def run_job(compressor, input_path: str, output: str | Path, *, on_error: str = "skip",
            errors_path: str | Path | None = None, batch_chars: int = BATCH_CHARS,
            batch_requests: int = BATCH_REQUESTS, resume: bool = True, progress: bool = False,
            options: Mapping[str, Any] | None = None) -> Summary:
    """Compress every request of `input_path` (JSONL, or Parquet with pyarrow) into `output`
    (JSONL, resumable; or Parquet), one line per request in input order. Bad lines go to the
    errors file with their line number (on_error="skip") or stop the job (on_error="fail");
    results before a failing line are written first."""
    check_budget(batch_chars, batch_requests)
    started = time.perf_counter()
    sink, after = open_sink(input_path, Path(output), on_error=on_error,
                            errors_path=Path(errors_path) if errors_path else None, resume=resume)
    try:
        with progress_bar(input_path, after, progress) as bar:
            for o in outcomes(compressor, read_records(input_path, after), options=options,
                              batch_chars=batch_chars, batch_requests=batch_requests):
                sink.put(o)
                bar.update(1)
                bar.set_postfix_str(f"{sink.summary.chars / max(bar.format_dict['elapsed'], 1e-9):,.0f} chars/s",
                                    refresh=False)
    finally:
        sink.close()
        sink.summary.seconds = time.perf_counter() - started
    return sink.summary
