"""Soak: many mixed requests through one `thresher serve`, memory and latency sampled as it goes.

    .venv/bin/python benchmarks/soak.py [--requests 10000] [--quick]

The mix, round-robin over HotpotQA dev records: 1-passage and 10-passage compressions, list
bodies of 4, threshold / keep_ratio / top_k options, TEI /rerank and Cohere /v1/rerank, plus
malformed bodies (bad JSON, unknown keys, a 400-digit threshold, deep nesting) that must get their
4xx. 8 concurrent closed-loop clients (the load generator of load.py). Every 2 s the
server's RSS is sampled. Pass: no 5xx, no connection errors, every bad body its expected 4xx, and
the server's RSS over the last half of the run within 10% of its median over the first half
(flat memory). The reference in the same run is the first half itself: latency p50/p99 per
quarter show whether the server slowed down as it went.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, hotpot_requests, load_records, md_table, percentiles, write_results  # noqa: E402
from load import ServerProcess  # noqa: E402

CLIENTS = 8


def bodies(records: list[dict]) -> list[tuple[str, bytes, int]]:
    """(path, body, expected status) of the mix, one cycle."""
    reqs = hotpot_requests(records)
    good = []
    for i, (q, ps) in enumerate(reqs):
        good += [
            ("/v1/compress", {"question": q, "passages": ps[:1]}, 200),
            ("/v1/compress", {"question": q, "passages": ps, "keep_ratio": 0.3, "top_k": 3, "reorder": True}, 200),
            ("/v1/compress", [{"question": q, "passages": ps[j:j + 2], "threshold": 0.01} for j in range(0, 8, 2)], 200),
            ("/rerank", {"query": q, "texts": [p["text"] for p in ps[:5]], "raw_scores": i % 2 == 0}, 200),
            ("/v1/rerank", {"query": q, "documents": [p["text"] for p in ps[:5]], "top_n": 2}, 200),
        ]
    out = [(path, json.dumps(b).encode(), status) for path, b, status in good]
    bad = [
        ("/v1/compress", b'{"question": "q", "passages": [', 400),
        ("/v1/compress", b'{"question": "q", "passages": ["x"], "colour": 1}', 422),
        ("/v1/compress", b'{"question": "q", "passages": ["x"], "threshold": ' + b"9" * 400 + b"}", 422),
        ("/v1/compress", b"[" * 50_000 + b"]" * 50_000, 400),
        ("/v1/compress", b'{"question": "", "passages": ["x"]}', 422),
    ]
    mixed = []
    for k, item in enumerate(out):
        mixed.append(item)
        if k % 5 == 4:
            mixed.append(bad[(k // 5) % len(bad)])
    return mixed


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def soak(server: ServerProcess, mix: list[tuple[str, bytes, int]], total: int) -> dict:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    results: list[tuple[float, float, str, int, int]] = []  # (start, latency, path, status, expected)
    rss: list[tuple[float, float]] = []
    next_i = iter(range(total))

    async def worker() -> None:
        client = server.client()
        try:
            for i in next_i:
                path, body, expected = mix[i % len(mix)]
                start = loop.time()
                try:
                    status = await asyncio.wait_for(client.post(path, body), 120)
                except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                    status = -1
                    print(f"request {i} {path}: {type(e).__name__}", file=sys.stderr)
                results.append((start - t0, loop.time() - start, path, status, expected))
        finally:
            client.close()

    async def sampler() -> None:
        while True:
            rss.append((loop.time() - t0, rss_mb(server.proc.pid)))
            await asyncio.sleep(2.0)

    sample = asyncio.ensure_future(sampler())
    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    sample.cancel()
    rss.append((loop.time() - t0, rss_mb(server.proc.pid)))
    return {"results": results, "rss": rss, "seconds": loop.time() - t0}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="600 requests")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests = 600
    mix = bodies(load_records(limit=40))
    with ServerProcess(max_batch_requests=32) as server:
        run = asyncio.run(soak(server, mix, args.requests))
    res = run["results"]
    statuses: dict[str, int] = {}
    for _, _, _, status, _ in res:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    wrong = [(p, s, e) for _, _, p, s, e in res if s != e]
    times = np.array([r[1] for r in res]) * 1e3
    quarters = np.array_split(np.argsort([r[0] for r in res]), 4)
    rss = np.array([m for _, m in run["rss"]])
    half = len(rss) // 2
    first, last = float(np.median(rss[:half])), float(rss[half:].max())
    summary = {"requests": len(res), "seconds": run["seconds"], "rps": len(res) / run["seconds"],
               "statuses": statuses, "unexpected": len(wrong), "server_errors": sum(1 for _, s, _ in wrong if s >= 500),
               "connection_errors": statuses.get("-1", 0), "rss_first_half_median_mb": first,
               "rss_second_half_max_mb": last, "rss_growth": last / first - 1, "latency": percentiles(times),
               "latency_by_quarter": [percentiles(times[q]) for q in quarters],
               "flat_memory": last <= 1.10 * first, "passed": not wrong and last <= 1.10 * first}
    rows = [[f"Q{k + 1}", q["p50"], q["p99"], q["n"]] for k, q in enumerate(summary["latency_by_quarter"])]
    cmd = command("soak.py", argv)
    md = (f"{summary['requests']:,} requests in {summary['seconds']:.0f} s ({summary['rps']:.1f} req/s, {CLIENTS} "
          f"clients); statuses {statuses}; unexpected statuses {summary['unexpected']}, 5xx "
          f"{summary['server_errors']}, connection errors {summary['connection_errors']}. Server RSS: median "
          f"{first:.0f} MB over the first half, at most {last:.0f} MB over the second "
          f"({100 * summary['rss_growth']:+.1f}%).\n\n"
          f"{md_table(['quarter', 'p50 ms', 'p99 ms', 'requests'], rows)}\n\n`{cmd}`")
    write_results("soak", {"command": cmd, "summary": summary, "rss": run["rss"],
                           "unexpected": [list(w) for w in wrong[:50]]}, md)
    print(md)
    return summary


if __name__ == "__main__":
    raise SystemExit(0 if main()["passed"] else 1)
