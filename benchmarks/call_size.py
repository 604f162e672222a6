"""Per-call token budget (`call_tokens` of the runner) on CPU: small calls vs the old large ones.

1. Raw ONNX Runtime: microseconds per token of the default model's session on rows of 160
   random tokens, 1 to 32 rows per call.
2. End to end: `compress_requests` per-request milliseconds on HotpotQA requests (10 passages),
   one request per call and batches of 8 (what the server and `compress_batch` run), for both
   MiniLM models, at call budgets of 512 tokens (the CPU default) up to the previous defaults
   (8,192 for the pruner, 16,384 for the cosine model). All budgets take turns per group of 8.

    .venv/bin/python benchmarks/call_size.py [--groups 8] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Stopwatch, command, hotpot_requests, load_records, md_table, write_results  # noqa: E402

BUDGETS = (512, 1024, 2048, 8192, 16384)
MODELS = ("minilm-pruner", "minilm-cosine")


def per_token_us(session, rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32), width: int = 160) -> dict[int, float]:
    rng = np.random.default_rng(0)
    feeds = {}
    for r in rows:
        ids = rng.integers(1000, 30000, (r, width))
        ids[:, 0] = 101
        feeds[r] = {"input_ids": ids, "attention_mask": np.ones((r, width), np.int64)}
        session.run(None, feeds[r])
    times = {r: [] for r in rows}
    for _ in range(6):
        for r, f in feeds.items():
            n = max(1, 32 // r)
            with Stopwatch() as t:
                for _ in range(n):
                    session.run(None, f)
            times[r].append(t.ms / n)
    return {r * width: float(np.median(times[r])) * 1e3 / (r * width) for r in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=8, help="groups of 8 requests (after 3 warm-up requests)")
    ap.add_argument("--quick", action="store_true", help="2 groups")
    args = ap.parse_args(argv)
    if args.quick:
        args.groups = 2
    from thresher.catalogue import load_model
    from thresher.engine.pipeline import compress_requests
    from thresher.engine.request import Options, validate

    scorers = {(m, b): load_model(m, call_tokens=b) for m in MODELS for b in BUDGETS}
    raw = per_token_us(scorers[("minilm-pruner", 512)]._runner.session)
    requests = [validate(q, p, Options()) for q, p in hotpot_requests(load_records(limit=8 * args.groups + 3))]
    for s in scorers.values():
        compress_requests(s, requests[:3])
    ms = {(m, b, k): [] for m in MODELS for b in BUDGETS for k in (1, 8)}
    for g in range(args.groups):
        group = requests[3 + 8 * g: 11 + 8 * g]
        for b in BUDGETS:
            for m in MODELS:
                s = scorers[(m, b)]
                with Stopwatch() as t:
                    for r in group:
                        compress_requests(s, [r])
                ms[(m, b, 1)].append(t.ms / 8)
                with Stopwatch() as t:
                    compress_requests(s, group)
                ms[(m, b, 8)].append(t.ms / 8)
    rows = []
    for m in MODELS:
        for k in (1, 8):
            med = {b: float(np.median(ms[(m, b, k)])) for b in BUDGETS}
            old = med[8192 if m == "minilm-pruner" else 16384]
            rows.append([m, k, *(med[b] for b in BUDGETS), old / med[512]])
    md = "\n".join([
        f"Command: `{command('call_size.py', argv)}`; {8 * args.groups} HotpotQA requests, 2 threads.", "",
        "ONNX Runtime alone (minilm-pruner int8, rows of 160 tokens): " +
        ", ".join(f"{n} tokens/call {us:.1f} us/token" for n, us in raw.items()), "",
        md_table(["model", "requests per call", *(f"{b} tok ms/req" for b in BUDGETS),
                  "speed-up of 512 vs old default"], rows)])
    write_results("call_size", {"command": command("call_size.py", argv), "us_per_token": raw,
                                "ms": {f"{m}|{b}|{k}": v for (m, b, k), v in ms.items()}}, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
