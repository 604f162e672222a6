"""Quality in every retrieval setting at one operating point: single-passage and multi-passage sets.

On the validation fold of every dev set (the questions the shipped pruner never trained on) the
model compresses each question once; the figures are then computed offline from the returned
sentence and rerank scores with the engine's own selection rules (common_sets.judge):

- gold-sentence recall (HotpotQA distractor and fullwiki, 2WikiMultihopQA, ClapNQ), or the
  share of answerable questions whose pruned text still holds an answer string (SQuAD v1.1 and
  v2, NQ-open oracle);
- removed: mean fraction of characters removed per answerable question;
- emptied: share of unanswerable questions (SQuAD v2, ClapNQ) that come back empty;
- against the issue-#22 targets (TARGETS / EMPTIED below), at the model's default threshold and
  passage cut;
- the curves (quality vs removed) per set for the model (threshold swept with its relative and
  passage cuts; and keep ratio swept: a per-request budget), the compared models (threshold
  swept) and BM25 sentence selection (keep ratio swept), and each method's quality at equal
  removal.

`--choose` searches the (threshold, relative_threshold, passage_threshold) grid for the single
operating point that holds the quality target (recall / answer kept) on the most sets and, among
those, falls least short of the removal and emptied targets: how the shipped default was chosen.

    .venv/bin/python benchmarks/quality.py [--model default] [--compare minilm-cosine] [--quick]
    .venv/bin/python benchmarks/quality.py --choose
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command, md_table, write_results  # noqa: E402
from common_quality import by_ratio  # noqa: E402  (works on Scored: scores + spans)
from common_sets import SETS, SHORT, Scored, judge, load_set, quality_of, score  # noqa: E402

# (quality, removed) to reach per set, and the share of unanswerable questions to empty.
TARGETS = {"hotpotqa_distractor": (0.90, 0.60), "2wikimultihopqa": (0.90, 0.50), "clapnq": (0.90, 0.40),
           "squad_v1.1_dev": (0.95, 0.50), "squad_v2.0_dev": (0.95, 0.50), "nq_open_oracle": (0.95, 0.50)}
EMPTIED = {"squad_v2.0_dev": 0.50, "clapnq": 0.50}
THRESHOLDS = np.unique(np.round(np.concatenate([np.geomspace(0.002, 0.2, 41), np.arange(0.2, 0.96, 0.025)]), 4))
COSINE_THRESHOLDS = np.round(np.arange(-0.2, 0.81, 0.025), 3)
KEEP_RATIOS = np.round(np.arange(0.05, 0.96, 0.05), 2)
PASSAGE_THRESHOLDS = (None, 0.05, 0.1, 0.2, 0.3)
RELATIVE_THRESHOLDS = (0.0, 0.1, 0.15, 0.2, 0.225, 0.25, 0.3)
AT_REMOVED = (0.4, 0.5, 0.6, 0.7)
CASCADE_K = (4, 6)  # passages of 10 a BM25 first stage lets through


def by_threshold(t: float, cut: float | None, relative: float | None = None):
    """The engine's threshold mode with these cuts, by the engine's own pipeline.select."""
    from thresher.engine.pipeline import select
    from thresher.engine.request import Options, Request
    from thresher.engine.scorer import Scores

    request = Request("", (), Options(threshold=t, relative_threshold=relative, passage_threshold=cut))

    def keep(passages: list[Scored]):
        rerank = None if any(p.rerank is None for p in passages) else np.array([p.rerank for p in passages])
        return select(request, tuple(p.spans for p in passages), Scores(tuple(p.scores for p in passages), rerank),
                      scorer=None)
    return keep


def bm25(questions, scored: list[list[Scored]]) -> list[list[Scored]]:
    """The same sentences scored by BM25 against the question (one index per question)."""
    import bm25s

    out = []
    for q, passages in zip(questions, scored):
        texts = [p.text[a:b] for p in passages for a, b in p.spans.tolist()]
        tok = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
        index = bm25s.BM25()
        index.index(tok, show_progress=False)
        qt = bm25s.tokenize([q.question], stopwords="en", return_ids=False, show_progress=False)[0]
        flat = index.get_scores(qt).astype(np.float64) if qt else np.zeros(len(texts))
        parts = np.split(flat, np.cumsum([p.spans.shape[0] for p in passages])[:-1])
        out.append([Scored(p.text, p.spans, s, None, p.cum_nonspace) for p, s in zip(passages, parts)])
    return out


def bm25_passages(question, k: int) -> set[int]:
    """Indices of the question's k passages (title + text) that BM25 ranks first."""
    import bm25s

    texts = [f"{p['title'] or ''} {p['text']}" for p in question.passages]
    tok = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
    index = bm25s.BM25()
    index.index(tok, show_progress=False)
    q = bm25s.tokenize([question.question], stopwords="en", return_ids=False, show_progress=False)[0]
    scores = index.get_scores(q) if q else np.zeros(len(texts))
    return set(np.argsort(-scores, kind="stable")[:k].tolist())


def cascade(questions, scored, rule, k: int) -> dict:
    """A BM25 first stage: only the top-k passages reach the model (the rest keep nothing), then
    `rule`: what a cheap cascade would cost in quality (issue #24)."""
    tops = iter([bm25_passages(q, k) for q in questions])

    def keep(passages):
        top = next(tops)
        return [flags & (i in top) for i, flags in enumerate(rule(passages))]
    return judge(questions, scored, keep)


def curve(questions, scored, rules) -> list[dict]:
    return [{"param": param, **judge(questions, scored, rule)} for param, rule in rules]


def at_removed(points: list[dict], removed: float) -> float | None:
    """Quality of a curve interpolated at a removal; None outside the curve's range."""
    pts = sorted((c["removed"], quality_of(c)) for c in points)
    xs = [x for x, _ in pts]
    if not xs or removed < xs[0] - 1e-9 or removed > xs[-1] + 1e-9:
        return None
    return float(np.interp(removed, xs, [y for _, y in pts]))


def verdict(name: str, figures: dict) -> dict:
    """Which targets a set's figures meet."""
    out = {}
    if name in TARGETS:
        q, r = TARGETS[name]
        out["quality"] = quality_of(figures) >= q
        out["removed"] = figures["removed"] >= r
    if name in EMPTIED:
        out["emptied"] = figures.get("emptied", 0.0) >= EMPTIED[name]
    return out


def targets_met(name: str, figures: dict) -> int:
    """A set's (quality, removed) target counts once, met only as a pair; emptied counts apart."""
    v = verdict(name, figures)
    return int(v.get("quality", False) and v.get("removed", False)) + int(v.get("emptied", False))


def slack(name: str, figures: dict) -> float:
    """How far a set's removal (and emptied share) fall short of their targets (<= 0)."""
    s = min(figures["removed"] - TARGETS[name][1], 0.0) if name in TARGETS else 0.0
    if name in EMPTIED:
        s += min(figures.get("emptied", 0.0) - EMPTIED[name], 0.0)
    return s


def quality_held(name: str, figures: dict) -> bool:
    return name not in TARGETS or quality_of(figures) >= TARGETS[name][0]


def choose(data: dict) -> list[dict]:
    """Every (threshold, relative_threshold, passage_threshold) on the grid with the targets it
    meets, best first."""
    rows = []
    for cut in PASSAGE_THRESHOLDS:
        for rel in RELATIVE_THRESHOLDS:
            for t in THRESHOLDS[THRESHOLDS <= 0.3]:
                figs = {name: judge(qs, sc, by_threshold(float(t), cut, rel)) for name, (qs, sc) in data.items()
                        if name in TARGETS}
                met = sum(targets_met(n, f) for n, f in figs.items())
                rows.append({"threshold": float(t), "relative_threshold": rel, "passage_threshold": cut,
                             "targets_met": met, "quality_held": sum(quality_held(n, f) for n, f in figs.items()),
                             "slack": sum(slack(n, f) for n, f in figs.items()), "figures": figs})
    # Quality first (the sets whose recall / answer-kept target holds), then the least shortfall
    # of removal and emptied unanswerable questions: recall is what a pruner must not lose.
    return sorted(rows, key=lambda r: (-r["quality_held"], -r["slack"], -r["targets_met"]))


def run(args) -> dict:
    import thresher
    from thresher.engine.runner import SessionConfig

    def load(name):
        return thresher.Compressor.load(name, session_config=SessionConfig(intra_op_threads=args.threads))

    main = load(args.model)
    cut, rel = main.passage_threshold, main.relative_threshold
    data = {}
    for name in args.sets:
        qs = load_set(name, args.fold, args.limit)
        data[name] = (qs, score(main, qs, args.batch_size))
    res = {"model": main.model, "threshold": main.threshold, "relative_threshold": rel, "passage_threshold": cut,
           "fold": args.fold,
           "targets": TARGETS, "emptied_targets": EMPTIED, "sets": {}}
    others = {name: load(name) for name in args.compare}
    for name, (qs, sc) in data.items():
        figs = judge(qs, sc, by_threshold(main.threshold, cut, rel))
        methods = {main.model: curve(qs, sc, [(float(t), by_threshold(float(t), cut, rel)) for t in THRESHOLDS]),
                   f"{main.model} (keep_ratio)": curve(qs, sc, [(float(r), by_ratio(float(r))) for r in KEEP_RATIOS])}
        for other in others.values():
            osc = score(other, qs, args.batch_size)
            grid = COSINE_THRESHOLDS if other.kind == "embed-sim" else THRESHOLDS
            methods[other.model] = curve(qs, osc, [(float(t), by_threshold(float(t), None)) for t in grid])
        if not args.no_bm25:
            methods["bm25 (keep_ratio)"] = curve(qs, bm25(qs, sc), [(float(r), by_ratio(float(r))) for r in KEEP_RATIOS])
        if not args.no_bm25 and len(qs[0].passages) >= 10:  # multi-passage sets: a BM25 first stage
            res["sets"][name] = {"cascade": {str(k): cascade(qs, sc, by_threshold(main.threshold, cut, rel), k)
                                             for k in CASCADE_K}}
        res["sets"].setdefault(name, {}).update({"figures": figs, "met": verdict(name, figs), "curves": methods,
                             "at_removed": {m: {str(r): at_removed(c, r) for r in AT_REMOVED} for m, c in methods.items()}})
    if args.choose:
        ranked = choose(data)
        res["choice"] = [{k: v for k, v in r.items()} for r in ranked[:10]]
    return res


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def markdown(res: dict, cmd: str) -> str:
    rows = []
    for name, s in res["sets"].items():
        f, met = s["figures"], s["met"]
        target = TARGETS.get(name)
        metric = "recall" if "recall" in f else "answer kept"
        goal = "" if target is None else f">= {target[0]:.2f} at >= {100 * target[1]:.0f}%"
        if name in EMPTIED:
            goal += f"; emptied >= {100 * EMPTIED[name]:.0f}%"
        rows.append([SHORT[name], f["questions"], metric, quality_of(f), f"{100 * f['removed']:.1f}%",
                     "-" if "emptied" not in f else f"{100 * f['emptied']:.1f}% of {f['unanswerable']}",
                     goal or "(none)", "-" if not met else ("met" if all(met.values()) else
                                                            "NOT met: " + ", ".join(k for k, v in met.items() if not v))])
    cut = res["passage_threshold"]
    out = [f"`{cmd}`",
           f"Model {res['model']} at its default operating point: threshold {res['threshold']:g}, relative "
           f"threshold {res['relative_threshold'] or 0:g}, passage threshold {'none' if cut is None else f'{cut:g}'}; "
           f"{res['fold']} fold of every set.",
           md_table(["set", "questions", "metric", "value", "removed", "unanswerable emptied", "target", "verdict"], rows)]
    methods = list(next(iter(res["sets"].values()))["at_removed"])
    eq_rows = [[SHORT[name]] + [" / ".join(_fmt(s["at_removed"][m][str(r)]) for r in AT_REMOVED) for m in methods]
               for name, s in res["sets"].items()]
    out.append("Quality (recall or answer kept) at equal removal of "
               + " / ".join(f"{100 * r:.0f}%" for r in AT_REMOVED)
               + " of characters, each curve interpolated (- : the method never removes that much or that little):\n\n"
               + md_table(["set", *methods], eq_rows))
    casc = [[SHORT[name]] + [f"{quality_of(s['cascade'][str(k)]):.3f} / {100 * s['cascade'][str(k)]['removed']:.1f}%"
                             for k in CASCADE_K] for name, s in res["sets"].items() if "cascade" in s]
    if casc:
        out.append("A BM25 first stage (only its top k passages reach the model; the default point after):\n\n"
                   + md_table(["set", *[f"top {k}: quality / removed" for k in CASCADE_K]], casc))
    if "choice" in res:
        c_rows = [[c["threshold"], c["relative_threshold"], "none" if c["passage_threshold"] is None else c["passage_threshold"],
                   c["quality_held"], c["targets_met"], round(c["slack"], 3),
                   "; ".join(f"{SHORT[n]} {quality_of(f):.2f}/{100 * f['removed']:.0f}%"
                             + (f"/e{100 * f['emptied']:.0f}%" if "emptied" in f else "")
                             for n, f in c["figures"].items())] for c in res["choice"]]
        n_targets = len(TARGETS) + len(EMPTIED)
        out.append(f"Best operating points on the grid (sets whose quality target holds; targets met of "
                   f"{n_targets}; shortfall of removal and emptied):\n\n"
                   + md_table(["threshold", "relative", "passage threshold", "quality held", "met", "shortfall",
                               "quality/removed/emptied per set"], c_rows))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="model name or directory (default: default)")
    ap.add_argument("--compare", action="append", default=None, metavar="MODEL",
                    help="also sweep MODEL on the same questions (default: minilm-cosine; repeatable)")
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--fold", choices=["validation", "dev"], default="validation",
                    help="validation: the pruner's held-back fold; dev: every dev question")
    ap.add_argument("--limit", type=int, default=None, help="first N questions per set")
    ap.add_argument("--quick", action="store_true", help="first 60 questions per set")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("THRESHER_THREADS") or 2))
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--no-bm25", action="store_true", help="skip the BM25 curves")
    ap.add_argument("--choose", action="store_true", help="search the operating-point grid")
    args = ap.parse_args(argv)
    if args.compare is None:
        args.compare = ["minilm-cosine"]
    if args.quick:
        args.limit = min(args.limit or 60, 60)
    cmd = command("quality.py", argv)
    res = run(args)
    res["command"] = cmd
    md = markdown(res, cmd)
    name = "quality-sets" if args.model == "default" else f"quality-sets-{Path(args.model).name}"
    js, mdp = write_results(name, res, md)
    print(md)
    print(f"\nwrote {js} and {mdp}")
    return res


if __name__ == "__main__":
    main()
