"""One multi-hop set in detail: gold-sentence recall vs compression over thresholds and keep ratios.

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
paragraph). The default threshold is chosen as the largest threshold on the grid whose
recall is >= TARGET_RECALL (i.e. the most removal at that recall).

`--fold validation` evaluates on the validation fold of the trained pruner's split
(thresher.training.data.fold_of; the fold it never trained on) and adds: other models on the same
questions (`--compare`), BM25 sentence selection, recall of every method at the main model's
removal, the ranking head's MRR of gold paragraphs, ClapNQ precision/recall against the human
sentences and SQuAD v2's unanswerable questions pruned to nothing.

    .venv/bin/python benchmarks/quality_sweep.py [--limit N] [--quick]
    .venv/bin/python benchmarks/quality_sweep.py --model minilm-pruner --fold validation \
        --target-recall 0.90 --target-removed 0.60 --compare default
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, load_records, md_table, write_results  # noqa: E402
from common_quality import (  # noqa: E402
    COVER,
    PassageEval,
    by_ratio,
    by_threshold,
    clapnq_quality,
    evaluate,
    in_fold,
    lead,
    passage_eval,
    score_records,
    squad_v2_quality,
)

MULTIHOP_SETS = ("hotpotqa_distractor", "2wikimultihopqa")  # HotpotQA's record layout
TARGET_RECALL = 0.85
TARGET_REMOVED = 0.50
# A 0.01 grid, plus a geometric one below 0.1 where a trained pruner's keep probabilities sit
# (most sentences of a 10-paragraph HotpotQA question are irrelevant, so most score < 0.05); 2.3%
# steps there, because one gold sentence is 0.8 points of recall on the 51 validation questions.
THRESHOLDS = np.unique(np.concatenate([np.round(np.arange(-0.10, 0.801, 0.01), 2),
                                       np.round(np.geomspace(0.001, 0.1, 201), 5)])) + 0.0  # no "-0.00"
KEEP_RATIOS = np.round(np.arange(0.10, 0.951, 0.05), 2)
SHOWN_THRESHOLDS = np.round(np.concatenate([[0.002, 0.005, 0.01, 0.02, 0.0316], np.arange(0.0, 0.701, 0.05)]), 4)


def choose_threshold(curve: list[dict], target: float = TARGET_RECALL) -> dict | None:
    ok = [c for c in curve if c["recall"] >= target]
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


def curves(data: list[list[PassageEval]], target_recall: float) -> dict:
    thresholds = [{"threshold": float(t), **evaluate(data, by_threshold(float(t)))} for t in THRESHOLDS]
    ratios = [{"keep_ratio": float(r), **evaluate(data, by_ratio(float(r)))} for r in KEEP_RATIOS]
    ratio_ok = [r for r in ratios if r["recall"] >= target_recall]
    return {"threshold_curve": thresholds, "keep_ratio_curve": ratios,
            "chosen": choose_threshold(thresholds, target_recall),
            "best_keep_ratio_at_target": max(ratio_ok, key=lambda r: r["removed"]) if ratio_ok else None}


def recall_at(curve: list[dict], removed: float) -> float:
    """Recall of a curve linearly interpolated at a given removal."""
    pts = sorted((c["removed"], c["recall"]) for c in curve)
    return float(np.interp(removed, [x for x, _ in pts], [y for _, y in pts]))


def bm25_data(records: list[dict], data: list[list[PassageEval]]) -> list[list[PassageEval]]:
    """The same sentences scored by BM25 against the question (an index per question's sentences)."""
    import bm25s

    out = []
    for rec, passages in zip(records, data):
        texts = [p.text[a:b] for p in passages for a, b in p.spans.tolist()]
        tok = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
        index = bm25s.BM25()
        index.index(tok, show_progress=False)
        q = bm25s.tokenize([rec["question"]], stopwords="en", return_ids=False, show_progress=False)[0]
        flat = index.get_scores(q).astype(np.float32) if q else np.zeros(len(texts), np.float32)
        parts = np.split(flat, np.cumsum([p.spans.shape[0] for p in passages])[:-1])
        out.append([passage_eval(p.text, p.spans, s, p.gold) for p, s in zip(passages, parts)])
    return out


def rerank_quality(data: list[list[PassageEval]]) -> dict:
    """MRR of the first gold paragraph and the share of questions with both gold paragraphs in
    the top 2, ranking by rerank score (or the best sentence score where a model has none)."""
    rr, both, source = [], [], "rerank score"
    for passages in data:
        if passages[0].rerank is None:
            source = "best sentence score (no rerank head)"
        key = np.array([p.rerank if p.rerank is not None else (p.scores.max() if p.scores.size else -np.inf)
                        for p in passages])
        gold = np.array([p.gold.shape[0] > 0 for p in passages])
        if not gold.any():
            continue
        order = np.argsort(-key, kind="stable")
        rr.append(1.0 / (1 + int(np.argmax(gold[order]))))
        both.append(bool(gold[order][:2].all()) if gold.sum() >= 2 else bool(gold[order][0]))
    return {"mrr": float(np.mean(rr)), "both_gold_in_top2": float(np.mean(both)), "ranked_by": source,
            "questions": len(rr)}


def run(args) -> dict:
    import thresher
    from thresher.engine.runner import SessionConfig

    def load(name):
        return thresher.Compressor.load(name, session_config=SessionConfig(intra_op_threads=args.threads))

    compressor = load(args.model)
    records = [r for r in load_records(args.dataset, limit=args.limit) if in_fold(r["id"], args.fold)]
    data = score_records(compressor, records, args.batch_size)
    main = curves(data, args.target_recall)
    res = {
        "model": compressor.model, "model_threshold": compressor.threshold, "dataset": args.dataset,
        "fold": args.fold,
        "questions": len(records), "gold_sentences": int(sum(p.gold.shape[0] for ps in data for p in ps)),
        "cover": COVER, "target_recall": args.target_recall, "target_removed": args.target_removed, **main,
        "baselines": [{"baseline": f"first {k} sentence(s) of each paragraph", **evaluate(data, lead(k))}
                      for k in (1, 2)],
    }
    if args.fold == "dev" and not args.compare:
        return res
    at = main["chosen"]["removed"] if main["chosen"] else args.target_removed
    bm25 = curves(bm25_data(records, data), args.target_recall)
    others = {"bm25 sentences (keep_ratio)": {"recall_at_removed": recall_at(bm25["keep_ratio_curve"], at),
                                              "keep_ratio_curve": bm25["keep_ratio_curve"]}}
    models = {args.model: (compressor, data, main)}
    for name in args.compare:
        c = load(name)
        d = score_records(c, records, args.batch_size)
        cv = curves(d, args.target_recall)
        models[name] = (c, d, cv)
        others[name] = {"model": c.model, "recall_at_removed": recall_at(cv["threshold_curve"], at),
                        "chosen": cv["chosen"], "threshold_curve": cv["threshold_curve"],
                        "keep_ratio_curve": cv["keep_ratio_curve"]}
    res.update(compare_at_removed=at, compared=others, per_model={})
    for name, (c, d, cv) in models.items():
        t = cv["chosen"]["threshold"] if cv["chosen"] else c.threshold
        res["per_model"][name] = {
            "model": c.model, "operating_threshold": t, "rerank": rerank_quality(d),
            "clapnq": clapnq_quality(c, t, args.fold, args.batch_size, args.limit),
            "squad_v2": squad_v2_quality(c, t, args.fold, args.batch_size, args.limit),
        }
    return res


def markdown(res: dict, cmd: str) -> str:
    shown = {round(float(t), 4) for t in SHOWN_THRESHOLDS}
    chosen = res["chosen"]
    if chosen:
        shown.add(round(chosen["threshold"], 4))
    t_rows = [[f"{c['threshold'] + 0.0:g}", c["recall"], c["all_gold_recalled"], c["removed"]]
              for c in res["threshold_curve"] if round(c["threshold"], 4) in shown]
    r_rows = [[c["keep_ratio"], c["recall"], c["all_gold_recalled"], c["removed"]]
              for c in res["keep_ratio_curve"]]
    b_rows = [[c["baseline"], c["recall"], c["all_gold_recalled"], c["removed"]] for c in res["baselines"]]
    cols = ["recall", "all gold kept (share of questions)", "removed"]
    target_recall, target_removed = res["target_recall"], res["target_removed"]
    if chosen:
        met = chosen["removed"] >= target_removed
        verdict = (f"Chosen threshold: **{chosen['threshold']:g}** (the largest on the grid with "
                   f"recall >= {target_recall}): recall {chosen['recall']:.3f}, removes "
                   f"{100 * chosen['removed']:.1f}% of characters. Target (recall >= {target_recall} while "
                   f"removing >= {100 * target_removed:.0f}%): {'met' if met else 'NOT met'}.")
    else:
        verdict = f"No threshold reaches recall {target_recall}."
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
        f"{res['dataset']}: {res['questions']} questions ({res['fold']} fold), {res['gold_sentences']} gold supporting sentences; model "
        f"{res['model']}; a gold sentence counts as recalled when >= {100 * res['cover']:.0f}% of its "
        "non-space characters are kept; removed = mean compression rate per question.",
        verdict,
        "Threshold mode:\n\n" + md_table(["threshold", *cols], t_rows),
        "Budget mode (`keep_ratio`, over all passages of a question):\n\n" + md_table(["keep_ratio", *cols], r_rows),
        "Position baselines:\n\n" + md_table(["baseline", *cols], b_rows),
        "```\n" + plot + "\n```",
        *comparison_markdown(res),
    ])


def comparison_markdown(res: dict) -> list[str]:
    if "per_model" not in res:
        return []
    at = res["compare_at_removed"]
    main_recall = res["chosen"]["recall"] if res["chosen"] else recall_at(res["threshold_curve"], at)
    rows = [[res["model"] + " (threshold)", main_recall, 0.0]]
    for name, o in res["compared"].items():
        rows.append([o.get("model", name) + (" (threshold)" if "threshold_curve" in o else ""),
                     o["recall_at_removed"], o["recall_at_removed"] - main_recall])
    out = [f"Recall at equal removal ({100 * at:.1f}% of characters, the operating point above; "
           "curves interpolated):\n\n" + md_table(["method", "recall", "vs this model"], rows)]
    pm = [[m["model"], m["operating_threshold"], m["rerank"]["mrr"], m["rerank"]["both_gold_in_top2"],
           m["clapnq"]["recall"], m["clapnq"]["precision"], m["clapnq"]["unanswerable_pruned_to_nothing"],
           m["squad_v2"]["unanswerable_pruned_to_nothing"], m["squad_v2"]["answer_kept"]]
          for m in res["per_model"].values()]
    m0 = next(iter(res["per_model"].values()))
    out.append(
        "Each model at its operating threshold (chosen as above on these questions, else its "
        "default). MRR: the question's paragraphs ranked by the rerank score, or by the best sentence score "
        f"for a model without a rerank head (embed-sim); ClapNQ ({m0['clapnq']['questions']} questions, {m0['clapnq']['unanswerable']} "
        f"unanswerable); SQuAD v2 ({m0['squad_v2']['questions']} questions, "
        f"{m0['squad_v2']['unanswerable']} unanswerable):\n\n" + md_table(
            ["model", "threshold", "MRR gold paragraph", "both gold in top 2", "ClapNQ recall",
             "ClapNQ precision", "ClapNQ unanswerable -> nothing", "SQuAD v2 unanswerable -> nothing",
             "SQuAD v2 answer kept"], pm))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="model name or directory (default: default)")
    ap.add_argument("--limit", type=int, default=None, help="first N dev questions (default: all)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    # Questions per engine call: only speed changes, scores are batch-invariant (per-token int8,
    # one packing group per request; tests/test_quality_smoke.py checks it against compress()).
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="the first 40 questions")
    ap.add_argument("--fold", choices=["dev", "validation"], default="dev",
                    help="dev: every dev question; validation: the trained pruner's held-back fold")
    ap.add_argument("--dataset", choices=MULTIHOP_SETS, default=MULTIHOP_SETS[0],
                    help="multi-hop set with gold supporting sentences (same record layout)")
    ap.add_argument("--target-recall", type=float, default=TARGET_RECALL)
    ap.add_argument("--target-removed", type=float, default=TARGET_REMOVED)
    ap.add_argument("--compare", action="append", default=[], metavar="MODEL",
                    help="also evaluate MODEL on the same questions (repeatable)")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit = min(args.limit or 40, 40)
    cmd = command("quality_sweep.py", argv)
    res = run(args)
    res["command"] = cmd
    md = markdown(res, cmd)
    name = "quality" if args.model == "default" else f"quality-{Path(args.model).name}"
    if args.fold == "dev" and args.model in ("default", "minilm-pruner"):
        print("note: the trained pruner learned from 3/4 of these questions; --fold validation "
              "gives the honest figures", file=sys.stderr)
    if args.fold != "dev":
        name += f"-{args.fold}"
    if args.dataset != MULTIHOP_SETS[0]:
        name += f"-{args.dataset}"
    js, mdp = write_results(name, res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
