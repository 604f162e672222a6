"""Open-loop load test of `thresher serve`: dynamic batching vs batch-size-1 serving.

For each request size (passages per request, from hotpotqa_distractor dev) and each serving mode
(the same server with max_batch_requests=32, or 1), a fresh server process is started on
loopback; requests then arrive as a Poisson process at a sweep of rates (multiples of the
measured batch-size-1 capacity), open loop: arrivals never wait for answers. Latency runs from
the scheduled arrival to the answer, so queueing is included. Every rate is bounded in count and
time, and the script stops by itself.

Capacity at a p99 target = the best throughput of a rate whose p99 latency meets the target
(--p99-target-x times the sequential service time of that request size) with no errors. The issue's bar: dynamic batching >= 2x batch-size-1 capacity, zero errors below
saturation, only 503s above it.

    .venv/bin/python benchmarks/load.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, command, hotpot_requests, load_records, md_table, percentiles, write_results  # noqa: E402

MODES = {"dynamic": 32, "batch-1": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`thresher serve` in a subprocess on a free loopback port."""

    def __init__(self, max_batch_requests: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        # a file, not a pipe (an unread pipe can fill and block the server); closed in __exit__
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "thresher.cli", "serve", "--port", str(self.port),
             "--max-batch-requests", str(max_batch_requests)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log)

    def log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def __enter__(self) -> ServerProcess:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.__exit__()
        raise SystemExit(f"the server did not become healthy in 120 s: {self.log_tail()}")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def batch_stats(self) -> tuple[float, float]:
        """(sum, count) of thresher_batch_requests so far."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = float(re.search(r"^thresher_batch_requests_sum (\S+)$", text, re.M).group(1))
        count = float(re.search(r"^thresher_batch_requests_count (\S+)$", text, re.M).group(1))
        return total, count


def service_time_s(url: str, bodies: list[bytes], n: int) -> float:
    """Median latency of sequential requests (no queueing): 1 / this = batch-1 capacity."""
    times = []
    with httpx.Client(timeout=120) as c:
        for body in bodies[:n]:
            t0 = time.perf_counter()
            c.post(f"{url}/v1/compress", content=body).raise_for_status()
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


async def open_loop(url: str, bodies: list[bytes], rate: float, duration_s: float, max_requests: int,
                    timeout_s: float, seed: int) -> dict:
    """Poisson arrivals at `rate` for at most duration_s / max_requests; every answer awaited."""
    rng = np.random.default_rng(seed)
    n = int(max(8, min(max_requests, rate * duration_s)))
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))))
    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = loop.time() + 0.05

        async def one(i: int) -> tuple[str, float, float]:
            scheduled = t0 + arrivals[i]
            await asyncio.sleep(max(0.0, scheduled - loop.time()))
            try:
                r = await client.post(f"{url}/v1/compress", content=bodies[i % len(bodies)],
                                      headers={"content-type": "application/json"})
                kind = "ok" if r.status_code == 200 else f"{r.status_code} {r.json().get('error_type', '?')}"
            except httpx.TimeoutException:
                kind = "client timeout"
            except httpx.HTTPError as e:
                kind = type(e).__name__
            done = loop.time()
            return kind, done - scheduled, done - t0

        results = await asyncio.gather(*(one(i) for i in range(n)))
    ok = [lat for kind, lat, _ in results if kind == "ok"]
    errors: dict[str, int] = {}
    for kind, _, _ in results:
        if kind != "ok":
            errors[kind] = errors.get(kind, 0) + 1
    elapsed = max(end for _, _, end in results)
    lat = percentiles(np.array(ok) * 1e3) if ok else {}
    return {"offered_rps": rate, "requests": n, "ok": len(ok), "throughput_rps": len(ok) / elapsed,
            "p50_ms": lat.get("p50"), "p95_ms": float(np.percentile(ok, 95) * 1e3) if ok else None,
            "p99_ms": lat.get("p99"), "errors": errors}


def capacity(rows: list[dict], p99_target_ms: float) -> float:
    good = [r["throughput_rps"] for r in rows if not r["errors"] and r["p99_ms"] is not None
            and r["p99_ms"] <= p99_target_ms]
    return max(good, default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two rates, a few seconds each")
    ap.add_argument("--passages", default="10,1", help="passages per request, comma-separated sizes")
    ap.add_argument("--factors", default="0.5,1,2,4",
                    help="arrival rates as multiples of the measured batch-size-1 capacity")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals per rate")
    ap.add_argument("--max-requests", type=int, default=400, help="arrivals per rate at most")
    ap.add_argument("--p99-target-x", type=float, default=4.0,
                    help="p99 latency target, in multiples of the sequential service time of the request size")
    ap.add_argument("--client-timeout-s", type=float, default=90.0,
                    help="client-side timeout; above the server's request_timeout_s (30 s by default)")
    ap.add_argument("--records", type=int, default=200)
    args = ap.parse_args(argv)
    if args.quick:
        args.factors, args.duration, args.max_requests, args.records = "1,3", 4.0, 60, 40
    factors = [float(f) for f in args.factors.split(",")]
    records = load_records(limit=args.records)

    rows, summary = [], []
    for n_passages in [int(p) for p in args.passages.split(",")]:
        bodies = [json.dumps({"question": q, "passages": ps[:n_passages]}).encode()
                  for q, ps in hotpot_requests(records)]
        base_rate = None
        mode_rows: dict[str, list[dict]] = {}
        for mode, max_batch in MODES.items():
            with ServerProcess(max_batch) as server:  # every other setting at its default
                if base_rate is None:  # rates from the first server's sequential service time
                    service_time_s(server.url, bodies, 3)  # warm-up
                    s = service_time_s(server.url, bodies[3:], 10)
                    base_rate = 1.0 / s
                    print(f"passages={n_passages}: sequential service time {s * 1e3:.1f} ms -> "
                          f"batch-1 capacity ~{base_rate:.2f} req/s", flush=True)
                mode_rows[mode] = []
                for k, factor in enumerate(factors):
                    before = server.batch_stats()
                    row = asyncio.run(open_loop(server.url, bodies, factor * base_rate, args.duration,
                                                args.max_requests, args.client_timeout_s, seed=k))
                    after = server.batch_stats()
                    batches = after[1] - before[1]
                    row.update(mode=mode, passages=n_passages, factor=factor,
                               mean_batch=(after[0] - before[0]) / batches if batches else 0.0)
                    mode_rows[mode].append(row)
                    rows.append(row)
                    print(f"  {mode:8s} {factor:4.1f}x {row['offered_rps']:6.2f} req/s -> "
                          f"{row['throughput_rps']:6.2f} ok/s  p50 {row['p50_ms'] or 0:7.0f} ms  "
                          f"p99 {row['p99_ms'] or 0:7.0f} ms  batch {row['mean_batch']:4.1f}  {row['errors']}",
                          flush=True)
        target_ms = args.p99_target_x * 1e3 / base_rate
        caps = {mode: capacity(r, target_ms) for mode, r in mode_rows.items()}
        ratio = caps["dynamic"] / caps["batch-1"] if caps["batch-1"] else float("nan")
        bad = sorted({k for r in rows if r["passages"] == n_passages for k in r["errors"] if not k.startswith("503")})
        summary.append({"passages": n_passages, "service_time_ms": 1e3 / base_rate, "p99_target_ms": target_ms,
                        "capacity_dynamic_rps": caps["dynamic"], "capacity_batch1_rps": caps["batch-1"],
                        "ratio": ratio, "non_503_errors": bad})

    header = ["passages", "mode", "offered req/s", "ok req/s", "p50 ms", "p95 ms", "p99 ms", "mean batch", "errors"]
    table = md_table(header, [[r["passages"], r["mode"], r["offered_rps"], r["throughput_rps"], r["p50_ms"] or 0.0,
                               r["p95_ms"] or 0.0, r["p99_ms"] or 0.0, r["mean_batch"],
                               ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "-"] for r in rows])
    cap_table = md_table(
        ["passages", "sequential service ms", "p99 target ms", "capacity batch-1 req/s", "capacity dynamic req/s",
         "ratio", "errors other than 503"],
        [[s["passages"], s["service_time_ms"], s["p99_target_ms"], s["capacity_batch1_rps"],
          s["capacity_dynamic_rps"], s["ratio"],
          ", ".join(s["non_503_errors"]) or "none"] for s in summary])
    cmd = command("load.py", argv)
    markdown = f"Command: `{cmd}`\n\n{cap_table}\n\n{table}\n"
    js, md = write_results("load", {"command": cmd, "args": vars(args), "summary": summary, "rows": rows}, markdown)
    print(markdown)
    print(f"wrote {js} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
