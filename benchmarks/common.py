"""Shared helpers of the benchmark scripts: data, requests, timing summaries, result files.

Every script writes benchmarks/out/<name>.json (all figures + the command and machine) and
benchmarks/out/<name>.md (the tables pasted into benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "out"
HOTPOT = "hotpotqa_distractor"
SETTLE_S = 0.05
STAGES = ("segment", "tokenize", "pack", "run", "reduce", "assemble")  # Compressor timings_ms keys


def load_records(name: str = HOTPOT, limit: int | None = None) -> list[dict]:
    """Records of ../shared/data/<name>/dev.jsonl (the dev split only; never the holdout)."""
    path = DATA / name / "dev.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} is absent: the benchmark needs ../shared/data")
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


def hotpot_passages(record: dict) -> list[dict[str, str]]:
    """A HotpotQA record's paragraphs as thresher passages {"title", "text"}.

    The text is HotpotQA's sentence list joined with "" (sentences keep their leading spaces),
    so character offsets of the gold sentences are cumulative sentence lengths.
    """
    return [{"title": title, "text": "".join(sentences)} for title, sentences in record["context"]]


def hotpot_requests(records: list[dict]) -> list[tuple[str, list[dict[str, str]]]]:
    return [(r["question"], hotpot_passages(r)) for r in records]


def percentiles(ms: list[float] | np.ndarray) -> dict[str, float]:
    a = np.asarray(ms, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "mean": float(a.mean()), "n": int(a.size)}


class Stopwatch:
    """`with Stopwatch() as t: ...` then t.ms (wall) and t.cpu_ms (CPU time of every thread of
    this process: less sensitive than wall time to other processes competing for the cores).

    Entering first sleeps SETTLE_S: pipelines timed in turn share the process, and the thread
    pools of the one that just ran (ONNX Runtime's, torch's OpenMP) keep spinning for a while
    after their work, taking cores from the next timed call (measured: +5-10 ms on a 60 ms
    request on 2 cores). The pause lets them park; it does not change either pipeline's work.
    """

    def __enter__(self) -> Stopwatch:
        time.sleep(SETTLE_S)
        self._t0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.ms = (time.perf_counter() - self._t0) * 1e3
        self.cpu_ms = (time.process_time() - self._c0) * 1e3


def machine() -> dict:
    """CPU model, usable cores, the ISA extensions that decide int8 speed, ONNX Runtime's version:
    hosts differ (int8 latency differs 4-5x between AVX-512 VNNI and AVX2-only CPUs)."""
    import onnxruntime

    from thresher.engine.cpu import cpu_info

    info = cpu_info()
    return {"platform": platform.platform(), "cpu": info["model"], "isa": info["isa"],
            "isa_class": info["isa_class"], "cores": info["cores"], "host_cpus": os.cpu_count(),
            "onnxruntime": onnxruntime.__version__, "python": platform.python_version(),
            # other sessions share the machine: the 1-minute load average says how busy it was
            "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def machine_line(m: dict | None = None) -> str:
    """One line for a RESULTS table: CPU, cores, ISA class and extensions, ONNX Runtime."""
    m = m or machine()
    return (f"Machine: {m['cpu']}, {m['cores']} cores ({m['isa_class']}: {' '.join(m['isa']) or 'none'}), "
            f"onnxruntime {m['onnxruntime']}, {time.strftime('%Y-%m-%d')}.")


def command(script: str, argv: list[str] | None) -> str:
    """The command line that reproduces a run, from the repository root."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join([".venv/bin/python", f"benchmarks/{script}", *map(shlex.quote, args)])


def md_table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, data: dict, markdown: str) -> tuple[Path, Path]:
    """Write benchmarks/out/<name>.json and .md; returns both paths."""
    OUT.mkdir(parents=True, exist_ok=True)
    m = machine()
    data = {**data, "machine": m, "written": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    js, md = OUT / f"{name}.json", OUT / f"{name}.md"
    js.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md.write_text(markdown.rstrip() + "\n\n" + machine_line(m) + "\n", encoding="utf-8")
    return js, md
