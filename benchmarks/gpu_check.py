"""The GPU check: kernel parity, kernel bandwidth vs a device copy, end-to-end latency vs references.

    bash benchmarks/gpu_check.sh                   # on a CUDA machine (builds _native if needed)
    python benchmarks/gpu_check.py --tiny          # smoke test of the script itself (CPU ok, interpreted)

Needs torch, triton and transformers (and nltk for Provence's Punkt sentences), no network and no
published weights: both models are random checkpoints built from configs (latency does not
depend on weight values).

1. Parity (gpu_kernels.py): kernels/yesno_head.py and kernels/sentence_keep.py against their
   twins, on the device.
2. Bandwidth (gpu_kernels.py): bytes each kernel must move / its time, against a device-to-device
   copy measured in the same run (target: >= 50% of copy).
3. End to end (gpu_models.py), through the public path `Compressor.load(checkpoint folder,
   device="cuda", backend="torch")` and `compress()`, p50/p99 against the reference procedure in
   the same run, with the largest probability difference and keep agreement:
   - EXIT-size (Gemma-2B config, bf16, 5 HotpotQA documents per request); reference = one whole
     prompt per sentence with full-vocabulary logits. Target p50 <= 30 ms.
   - Provence-size (DeBERTa-v3-large config, bf16, 20 passages per request); reference = one
     (question, passage) pair at a time. Target p50 <= 10 ms.

Prints a table last and writes JSON (--out, default benchmarks/out/gpu_check.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if not torch.cuda.is_available():  # kernels on CPU tensors only run interpreted
    os.environ.setdefault("TRITON_INTERPRET", "1")

from gpu_kernels import check_bandwidth, check_parity  # noqa: E402
from gpu_models import exit_checkpoint, provence_checkpoint, run_exit, run_provence  # noqa: E402

TARGETS_MS = {"exit": 30.0, "provence": 10.0}  # issue 21, on an H200


def load_records(data: Path | None, n: int) -> tuple[list[dict], str]:
    candidates = [data] if data else [ROOT.parent / "shared" / "data", ROOT / "shared" / "data"]
    for base in candidates:
        path = base / "hotpotqa_distractor" / "dev.jsonl"
        if path.is_file():
            with path.open(encoding="utf-8") as f:
                return [json.loads(line) for _, line in zip(range(n), f)], str(path)
    # No data here: synthetic records with HotpotQA's shape (10 paragraphs of ~4 sentences of ~25 words).
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5000)]

    def sentence():
        return " " + " ".join(rng.choice(words, int(rng.integers(12, 40)))) + "."

    recs = [{"question": " ".join(rng.choice(words, 15)) + "?",
             "context": [[f"t{i}", [sentence() for _ in range(int(rng.integers(2, 7)))]] for i in range(10)]}
            for _ in range(n)]
    return recs, "synthetic (HotpotQA data not found)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "gpu_check.json")
    ap.add_argument("--data", type=Path, default=None, help="folder holding hotpotqa_distractor/dev.jsonl")
    ap.add_argument("--requests", type=int, default=24, help="distinct requests per model")
    ap.add_argument("--timed", type=int, default=100, help="timed thresher calls per model")
    ap.add_argument("--ref-timed", type=int, default=8, help="timed reference calls per model")
    ap.add_argument("--tiny", action="store_true", help="tiny models and sizes: a smoke test of this script")
    ap.add_argument("--skip", nargs="*", default=[], choices=["parity", "bandwidth", "exit", "provence"])
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.tiny:
        print("no CUDA device: run with --tiny for a CPU smoke test of this script", file=sys.stderr)
        return 2
    if args.tiny:
        args.requests, args.timed, args.ref_timed = min(args.requests, 4), min(args.timed, 4), min(args.ref_timed, 2)
    import transformers
    import triton

    records, source = load_records(args.data, 2 * args.requests)
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
              "versions": {"torch": torch.__version__, "triton": triton.__version__,
                           "transformers": transformers.__version__, "python": platform.python_version()},
              "dtype": "bf16" if device.type == "cuda" else "fp32", "tiny": args.tiny, "data": source,
              "command": " ".join(["python", "benchmarks/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])}
    work = Path(tempfile.mkdtemp(prefix="thresher-gpu-check-"))
    t_start = time.perf_counter()
    steps = [("parity", lambda: check_parity(device, args.tiny)), ("bandwidth", lambda: check_bandwidth(device)),
             ("exit", lambda: run_exit(exit_checkpoint(work / "exit", records, args.tiny), device,
                                       records[: args.requests], args.timed, args.ref_timed)),
             ("provence", lambda: run_provence(provence_checkpoint(work / "provence", records, args.tiny), device,
                                               records, args.timed, args.ref_timed))]
    for name, step in steps:
        if name in args.skip:
            continue
        t0 = time.perf_counter()
        try:
            result[name] = step()
        except Exception as exc:  # noqa: BLE001 - one failing step must not hide the others
            import traceback

            result[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        result[name]["seconds"] = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"[{time.perf_counter() - t_start:6.1f}s] {name}: {json.dumps(result[name])[:400]}", flush=True)
    result["seconds"] = time.perf_counter() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")
    print(summary_table(result))
    return 0


def summary_table(r: dict) -> str:
    rows = [("check", "measured", "target", "status")]

    def status(ok):
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    par = r.get("parity", {})
    for k in ("yesno_head", "sentence_keep"):
        v = par.get(k)
        if v:
            err = v.get("max_abs_logit_err", v.get("max_abs_score_err"))
            rows.append((f"parity {k}", f"max err {err:.2e}", "fp32 bound", status(v["ok"])))
    bw = r.get("bandwidth", {})
    if "copy" in bw:
        rows.append(("copy bandwidth", f"{bw['copy']['GBps']:.0f} GB/s", "", ""))
        for k in ("yesno_head", "sentence_keep", "sentence_keep_many_sentences"):
            v = bw[k]
            rows.append((f"{k} bandwidth", f"{v['GBps']:.0f} GB/s ({100 * v['fraction_of_copy']:.0f}% of copy)",
                         ">= 50% of copy", status(v["fraction_of_copy"] >= 0.5)))
    for k, target in TARGETS_MS.items():
        v = r.get(k, {})
        if "thresher_ms" in v:
            o, ref = v["thresher_ms"], v["reference_ms"]
            rows.append((f"{k} p50 / p99", f"{o['p50']:.1f} / {o['p99']:.1f} ms (ref {ref['p50']:.0f} ms, "
                         f"x{v['speedup_p50']:.1f})", f"p50 <= {target:.0f} ms", status(o["p50"] <= target)))
            rows.append((f"{k} vs reference", f"max |dp| {v['max_abs_prob_diff']:.3f}, keep agree "
                         f"{100 * v['keep_agreement']:.1f}%", "same decisions", ""))
            if "tree_self_check_rel_err" in v:
                err = v["tree_self_check_rel_err"]
                rows.append(("exit tree mask check", f"rel logit err {err:.1e}", "< 5e-2 (rounding)", status(err < 5e-2)))
            rows.append((f"{k} CUDA graphs", f"{v.get('graphs_captured', 0)} captured", "",
                         "" if not v.get("graphs_disabled") else "eager"))
        elif "error" in v:
            rows.append((k, v["error"][:60], "", "ERROR"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows)


if __name__ == "__main__":
    raise SystemExit(main())
