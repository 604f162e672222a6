"""Latency vs number of passages: the default model (`minilm-pruner`, int8 ONNX) vs the same
network in torch fp32 (pruner.py's reference, in a process of its own), same run, same requests.

Requests of P passages are hotpotqa_distractor dev questions with the first P of their own
paragraphs, topped up with the next records' paragraphs past 10. For each P the two pipelines take
turns in blocks of pruner.BLOCK requests; p50/p90 per P and the ratio go to
benchmarks/out/pruner_sweep.json (plotted by benchmarks/report.py).

    .venv/bin/python benchmarks/pruner_sweep.py [--sizes 1,2,5,10,20] [--n 20] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Stopwatch, command, hotpot_requests, load_records, md_table, percentiles, write_results  # noqa: E402
from pruner import BLOCK, ReferenceProcess  # noqa: E402


def sized_requests(records: list[dict], passages: int, n: int) -> list[tuple[str, list[dict]]]:
    """n requests of exactly `passages` paragraphs each (question i with its own paragraphs first)."""
    pool = hotpot_requests(records)
    out = []
    for i in range(n):
        question, paras = pool[i % len(pool)]
        j = i + 1
        while len(paras) < passages:
            paras = paras + pool[j % len(pool)][1]
            j += 1
        out.append((question, paras[:passages]))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,2,5,10,20", help="passage counts, comma-separated")
    ap.add_argument("--n", type=int, default=20, help="timed requests per size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    ap.add_argument("--quick", action="store_true", help="8 requests per size")
    args = ap.parse_args(argv)
    if args.quick:
        args.n = 8
    sizes = [int(s) for s in args.sizes.split(",")]
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"--sizes must list passage counts >= 1, got {args.sizes!r}")
    import thresher
    from thresher.engine.runner import SessionConfig

    c = thresher.Compressor.load("minilm-pruner", session_config=SessionConfig(intra_op_threads=args.threads))
    ref = ReferenceProcess(c.threshold, args.threads)
    records = load_records(limit=args.n + args.warmup + max(sizes) // 10 + 1)
    rows = []
    try:
        for size in sizes:
            requests = sized_requests(records, size, args.n + args.warmup)
            ours, theirs = [], []
            for start in range(0, len(requests), BLOCK):
                block = requests[start:start + BLOCK]
                for q, passages in block:
                    with Stopwatch() as t:
                        c.compress(q, passages)
                    ours.append(t.ms)
                theirs += [ref(q, passages)[0] for q, passages in block]
            a, b = percentiles(ours[args.warmup:]), percentiles(theirs[args.warmup:])
            rows.append({"passages": size, "thresher_int8": a, "torch_fp32_reference": b,
                         "speedup_p50": b["p50"] / a["p50"]})
            print(f"{size:>3} passages: thresher p50 {a['p50']:.1f} ms, torch {b['p50']:.1f} ms "
                  f"({rows[-1]['speedup_p50']:.1f}x)", flush=True)
    finally:
        ref.close()
    cmd = command("pruner_sweep.py", argv)
    res = {"model": c.model, "threads": args.threads, "requests_per_size": args.n, "rows": rows, "command": cmd}
    md = "\n\n".join([f"`{cmd}`", md_table(
        ["passages", "thresher p50 ms", "thresher p90 ms", "torch fp32 p50 ms", "torch fp32 p90 ms", "p50 ratio"],
        [[r["passages"], r["thresher_int8"]["p50"], r["thresher_int8"]["p90"],
          r["torch_fp32_reference"]["p50"], r["torch_fp32_reference"]["p90"], r["speedup_p50"]] for r in rows])])
    js, mdp = write_results("pruner_sweep", res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
