"""How much the default model's scores move between two onnxruntime versions.

Runs the same HotpotQA requests through the shipped default model in this interpreter and in a
second one (another venv with another onnxruntime, e.g. `make test-lowest`'s .venv-lowest), then
reports the largest score difference and the keep decisions that flip at the default threshold.

    .venv/bin/python benchmarks/ort_versions.py --other .venv-lowest/bin/python [--questions 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from common import HOTPOT, ROOT, command, load_records, md_table, write_results

CHILD = """
import json, sys
import onnxruntime, thresher
requests = json.load(sys.stdin)
c = thresher.Compressor.load("default")
items = [(q, p) for q, p in requests]
out = [[s.score for p in r.passages for s in p.sentences] for r in c.compress_batch(items, progress=False)]
json.dump({"onnxruntime": onnxruntime.__version__, "numpy": __import__("numpy").__version__,
           "scores": out}, sys.stdout)
"""


def scores_in(python: str, requests: list) -> dict:
    out = subprocess.run([python, "-c", CHILD], input=json.dumps(requests).encode(), capture_output=True,
                         timeout=1800, cwd=ROOT / "benchmarks")
    if out.returncode != 0:
        raise SystemExit(f"{python} failed:\n{out.stderr.decode()[-2000:]}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", default=str(ROOT / ".venv-lowest" / "bin" / "python"),
                        help="python of the venv with the other onnxruntime (default: make test-lowest's)")
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 questions")
    args = parser.parse_args(argv)
    if not Path(args.other).exists():
        print(f"no {args.other}: build a second venv first (make test-lowest), or pass --other")
        return
    records = load_records(HOTPOT, limit=10 if args.quick else args.questions)
    requests = [[r["question"], [{"title": t, "text": "".join(s)} for t, s in r["context"]]] for r in records]
    runs = [scores_in(sys.executable, requests), scores_in(os.path.abspath(args.other), requests)]
    a, b = (np.concatenate([np.asarray(s, np.float64) for s in run["scores"]]) for run in runs)
    from thresher.catalogue import PRUNER_THRESHOLD as threshold  # the default model's
    flips = int(np.sum((a > threshold) != (b > threshold)))
    rel = np.abs(a - b) / np.maximum(np.abs(a), 1e-6)
    rows = [[f"{runs[0]['onnxruntime']} vs {runs[1]['onnxruntime']}", a.size, float(np.abs(a - b).max()),
             float(np.median(rel)), float(rel.max()), flips, f"{flips / a.size:.2%}"]]
    table = md_table(["onnxruntime", "sentences", "max |diff|", "median rel. diff", "max rel. diff",
                      f"keep flips at {threshold:g}", "share"], rows)
    print(table)
    data = {"command": command("ort_versions.py", argv), "versions": [r["onnxruntime"] for r in runs],
            "numpy": [r["numpy"] for r in runs], "sentences": int(a.size), "max_abs_diff": float(np.abs(a - b).max()),
            "flips": flips}
    write_results("ort_versions", data, f"Command: `{data['command']}`\n\n{table}")


if __name__ == "__main__":
    main()
