"""One ONNX Attention node vs the traced primitive ops, for both shipped MiniLM models, same run.

Each model is exported twice into a temporary folder, the way `thresher.catalogue` exports it
(per-token int8): once as shipped (export/attention.py: one opset-23 Attention node per layer),
once with the attention traced as plain torch ops (reshape/transpose, MatMul, scale, mask add,
softmax, MatMul, transpose). Both run full `Compressor.compress` calls on the same HotpotQA
requests, taking turns request by request. Reports p50 and mean latency, their ratio, and
whether any sentence score differs.

    .venv/bin/python benchmarks/attention.py [--n 60] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Stopwatch, command, hotpot_requests, load_records, md_table, write_results  # noqa: E402


def export_both(name: str, root: Path) -> dict[str, Path]:
    import thresher.export.bert as bert
    from thresher.catalogue import NAMED_MODELS
    from thresher.export.attention import attention_reference

    out = {}
    for variant in ("primitive ops", "Attention node"):
        folder = root / f"{name}-{variant.split()[0]}"
        if variant == "primitive ops":
            with mock.patch.object(bert, "attention", attention_reference):
                NAMED_MODELS[name].export(folder)
        else:
            NAMED_MODELS[name].export(folder)
        out[variant] = folder
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=60, help="requests (after 3 warm-up)")
    ap.add_argument("--quick", action="store_true", help="10 requests")
    args = ap.parse_args(argv)
    if args.quick:
        args.n = 10
    import thresher

    requests = hotpot_requests(load_records(limit=args.n + 3))
    rows, data = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("minilm-pruner", "minilm-cosine"):
            folders = export_both(name, Path(tmp))
            pipes = {v: thresher.Compressor.load(f) for v, f in folders.items()}
            for q, p in requests[:3]:
                for c in pipes.values():
                    c.compress(q, p)
            ms = {v: [] for v in pipes}
            worst = 0.0
            for i, (q, p) in enumerate(requests[3:]):
                order = list(pipes) if i % 2 == 0 else list(pipes)[::-1]
                scores = {}
                for v in order:
                    with Stopwatch() as t:
                        r = pipes[v].compress(q, p)
                    ms[v].append(t.ms)
                    scores[v] = np.array([s.score for ps in r.passages for s in ps.sentences])
                worst = max(worst, float(np.abs(scores["primitive ops"] - scores["Attention node"]).max()))
            old, new = np.array(ms["primitive ops"]), np.array(ms["Attention node"])
            rows.append([name, np.median(old), np.median(new), np.median(old) / np.median(new),
                         old.mean() / new.mean(), worst])
            data[name] = {"primitive_ms": old.tolist(), "attention_ms": new.tolist(), "max_abs_score_diff": worst}
    md = "\n".join([f"Command: `{command('attention.py', argv)}`; {args.n} requests, taking turns.", "",
                    md_table(["model", "primitive ops p50 ms", "Attention node p50 ms", "speed-up p50",
                              "speed-up mean", "max |score difference|"], rows)])
    write_results("attention", {"command": command("attention.py", argv), **data}, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
