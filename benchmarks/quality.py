"""Quality of the default model on hotpotqa_distractor dev: gold-sentence recall vs compression.

Every dev question is compressed once with its ~10 paragraphs; the sentence scores are then
swept offline over thresholds (threshold mode) and keep ratios (budget mode), applying the
engine's own selection and pruned-text assembly, so each point is exactly what
`compress(threshold=t)` / `compress(keep_ratio=r)` would return.

Gold supporting sentences are HotpotQA's own sentence list, while thresher segments the joined
paragraph itself, so a gold sentence is mapped to its character span in the joined text and
counts as recalled when the kept sentences cover at least COVER (50%) of its non-space
characters. Removed = the engine's compression rate (1 - pruned chars / passage chars), averaged
over questions. Reported: recall (micro over gold sentences), the share of questions with every
gold sentence recalled, and removal; plus two position baselines (first k sentences of each
paragraph). The default threshold is chosen as the largest threshold on a 0.01 grid whose
recall is >= TARGET_RECALL (i.e. the most removal at that recall).

    .venv/bin/python benchmarks/quality.py [--limit N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, hotpot_passages, load_records, md_table, write_results  # noqa: E402

COVER = 0.5  # a gold sentence is recalled when >= 50% of its non-space characters are kept
TARGET_RECALL = 0.85
TARGET_REMOVED = 0.50
THRESHOLDS = np.round(np.arange(-0.10, 0.801, 0.01), 2) + 0.0  # + 0.0: no "-0.00"
KEEP_RATIOS = np.round(np.arange(0.10, 0.951, 0.05), 2)
SHOWN_THRESHOLDS = np.round(np.arange(0.0, 0.701, 0.05), 2)


@dataclass
class PassageEval:
    text: str
    spans: np.ndarray  # int64 [S, 2], thresher's sentences
    scores: np.ndarray  # float32 [S]
    gold: np.ndarray  # int64 [G, 2], character spans of gold sentences in text
    cum_nonspace: np.ndarray  # int64 [len(text) + 1], prefix count of non-space characters


def gold_spans(sentences: list[str], gold_ids: list[int]) -> np.ndarray:
    ends = np.cumsum([len(s) for s in sentences])
    starts = ends - np.array([len(s) for s in sentences])
    ids = [i for i in gold_ids if 0 <= i < len(sentences)]
    return np.stack([starts[ids], ends[ids]], axis=1).astype(np.int64) if ids else np.zeros((0, 2), np.int64)


def score_records(compressor, records: list[dict], batch_size: int) -> list[list[PassageEval]]:
    items = [(r["question"], hotpot_passages(r)) for r in records]
    results = compressor.compress_batch(items, progress=sys.stderr.isatty(), batch_size=batch_size)
    out = []
    for rec, res in zip(records, results):
        gold_by_title: dict[str, list[int]] = {}
        for title, idx in rec["supporting_facts"]:
            gold_by_title.setdefault(title, []).append(int(idx))
        passages = []
        for (title, sentences), p in zip(rec["context"], res.passages):
            ns = np.fromiter((not c.isspace() for c in p.text), dtype=np.int64, count=len(p.text))
            cum = np.zeros(len(p.text) + 1, np.int64)
            np.cumsum(ns, out=cum[1:])
            passages.append(PassageEval(
                p.text,
                np.array([(s.start, s.end) for s in p.sentences], np.int64).reshape(-1, 2),
                np.array([s.score for s in p.sentences], np.float32),
                gold_spans(sentences, gold_by_title.get(title, [])),
                cum,
            ))
        out.append(passages)
    return out


def recalled(p: PassageEval, keep: np.ndarray) -> np.ndarray:
    """Per gold sentence of p: is >= COVER of its non-space characters inside kept sentences?"""
    if p.gold.shape[0] == 0:
        return np.zeros(0, bool)
    kept_ns = np.zeros(len(p.text) + 1, np.int64)
    for a, b in p.spans[keep].tolist():
        kept_ns[a + 1 : b + 1] = 1
    kept_ns[1:] *= np.diff(p.cum_nonspace)  # kept AND non-space, per character
    cum_kept = np.cumsum(kept_ns)
    a, b = p.gold[:, 0], p.gold[:, 1]
    total = p.cum_nonspace[b] - p.cum_nonspace[a]
    return (cum_kept[b] - cum_kept[a]) >= COVER * np.maximum(total, 1)


def evaluate(data: list[list[PassageEval]], keep_fn) -> dict:
    """keep_fn(list[PassageEval]) -> list of keep flags per passage, for one question."""
    from thresher.engine.result import pruned_text

    hits = golds = full = 0
    removed = []
    for passages in data:
        keeps = keep_fn(passages)
        total = kept_chars = 0
        q_hits = q_golds = 0
        for p, k in zip(passages, keeps):
            r = recalled(p, k)
            q_hits += int(r.sum())
            q_golds += r.size
            total += len(p.text)
            kept_chars += len(pruned_text(p.text, p.spans, k))
        hits, golds = hits + q_hits, golds + q_golds
        full += int(q_hits == q_golds)
        removed.append(0.0 if total == 0 else 1.0 - kept_chars / total)
    return {"recall": hits / max(golds, 1), "all_gold_recalled": full / max(len(data), 1),
            "removed": float(np.mean(removed))}


def by_threshold(t: float):
    from thresher.engine.reduce import keep_by_threshold

    return lambda passages: [keep_by_threshold(p.scores, t) for p in passages]


def by_ratio(ratio: float):
    from thresher.engine.reduce import keep_by_ratio

    def keep(passages):
        counts = [p.scores.shape[0] for p in passages]
        if not sum(counts):
            return [np.zeros(0, bool) for _ in passages]
        flat = np.concatenate([p.scores for p in passages])
        lengths = np.concatenate([p.spans[:, 1] - p.spans[:, 0] for p in passages])
        return np.split(keep_by_ratio(flat, lengths, ratio), np.cumsum(counts)[:-1])

    return keep


def lead(k: int):
    return lambda passages: [np.arange(p.scores.shape[0]) < k for p in passages]


def choose_threshold(curve: list[dict]) -> dict | None:
    ok = [c for c in curve if c["recall"] >= TARGET_RECALL]
    return max(ok, key=lambda c: (c["removed"], c["threshold"])) if ok else None


def ascii_plot(points: dict[str, list[tuple[float, float]]], width: int = 60, height: int = 18) -> str:
    """Recall (y) vs removed (x), both 0..1; one marker per series."""
    grid = [[" "] * (width + 1) for _ in range(height + 1)]
    markers = {}
    for (name, pts), mark in zip(points.items(), "o+x*#"):
        markers[name] = mark
        for x, y in pts:
            grid[height - round(y * height)][round(x * width)] = mark
    rows = [f"{1 - i / height:4.2f} |" + "".join(r) for i, r in enumerate(grid)]
    axis = "     +" + "-" * (width + 1)
    ticks = "      0" + " " * (width // 2 - 3) + "0.5" + " " * (width // 2 - 3) + "1.0"
    legend = "      x: fraction of characters removed; y: gold-sentence recall; " + ", ".join(
        f"{m} = {n}" for n, m in markers.items())
    return "\n".join([*rows, axis, ticks, legend])


def run(args) -> dict:
    import thresher
    from thresher.engine.onnx_backend import SessionConfig

    compressor = thresher.Compressor.load(
        args.model, session_config=SessionConfig(intra_op_threads=args.threads))
    records = load_records(limit=args.limit)
    data = score_records(compressor, records, args.batch_size)
    thresholds = [{"threshold": float(t), **evaluate(data, by_threshold(float(t)))} for t in THRESHOLDS]
    ratios = [{"keep_ratio": float(r), **evaluate(data, by_ratio(float(r)))} for r in KEEP_RATIOS]
    baselines = [{"baseline": f"first {k} sentence(s) of each paragraph", **evaluate(data, lead(k))}
                 for k in (1, 2)]
    chosen = choose_threshold(thresholds)
    ratio_ok = [r for r in ratios if r["recall"] >= TARGET_RECALL]
    return {
        "model": compressor.model, "model_threshold": compressor.threshold, "questions": len(records),
        "gold_sentences": int(sum(p.gold.shape[0] for ps in data for p in ps)),
        "cover": COVER, "target_recall": TARGET_RECALL, "target_removed": TARGET_REMOVED,
        "threshold_curve": thresholds, "keep_ratio_curve": ratios, "baselines": baselines,
        "chosen": chosen,
        "best_keep_ratio_at_target": max(ratio_ok, key=lambda r: r["removed"]) if ratio_ok else None,
    }


def markdown(res: dict, cmd: str) -> str:
    shown = {round(float(t), 2) for t in SHOWN_THRESHOLDS}
    chosen = res["chosen"]
    if chosen:
        shown.add(round(chosen["threshold"], 2))
    t_rows = [[c["threshold"] + 0.0, c["recall"], c["all_gold_recalled"], c["removed"]]
              for c in res["threshold_curve"] if round(c["threshold"], 2) in shown]
    r_rows = [[c["keep_ratio"], c["recall"], c["all_gold_recalled"], c["removed"]]
              for c in res["keep_ratio_curve"]]
    b_rows = [[c["baseline"], c["recall"], c["all_gold_recalled"], c["removed"]] for c in res["baselines"]]
    cols = ["recall", "all gold kept (share of questions)", "removed"]
    if chosen:
        met = chosen["removed"] >= TARGET_REMOVED
        verdict = (f"Chosen threshold: **{chosen['threshold']:.2f}** (the largest on a 0.01 grid with "
                   f"recall >= {TARGET_RECALL}): recall {chosen['recall']:.3f}, removes "
                   f"{100 * chosen['removed']:.1f}% of characters. Target (recall >= {TARGET_RECALL} while "
                   f"removing >= {100 * TARGET_REMOVED:.0f}%): {'met' if met else 'NOT met'}.")
    else:
        verdict = f"No threshold reaches recall {TARGET_RECALL}."
    best_r = res["best_keep_ratio_at_target"]
    if best_r:
        verdict += (f" Budget mode: keep_ratio {best_r['keep_ratio']:.2f} gives recall {best_r['recall']:.3f}"
                    f" and removes {100 * best_r['removed']:.1f}%.")
    plot = ascii_plot({
        "threshold": [(c["removed"], c["recall"]) for c in res["threshold_curve"]],
        "keep_ratio": [(c["removed"], c["recall"]) for c in res["keep_ratio_curve"]],
        "first-k baseline": [(c["removed"], c["recall"]) for c in res["baselines"]],
    })
    return "\n\n".join([
        f"`{cmd}`",
        f"{res['questions']} questions, {res['gold_sentences']} gold supporting sentences; model "
        f"{res['model']}; a gold sentence counts as recalled when >= {100 * res['cover']:.0f}% of its "
        "non-space characters are kept; removed = mean compression rate per question.",
        verdict,
        "Threshold mode:\n\n" + md_table(["threshold", *cols], t_rows),
        "Budget mode (`keep_ratio`, over all passages of a question):\n\n" + md_table(["keep_ratio", *cols], r_rows),
        "Position baselines:\n\n" + md_table(["baseline", *cols], b_rows),
        "```\n" + plot + "\n```",
    ])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="model name or directory (default: default)")
    ap.add_argument("--limit", type=int, default=None, help="first N dev questions (default: all)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    # Questions per engine call: only speed changes, scores are batch-invariant (per-token int8,
    # one packing group per request; tests/test_quality_smoke.py checks it against compress()).
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="the first 40 questions")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit = min(args.limit or 40, 40)
    cmd = command("quality.py", argv)
    res = run(args)
    res["command"] = cmd
    md = markdown(res, cmd)
    name = "quality" if args.model == "default" else f"quality-{Path(args.model).name}"
    js, mdp = write_results(name, res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
