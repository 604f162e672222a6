"""AVX2 latency of the encoder models, projected from their multiply-accumulates (a roofline on a
host that cannot run the AVX2 kernels).

ONNX Runtime's MLAS picks its int8 and fp32 kernels from cpuid at start-up and has no setting that
caps the ISA, so on an AVX-512 host the AVX2 path cannot be timed. The encoders are compute
bound (every call is a few dense [rows, width] matrix products), so on one CPU their model time
is close to proportional to the multiply-accumulates they execute. This benchmark:

1. runs the models on the inputs of the figures measured on the 2-core AVX2 host (issue #24:
   `pruner.py --n 80` default p50 244 ms; `latency.py --quick` minilm-cosine p50 193 ms) and
   counts the MACs of every model call from its padded [rows, width] shape (linear layers
   4h^2 + 2hf per token per layer, attention 2 * width * h per token per layer);
2. fits the AVX2 throughput (MAC/s) on the default model's figure and checks it on the other
   model: the projection is trusted as far as that check holds;
3. projects candidates from their MACs: fewer layers, the question once per request instead
   of once per passage, and both.

Non-model time (segment, tokenize, pack, reduce) is measured here and added unchanged.

    .venv/bin/python benchmarks/isa_projection.py [--n 80]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, hotpot_requests, load_records, md_table, write_results  # noqa: E402

# What the AVX2 host measured (issue #24, 2 cores, nothing else running).
AVX2_P50_MS = {"default": 244.0, "minilm-cosine": 193.0}
HIDDEN, FF, LAYERS = 384, 1536, 6  # all-MiniLM-L6-v2, the base of both models
TARGET_MS = 100.0


class CountingRunner:
    """Wraps a runner; records the padded [rows, width] of every call."""

    def __init__(self, inner):
        self.inner, self.call_tokens, self.padded = inner, inner.call_tokens, inner.padded
        self.shapes: list[tuple[int, int]] = []

    def run(self, feeds):
        self.shapes.append(tuple(feeds["input_ids"].shape))
        return self.inner.run(feeds)


def macs(shapes, layers: int = LAYERS, drop_tokens: int = 0) -> float:
    """Multiply-accumulates of calls of [rows, width] through `layers` MiniLM layers; drop_tokens
    (over all calls) leave the linear layers' work (the question sent once, not once per row)."""
    per_token = 4 * HIDDEN**2 + 2 * HIDDEN * FF
    total = sum(rows * width * per_token + 2 * rows * width**2 * HIDDEN for rows, width in shapes)
    return layers * (total - drop_tokens * per_token)


def measure(model: str, requests, threads: int):
    """Per request: its call shapes, its MACs and the non-model milliseconds measured here."""
    import thresher
    from thresher.catalogue import load_model
    from thresher.engine.runner import SessionConfig

    scorer = load_model(model, session_config=SessionConfig(intra_op_threads=threads))
    counting = CountingRunner(scorer._runner)  # noqa: SLF001 (a benchmark's probe of the calls)
    scorer._runner = counting  # noqa: SLF001
    compressor = thresher.Compressor(scorer)
    out = []
    for question, passages in requests:
        counting.shapes.clear()
        r = compressor.compress(question, passages)
        out.append({"shapes": list(counting.shapes), "macs": macs(counting.shapes),
                    "other_ms": r.timings_ms["total"] - r.timings_ms.get("run", 0.0),
                    "run_ms": r.timings_ms.get("run", 0.0), "rows": sum(s[0] for s in counting.shapes)})
    return out


def question_tokens(model: str, question: str) -> int:
    from thresher.catalogue import resolve
    from thresher.engine.tokenize import load_tokenizer
    from thresher.scorers.encoder_pruner import normalize_question

    tok = load_tokenizer(resolve(model) / "tokenizer.json")
    return len(tok.encode(normalize_question(question), add_special_tokens=False).ids)


def run(args) -> dict:
    records = load_records(limit=args.warmup + args.n)
    requests = hotpot_requests(records)[args.warmup:]
    pruner = measure("default", requests, args.threads)
    cosine = measure("minilm-cosine", requests[:20], args.threads)  # latency.py --quick: 20 requests
    p50_macs = float(np.median([r["macs"] for r in pruner]))
    other = float(np.median([r["other_ms"] for r in pruner]))
    rate = p50_macs / ((AVX2_P50_MS["default"] - other) / 1e3)  # MAC/s of the AVX2 host's int8 path
    cos_macs = float(np.median([r["macs"] for r in cosine]))
    cos_other = float(np.median([r["other_ms"] for r in cosine]))
    cos_projected = cos_other + 1e3 * cos_macs / rate
    here_rate = float(np.median([r["macs"] / (r["run_ms"] / 1e3) for r in pruner]))
    q_tok = [question_tokens("default", q) for q, _ in requests]
    candidates = []
    for layers in (6, 4, 3, 2):
        for once in (False, True):
            per = [macs(r["shapes"], layers, (r["rows"] - 1) * q if once else 0) for r, q in zip(pruner, q_tok)]
            ms = other + 1e3 * float(np.median(per)) / rate
            candidates.append({"layers": layers, "question_once": once, "macs_p50": float(np.median(per)),
                               "projected_avx2_p50_ms": ms, "meets_target": ms <= TARGET_MS})
    return {"requests": len(requests), "threads": args.threads, "avx2_figures_ms": AVX2_P50_MS,
            "default_macs_p50": p50_macs, "non_model_ms_p50": other, "avx2_rate_gmac_s": rate / 1e9,
            "this_host_rate_gmac_s": here_rate / 1e9, "rate_ratio": here_rate / rate,
            "check": {"model": "minilm-cosine", "macs_p50": cos_macs, "projected_ms": cos_projected,
                      "measured_ms": AVX2_P50_MS["minilm-cosine"],
                      "error": cos_projected / AVX2_P50_MS["minilm-cosine"] - 1},
            "candidates": candidates}


def markdown(res: dict, cmd: str) -> str:
    c = res["check"]
    rows = [[r["layers"], "yes" if r["question_once"] else "no", f"{r['macs_p50'] / 1e9:.2f}",
             f"{r['projected_avx2_p50_ms']:.0f}", "yes" if r["meets_target"] else "no"] for r in res["candidates"]]
    return "\n\n".join([
        f"`{cmd}`",
        f"{res['requests']} HotpotQA requests (~10 paragraphs), {res['threads']} threads. The default model "
        f"executes a median {res['default_macs_p50'] / 1e9:.2f} GMAC per request; with the AVX2 host's p50 of "
        f"{res['avx2_figures_ms']['default']:.0f} ms and {res['non_model_ms_p50']:.1f} ms of non-model work, its int8 "
        f"path runs {res['avx2_rate_gmac_s']:.0f} GMAC/s on 2 cores (this host, under whatever load the run "
        f"had: {res['this_host_rate_gmac_s']:.0f} GMAC/s).",
        f"Check on the other measured model: {c['model']} executes {c['macs_p50'] / 1e9:.2f} GMAC per request; "
        f"projected p50 {c['projected_ms']:.0f} ms vs {c['measured_ms']:.0f} ms measured on the AVX2 host "
        f"({100 * c['error']:+.0f}%).",
        f"Candidates, projected to the AVX2 host (target p50 <= {TARGET_MS:.0f} ms):\n\n"
        + md_table(["layers", "question once per request", "GMAC p50", "projected AVX2 p50 (ms)", "meets"], rows),
    ])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="20 requests")
    args = ap.parse_args(argv)
    if args.quick:
        args.n = min(args.n, 20)
    cmd = command("isa_projection.py", argv)
    res = run(args)
    res["command"] = cmd
    md = markdown(res, cmd)
    js, mdp = write_results("isa_projection", res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
