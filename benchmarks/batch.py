"""Batch jobs: throughput of `run_job` vs a Python loop over `compress`, RSS over time of
`thresher batch` on a 10^5-request input, and the Ray Data job at 1 and 2 actors vs the
single-process job, all in one run on the same requests.

Requests are HotpotQA dev records (10 paragraphs each) cycled to the wanted count with new ids.
Tokens are counted once with the model's own tokenizer (question + every passage).

    .venv/bin/python benchmarks/batch.py [--requests 2000] [--rss-requests 100000] [--rss-seconds 240]
                                         [--ray-requests 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HOTPOT, ROOT, command, hotpot_passages, load_records, md_table, write_results

RSS_EVERY_S = 2.0


def requests_file(path: Path, n: int, records: list[dict]) -> Path:
    """`n` requests cycling the dev records, each with a new id."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            r = records[i % len(records)]
            f.write(json.dumps({"id": f"{r['id']}-{i}", "question": r["question"],
                                "passages": hotpot_passages(r)}, ensure_ascii=False) + "\n")
    return path


def count_tokens(path: Path) -> int:
    """Question + passage tokens of every request, with the default model's tokenizer."""
    from tokenizers import Tokenizer

    from thresher.catalogue import resolve

    tok = Tokenizer.from_file(str(resolve("default") / "tokenizer.json"))
    total = 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            texts = [r["question"], *(p["text"] for p in r["passages"])]
            total += sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return total


def throughput(path: Path, n: int, tokens: int, work: Path) -> list[list]:
    """A Python loop over Compressor.compress vs run_job, same requests, same process."""
    from thresher import Compressor
    from thresher.batch import run_job

    c = Compressor.load("default")
    items = [json.loads(line) for line in path.open(encoding="utf-8")]
    c.compress(items[0]["question"], items[0]["passages"])  # warm up
    t0 = time.perf_counter()
    for r in items:
        c.compress(r["question"], r["passages"])
    loop_s = time.perf_counter() - t0
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    summary = run_job(c, str(path), work / "job.jsonl", resume=False)
    job_s = time.perf_counter() - t0
    assert summary.requests == n, summary
    return [["Python loop over compress()", n, n / loop_s, tokens / loop_s, 1.0, load],
            ["run_job (thresher batch)", n, n / job_s, tokens / job_s, loop_s / job_s, os.getloadavg()[0]]]


def rss_over_time(path: Path, seconds: float, work: Path) -> dict:
    """Runs `thresher batch` on the big input in a child process for `seconds` (or to the end),
    sampling its RSS and how many results it has written."""
    out = work / "rss.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [str(ROOT / ".venv" / "bin" / "thresher"), "batch", str(path), "-o", str(out), "--no-progress",
           "--no-resume"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples, start, written, seen = [], time.perf_counter(), 0, 0
    while proc.poll() is None and time.perf_counter() - start < seconds:
        time.sleep(RSS_EVERY_S)
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except FileNotFoundError:
            break
        rss = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")) / 1024
        if out.exists():
            with out.open("rb") as f:  # count only the newly appended lines
                f.seek(seen)
                chunk = f.read()
                written += chunk.count(b"\n")
                seen += len(chunk)
        samples.append((round(time.perf_counter() - start, 1), round(rss, 1), written))
    finished = proc.poll() is not None
    if not finished:
        proc.terminate()
    proc.wait()
    return {"samples": samples, "finished": finished}


def ray_runs(path: Path, n: int, tokens: int, work: Path) -> list[list]:
    """The single-process job (1 ONNX Runtime thread, before and after the Ray runs, to show the
    machine's drift; and 2 threads) vs the Ray job at 1 and 2 actors of 1 CPU each, on the same
    requests; Ray's start-up (actors loading the model) is included."""
    import ray

    from thresher import Compressor
    from thresher.batch import run_job
    from thresher.engine.runner import SessionConfig
    from thresher.integrations.ray_data import run_ray_job

    rows, base = [], None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for what in ("sp1", "ray1", "ray2", "sp1", "sp2"):
            t0 = time.perf_counter()
            if what.startswith("ray"):
                run_ray_job("default", str(path), work / f"{what}.jsonl", actors=int(what[-1]), resume=False)
                s = time.perf_counter() - t0
                same = (work / f"{what}.jsonl").read_bytes() == (work / "sp1.jsonl").read_bytes()
                label = f"Ray Data, {what[-1]} actor(s) x 1 CPU (output identical: {same})"
            else:
                c = Compressor.load("default", session_config=SessionConfig(intra_op_threads=int(what[-1])))
                t0 = time.perf_counter()
                run_job(c, str(path), work / f"{what}.jsonl", resume=False)
                s = time.perf_counter() - t0
                label = f"single process, {what[-1]} thread(s)"
                del c
            base = base or s
            rows.append([label, n, n / s, tokens / s, base / s, os.getloadavg()[0]])
    finally:
        ray.shutdown()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests of the throughput comparison")
    ap.add_argument("--rss-requests", type=int, default=100_000, help="requests in the RSS run's input")
    ap.add_argument("--rss-seconds", type=float, default=600.0, help="stop the RSS run after this long")
    ap.add_argument("--ray-requests", type=int, default=200, help="requests of the Ray comparison")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: throughput,rss,ray")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20 / 8 requests, 30 s of RSS")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.ray_requests, args.rss_requests, args.rss_seconds = 20, 8, 2_000, 30.0
    skip = set(filter(None, args.skip.split(",")))
    records = load_records(HOTPOT)
    data: dict = {"command": command("batch.py", argv), "args": vars(args)}
    md = [f"Command: `{data['command']}`", ""]
    header = ["run", "requests", "requests/s", "tokens/s", "speed vs first row", "load avg (1 min) after"]
    with tempfile.TemporaryDirectory(prefix="thresher-batch-bench-") as tmp:
        work = Path(tmp)
        parts = (("throughput", "Single process:", args.requests, throughput),
                 ("ray", "Ray Data vs the single-process job:", args.ray_requests, ray_runs))
        for part, title, n, run in parts:
            if part in skip:
                continue
            path = requests_file(work / f"{part}.jsonl", n, records)
            rows = run(path, n, count_tokens(path), work)
            data[part] = rows
            md += [title, "", md_table(header, rows), ""]
            print(md_table(header, rows), flush=True)
        if "rss" not in skip:
            path = requests_file(work / "big.jsonl", args.rss_requests, records)
            rss = rss_over_time(path, args.rss_seconds, work)
            data["rss"] = {**rss, "input_requests": args.rss_requests, "input_mb": path.stat().st_size / 2**20}
            samples = rss["samples"]
            picks = sorted({samples[int(q * (len(samples) - 1))] for q in (0, 0.1, 0.25, 0.5, 0.75, 1.0)})
            table = md_table(["seconds", "RSS MB", "results written"], [list(s) for s in picks])
            md += [f"RSS of `thresher batch` over time on a {args.rss_requests:,}-request input "
                   f"({data['rss']['input_mb']:.0f} MB; {'finished' if rss['finished'] else 'stopped'} after "
                   f"{samples[-1][0] if samples else 0} s; peak {max(s[1] for s in samples):.1f} MB):", "", table]
            print(table, flush=True)
    ran = [p for p in ("throughput", "ray", "rss") if p not in skip]
    name = "batch" if len(ran) == 3 else "_".join(["batch", *ran])  # a partial run keeps the full one
    js, mdp = write_results(name, data, "\n".join(md))
    print(f"wrote {js} and {mdp}")


if __name__ == "__main__":
    sys.exit(main())
