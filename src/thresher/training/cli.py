"""`thresher train`: train the MiniLM pruner from a data folder (--data-dir or $THRESHER_DATA) and export it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _caps(values: list[str]) -> dict[str, int]:
    out = {}
    for v in values:
        source, _, n = v.partition("=")
        if not n.isdigit():
            raise argparse.ArgumentTypeError(f"--max-questions takes SOURCE=N, got {v!r}")
        out[source] = int(n)
    return out


def register(sub: argparse._SubParsersAction) -> None:
    from thresher.training.config import TrainConfig
    from thresher.training.data import SOURCES

    d = TrainConfig(data_dir="")
    p = sub.add_parser("train", help="train the MiniLM pruner (Provence heads, LoRA) from a data folder",
                       description=__doc__)
    p.add_argument("--data-dir", help="folder holding <set>/dev.jsonl (default: $THRESHER_DATA; in the "
                                      "project's checkout: ../shared/data)")
    p.add_argument("--out", required=True, help="run folder: delta.safetensors + train.json are written here")
    p.add_argument("--epochs", type=int, default=d.epochs, help="passes over the training examples")
    p.add_argument("--rank", type=int, default=d.rank, help="LoRA rank")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (AdamW, linear warm-up)")
    p.add_argument("--batch-tokens", type=int, default=d.batch_tokens, help="padded tokens per step")
    p.add_argument("--rank-weight", type=float, default=d.rank_weight, help="weight of the ranking loss")
    p.add_argument("--layers", type=int, default=None,
                   help="keep only the base's first N transformer layers (fewer = faster, see README)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed for initialisation and shuffling")
    p.add_argument("--max-questions", nargs="*", default=[], metavar="SOURCE=N",
                   help=f"cap questions per source ({', '.join(SOURCES)})")
    p.add_argument("--export", metavar="DIR", help="also export the trained model (int8) into DIR")
    p.add_argument("--threshold", type=float, default=0.5, help="keep threshold written with --export")
    p.set_defaults(func=run)


def run(args) -> int:
    from thresher.datadir import data_dir
    from thresher.training.train import TrainConfig, train

    config = TrainConfig(data_dir=str(data_dir(args.data_dir, "thresher train --data-dir")), epochs=args.epochs, rank=args.rank, lr=args.lr,
                         batch_tokens=args.batch_tokens, rank_weight=args.rank_weight, seed=args.seed,
                         layers=args.layers,
                         max_questions=_caps(args.max_questions))
    record = train(config, args.out, progress=lambda m: sys.stderr.write(m + "\n"))
    sys.stdout.write(json.dumps({k: record[k] for k in ("examples", "history", "train_seconds")}, indent=2) + "\n")
    if args.export:
        from thresher.export.bert_pruner import export_bert_pruner, load_trained_pruner

        net, bert_config, tokenizer, _ = load_trained_pruner(args.out)
        export_bert_pruner(net, bert_config, tokenizer, args.export, threshold=args.threshold,
                           name=f"minilm-pruner-{Path(args.out).name}")
        sys.stdout.write(f"exported to {args.export}\n")
    return 0
