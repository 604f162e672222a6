"""Fit the calibration of a pruner's two heads on the validation fold of every dev set.

The model is run without calibration (its manifest's "calibration" is ignored), then a Platt
scaling sigmoid(scale * logit + shift) is fitted per head by weighted logistic regression:
- sentence head: x = logit of the sentence score, y = the sentence is needed (it overlaps a gold
  sentence by half of the shorter of the two, or holds an answer string; never for unanswerable
  questions);
- rerank head: x = the rank logit, y = the passage holds a needed sentence.
Every set gets the same total weight, so no setting (SQuAD's 1,700 questions, HotpotQA's 51)
decides alone what a score means. Prints the fitted pairs, the log-loss and expected calibration
error per set before and after, and writes benchmarks/out/calibrate.json.

    .venv/bin/python benchmarks/calibrate.py [--model default] [--sets ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, md_table, write_results  # noqa: E402
from common_sets import SETS, SHORT, Question, Scored, load_set, score  # noqa: E402

from thresher.scorers.encoder_pruner import logit  # noqa: E402

EPS = 1e-7


def sentence_labels(q: Question, p: Scored, gold: np.ndarray | None) -> np.ndarray:
    if not q.answerable:
        return np.zeros(p.spans.shape[0], np.float64)
    if gold is not None:
        y = np.zeros(p.spans.shape[0], np.float64)
        for a, b in gold.tolist():
            overlap = np.minimum(p.spans[:, 1], b) - np.maximum(p.spans[:, 0], a)
            y[overlap >= 0.5 * np.minimum(p.spans[:, 1] - p.spans[:, 0], b - a)] = 1.0
        return y
    fold = (lambda s: s) if q.case_sensitive else str.lower
    return np.array([float(any(ans in fold(p.text[a:b]) for ans in q.answers)) for a, b in p.spans.tolist()])


def fit_platt(x: np.ndarray, y: np.ndarray, w: np.ndarray, iters: int = 100) -> tuple[float, float]:
    """Weighted logistic regression of y on x (damped Newton); returns (scale, shift)."""
    def loss(a, b):
        z = a * x + b
        return float(np.sum(w * (np.logaddexp(0, z) - y * z)))

    a, b = 1.0, 0.0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(a * x + b)))
        g = np.array([np.sum(w * (p - y) * x), np.sum(w * (p - y))])
        h = w * p * (1 - p)
        hess = np.array([[np.sum(h * x * x), np.sum(h * x)], [np.sum(h * x), np.sum(h)]]) + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, g)
        t, before = 1.0, loss(a, b)
        while t > 1e-6 and loss(a - t * step[0], b - t * step[1]) > before:
            t /= 2  # backtrack: a full Newton step can overshoot on nearly separable data
        a, b = a - t * step[0], b - t * step[1]
        if np.abs(t * step).max() < 1e-9:
            break
    return float(a), float(b)


def report(p: np.ndarray, y: np.ndarray, bins: int = 10) -> dict:
    """Log-loss and expected calibration error (equal-width bins) of probabilities p for labels y."""
    p = np.clip(p, EPS, 1 - EPS)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    ece = sum(abs(p[idx == i].mean() - y[idx == i].mean()) * (idx == i).mean() for i in range(bins) if (idx == i).any())
    return {"log_loss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), "ece": float(ece),
            "positives": float(y.mean()), "n": int(y.size)}


def raw_copy(model: str, tmp: Path) -> Path:
    """A copy of the model directory without calibration: the heads' raw outputs."""
    from thresher.catalogue import resolve
    from thresher.manifest import MANIFEST

    src = resolve(model) if not Path(model).is_dir() else Path(model)
    dst = tmp / "raw"
    shutil.copytree(src, dst)
    manifest = json.loads((dst / MANIFEST).read_text(encoding="utf-8"))
    manifest.pop("calibration", None)
    manifest.pop("passage_threshold", None)
    manifest["rerank_activation"] = "identity"
    (dst / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return dst


def main(argv: list[str] | None = None) -> dict:
    import thresher

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--sets", nargs="+", default=[s for s in SETS if s != "hotpotqa_fullwiki_dev"], choices=SETS)
    ap.add_argument("--limit", type=int, default=None, help="first N validation questions per set")
    ap.add_argument("--quick", action="store_true", help="first 60 questions per set")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit = min(args.limit or 60, 60)
    thresher.Compressor.load(args.model)  # exported into the cache first where needed
    with tempfile.TemporaryDirectory() as tmp:
        compressor = thresher.Compressor.load(raw_copy(args.model, Path(tmp)))
        per_set = {}
        for name in args.sets:
            qs = load_set(name, limit=args.limit)
            sc = score(compressor, qs)
            xs, ys, xr, yr = [], [], [], []
            for q, passages in zip(qs, sc):
                for i, p in enumerate(passages):
                    y = sentence_labels(q, p, None if q.gold is None else q.gold[i])
                    xs.append(logit(p.scores))
                    ys.append(y)
                    xr.append(p.rerank)
                    yr.append(float(y.any()))
            per_set[name] = (np.concatenate(xs), np.concatenate(ys), np.array(xr, np.float64), np.array(yr))
    fits, rows = {}, []
    for head, (xi, yi) in (("sentence", (0, 1)), ("rerank", (2, 3))):
        x = np.concatenate([v[xi] for v in per_set.values()])
        y = np.concatenate([v[yi] for v in per_set.values()])
        w = np.concatenate([np.full(v[xi].size, 1.0 / v[xi].size) for v in per_set.values()])
        fits[head] = fit_platt(x, y, w)
        a, b = fits[head]
        for name, v in per_set.items():
            before = report(1 / (1 + np.exp(-v[xi])), v[yi])
            after = report(1 / (1 + np.exp(-(a * v[xi] + b))), v[yi])
            rows.append([head, SHORT[name], before["n"], before["positives"], before["log_loss"], after["log_loss"],
                         before["ece"], after["ece"]])
    cmd = command("calibrate.py", argv)
    res = {"model": args.model, "calibration": {k: [round(a, 4), round(b, 4)] for k, (a, b) in fits.items()},
           "rows": rows, "command": cmd}
    md = "\n\n".join([f"`{cmd}`", f"Fitted (scale, shift): {json.dumps(res['calibration'])}",
                      md_table(["head", "set", "n", "positive share", "log-loss raw", "log-loss calibrated",
                                "ECE raw", "ECE calibrated"], rows)])
    write_results("calibrate", res, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
