"""The batch job on Ray Data: the same input, output, errors file and resume as `run_job`, with
the compression spread over an actor pool (one loaded Compressor per actor).

Plan: the driver cuts the JSONL input into chunks of `lines_per_chunk` lines (byte offsets
only, one pass, bounded memory) -> an actor pool reads a chunk's lines and runs
`thresher.batch.job.outcomes` on them, batching by characters inside the chunk -> the driver takes the rows back in input order (`preserve_order`) and writes them with the
single-process job's Sink. So the output is the single-process job's, byte for byte, and a
killed actor's chunk is simply recomputed (Ray restarts the actor and retries the task); nothing
is written twice because only the driver writes, in order.

Not `ray.data.read_json`: it stops at the first bad line and has no line numbers, and the job
must report bad lines by number and go on. Workers read the input by path: on a cluster it must
be on storage every node sees (a shared file system).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from thresher.batch.io import input_format, parse_line
from thresher.batch.job import (
    BATCH_CHARS,
    BATCH_REQUESTS,
    Summary,
    check_budget,
    open_sink,
    outcomes,
    progress_bar,
)
from thresher.batch.records import Outcome

LINES_PER_CHUNK = 64  # one actor call's lines; also the unit of retry after a failure


def _require_ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError("the Ray job needs Ray: pip install 'thresher[ray]'") from None
    return ray


def chunks(path: str, after: int, lines_per_chunk: int = LINES_PER_CHUNK) -> Iterator[dict[str, Any]]:
    """{"path", "offset", "first_line", "lines"} for consecutive chunks of lines after `after`."""
    offset, line, start, first = 0, 0, None, 0
    with open(path, "rb") as f:
        for raw in f:
            line += 1
            if line > after and start is None:
                start, first = offset, line
            offset += len(raw)
            if start is not None and line - first + 1 == lines_per_chunk:
                yield {"path": path, "offset": start, "first_line": first, "lines": lines_per_chunk}
                start = None
    if start is not None:
        yield {"path": path, "offset": start, "first_line": first, "lines": line - first + 1}


def read_chunk(chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The (line, raw bytes) rows of one chunk; blank lines skipped, like the single-process reader."""
    rows = []
    with open(chunk["path"], "rb") as f:
        f.seek(int(chunk["offset"]))
        for i in range(int(chunk["lines"])):
            raw = f.readline()
            if raw.strip():
                rows.append({"line": int(chunk["first_line"]) + i, "raw": raw})
    return rows


class CompressActor:
    """One Compressor per actor; a call reads and compresses one chunk of lines, in order.
    (The actors read: a separate read task would wait for a CPU the actors already hold.)"""

    def __init__(self, load: Callable[[], Any], options: Mapping[str, Any], batch_chars: int, batch_requests: int):
        self.compressor = load()
        self.options, self.batch_chars, self.batch_requests = dict(options), batch_chars, batch_requests

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        keys = ("path", "offset", "first_line", "lines")
        rows = [r for values in zip(*(batch[k] for k in keys)) for r in read_chunk(dict(zip(keys, values)))]
        lines = ((r["line"], parse_line(r["raw"])) for r in rows)
        done = list(outcomes(self.compressor, lines, options=self.options, batch_chars=self.batch_chars,
                             batch_requests=self.batch_requests))
        return {
            "line": np.array([o.line for o in done], dtype=np.int64),
            "id": np.array([json.dumps(o.id) for o in done], dtype=object),  # keeps int vs str ids
            "text": np.array([o.text or "" for o in done], dtype=object),
            "error": np.array([o.error or "" for o in done], dtype=object),
            "chars": np.array([o.chars for o in done], dtype=np.int64),
            "kept": np.array([o.kept for o in done], dtype=np.int64),
        }


def _outcome(row: Mapping[str, Any]) -> Outcome:
    return Outcome(int(row["line"]), json.loads(row["id"]), row["text"] or None, row["error"] or None,
                   int(row["chars"]), int(row["kept"]))


class _Loader:
    """Picklable `Compressor.load(model)` with the actor's thread count (ONNX Runtime would
    otherwise start one thread per core of the node in every actor)."""

    def __init__(self, model: str, threads: int):
        self.model, self.threads = model, threads

    def __call__(self):
        from thresher import Compressor
        from thresher.engine.runner import SessionConfig

        return Compressor.load(self.model, session_config=SessionConfig(intra_op_threads=self.threads))


def run_ray_job(model: str, input_path: str, output: str | Path, *, actors: int = 1, cpus_per_actor: int = 1,
                on_error: str = "skip", errors_path: str | Path | None = None, batch_chars: int = BATCH_CHARS,
                batch_requests: int = BATCH_REQUESTS, lines_per_chunk: int = LINES_PER_CHUNK, resume: bool = True,
                progress: bool = False, options: Mapping[str, Any] | None = None,
                load: Callable[[], Any] | None = None, actor_options: Mapping[str, Any] | None = None) -> Summary:
    """`run_job` on Ray Data with `actors` actors of `cpus_per_actor` CPUs (and as many ONNX
    Runtime threads). Connects to the running Ray (ray.init() first for a cluster; a local one
    is started otherwise). `load` replaces `Compressor.load(model)` in the actors; actor_options
    go to Ray (defaults: restart a dead actor and retry its block, without limit)."""
    ray = _require_ray()
    check_budget(batch_chars, batch_requests)
    if input_format(input_path) != "jsonl" or input_path == "-":
        raise ValueError("the Ray job reads a JSONL file (by path, so that workers can read it); "
                         "convert Parquet input to JSONL or use `thresher batch` without --ray-actors")
    for name, value in (("actors", actors), ("cpus_per_actor", cpus_per_actor), ("lines_per_chunk", lines_per_chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    started = time.perf_counter()
    sink, after = open_sink(input_path, Path(output), on_error=on_error,
                            errors_path=Path(errors_path) if errors_path else None, resume=resume)
    try:
        pieces = list(chunks(str(Path(input_path).resolve()), after, lines_per_chunk))  # lines/64 small dicts
        if pieces:
            ctx = ray.data.DataContext.get_current()
            ctx.execution_options.preserve_order = True  # the driver writes in input order
            remote = {"max_restarts": -1, "max_task_retries": -1, **(actor_options or {})}
            ds = (ray.data.from_items(pieces)
                  .map_batches(CompressActor, batch_size=1, batch_format="numpy",
                               fn_constructor_kwargs={"load": load or _Loader(model, cpus_per_actor),
                                                      "options": dict(options or {}), "batch_chars": batch_chars,
                                                      "batch_requests": batch_requests},
                               compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus_per_actor,
                               **remote))
            with progress_bar(input_path, after, progress) as bar:
                for row in ds.iter_rows():
                    sink.put(_outcome(row))
                    bar.update(1)
    finally:
        sink.close()
        sink.summary.seconds = time.perf_counter() - started
    return sink.summary
