"""`thresher budget train | eval | compress`: the SAGE retrieval budget from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_PER_SOURCE = 270  # the shipped policy's sweep (benchmarks/RESULTS.md, "SAGE retrieval budget")
DEFAULT_SLO_MS = 80.0  # ~p50 of k=10 on a quiet 2-core CPU (benchmarks/RESULTS.md); retrain per machine


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _setup(args):
    import thresher
    from thresher.budget.corpus import build
    from thresher.budget.retriever import HybridRetriever
    from thresher.datadir import data_dir

    compressor = thresher.Compressor.load(args.model)
    passages, questions = build(data_dir(args.data, "thresher budget --data"))
    return compressor, HybridRetriever.build(passages, compressor), questions


def _sweep_cache(args) -> Path:
    if args.sweep_cache:
        return Path(args.sweep_cache)
    from thresher.cache import cache_home

    return cache_home() / "budget" / "sweep.jsonl"


def _rows(args):
    from thresher.budget.corpus import select_questions
    from thresher.budget.oracle import K, sweep, sweep_setup

    args.ks = args.ks or K  # _eval reads it afterwards
    compressor, retriever, questions = _setup(args)
    chosen = select_questions(questions, args.per_source)
    return sweep(chosen, retriever, compressor, cache=_sweep_cache(args), ks=args.ks,
                 setup=sweep_setup(retriever, compressor), progress=args.verbose)


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(k) for k in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ks must be comma-separated ints, got {text!r}") from None
    if not ks or min(ks) < 1 or list(ks) != sorted(set(ks)):
        raise argparse.ArgumentTypeError(f"--ks must be increasing ints >= 1, got {text!r}")
    return ks


def _train(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from thresher.budget.policy import train_from_sweep

    report = train_from_sweep(_rows(args), args.slo_ms, args.out, config=args.config)
    _say(json.dumps({"policy": str(args.out), **asdict(report)}, indent=2))
    return 0


def _eval(args: argparse.Namespace) -> int:
    import tempfile

    from thresher.budget.evaluate import STATIC_KS, load_free
    from thresher.budget.policy import BudgetPolicy, train_from_sweep

    policy = BudgetPolicy.load(args.policy)
    swept = _rows(args)
    rows = [r for r in swept if r.split == "test"]
    if not rows:
        raise ValueError("the sweep has no test-split questions: raise --per-source")
    slo = policy.slo_ms if args.slo_ms is None else args.slo_ms
    others = {}
    with tempfile.TemporaryDirectory(prefix="thresher-sage-") as folder:
        if args.config == "paper":  # trained here on the sweep's train/val rows, beside --policy
            train_from_sweep(swept, slo, folder, config="paper")
            others["SAGE (paper config)"] = BudgetPolicy.load(folder)
        table = load_free(rows, policy, args.slo_ms, tuple(k for k in STATIC_KS if k in args.ks) or args.ks, others)
    _say(f"{len(rows)} test questions, SLO {slo:.0f} ms (load-free, one query at a time)")
    _say(f"{'strategy':<16} {'compliance':>10} {'quality':>8} {'mean k':>7} {'p95 ms':>8}")
    for r in table:
        _say(f"{r['strategy']:<16} {r['compliance']:>10.1%} {r['quality']:>8.3f} {r['mean_k']:>7.1f} "
              f"{r['p95_ms']:>8.1f}")
    return 0


def _compress(args: argparse.Namespace) -> int:
    from thresher.budget.api import BudgetedCompressor
    from thresher.budget.policy import BudgetPolicy

    compressor, retriever, _ = _setup(args)
    bc = BudgetedCompressor(compressor, retriever, BudgetPolicy.load(args.policy))
    out = bc.compress(args.question, k=args.k)
    if args.output == "json":
        _say(json.dumps({"k": out.k, "passage_ids": list(out.passage_ids), "timings_ms": out.timings_ms,
                          "result": out.result.to_dict()}, ensure_ascii=False))
        return 0
    _say(f"k = {out.k} ({'given' if args.k else 'chosen by the policy'}); "
          + ", ".join(f"{k} {v:.1f} ms" for k, v in out.timings_ms.items()))
    for p in out.result.passages:
        if p.pruned_text:
            _say(f"\n[{p.index}] {p.title or ''}\n  {p.pruned_text}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("budget", help="SAGE per-question retrieval budget: train | eval | compress")
    sub = parser.add_subparsers(dest="budget_command", required=True)

    def common(p):
        p.add_argument("--data", help="data folder holding <set>/dev.jsonl (default: $THRESHER_DATA)")
        p.add_argument("-m", "--model", default="minilm-cosine", help="embed-sim model for retrieval and compression")

    def sweep_args(p):
        p.add_argument("--per-source", type=int, default=DEFAULT_PER_SOURCE,
                       help="questions per source (HotpotQA, NQ, SQuAD) in the oracle sweep")
        p.add_argument("--sweep-cache", help="JSONL of sweep rows (default: $THRESHER_HOME/budget/sweep.jsonl)")
        p.add_argument("--ks", type=_ks, help="budgets to sweep, comma-separated (default: the oracle's grid, "
                       "thresher.budget.oracle.K; imported when needed, it brings numpy)")

    p = sub.add_parser("train", help="oracle sweep (cached) + RandomForest + temperature -> policy folder")
    common(p)
    sweep_args(p)
    p.add_argument("--slo-ms", type=float, default=DEFAULT_SLO_MS, help="end-to-end latency target")
    p.add_argument("--out", required=True, help="policy folder to write (policy.onnx + policy.json)")
    p.add_argument("--config", choices=("thresher", "paper"), default="thresher",
                   help="thresher: 64 trees x depth 6, quantile decision, smallest-k fallback (default); "
                        "paper: SAGE's 100 x 10, argmax, least-violating fallback")
    p.set_defaults(func=_train)

    p = sub.add_parser("eval", help="load-free SLO compliance / quality / mean k on the test split")
    common(p)
    sweep_args(p)
    p.add_argument("--policy", help="policy folder (default: the shipped one)")
    p.add_argument("--slo-ms", type=float, help="latency target (default: the policy's)")
    p.add_argument("--config", choices=("thresher", "paper"), default="thresher",
                   help="paper: also train SAGE's paper configuration on the sweep and report it beside the policy")
    p.set_defaults(func=_eval)

    p = sub.add_parser("compress", help="retrieve with a per-question budget, then compress")
    common(p)
    p.add_argument("-q", "--question", required=True, help="the question to retrieve and compress for")
    p.add_argument("--k", type=int, help="fixed budget instead of the policy's choice")
    p.add_argument("--policy", help="policy folder (default: the shipped one)")
    p.add_argument("-o", "--output", choices=["json", "text"], default="text",
                   help="text: k, timings and the kept passages; json: the full result")
    p.set_defaults(func=_compress)
