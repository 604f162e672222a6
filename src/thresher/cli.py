"""`thresher` command line: compress | export | bench (+ subcommands registered by subpackages).

Each subcommand module offers `register(subparsers)` that adds its parser and sets
`func(args) -> int`; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

# Subcommand modules beyond compress/export/bench, each with register(subparsers).
# register() must not import torch, fastapi or the like: `thresher --help` builds every parser.
SUBCOMMAND_MODULES: tuple[str, ...] = ("thresher.chunking.cli", "thresher.server.cli", "thresher.budget.cli",
                                       "thresher.training.cli", "thresher.batch.cli", "thresher.cache_cli")


def _read_text(path: str) -> str:
    raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = "stdin" if path == "-" else path
        raise ValueError(f"{where} is not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None


def read_passages(path: str, fmt: str) -> list:
    """Passages from a JSON list, JSONL (one string or {"title","text"} per line) or plain text
    (passages separated by blank lines)."""
    text = _read_text(path)
    if fmt == "auto":
        suffix = Path(path).suffix.lower() if path != "-" else ""
        stripped = text.lstrip()
        fmt = {".json": "json", ".jsonl": "jsonl", ".txt": "text"}.get(suffix) or (
            "json" if stripped.startswith("[") else "jsonl" if stripped.startswith(("{", '"')) else "text"
        )
    where = "stdin" if path == "-" else path
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where} is not valid JSON: {e}") from None
        if isinstance(data, dict) and "passages" in data:
            data = data["passages"]
        if not isinstance(data, list):
            raise ValueError(f"{where}: expected a JSON list of passages, got {type(data).__name__}")
        return data
    if fmt == "jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{where} line {n} is not valid JSON: {e}") from None
        return out
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _print_readable(result) -> None:
    print(f"question: {result.question}")
    for p in result.passages:
        head = f"[{p.index}]" + (f" {p.title}" if p.title else "")
        score = "" if p.rerank_score is None else f"  rerank={p.rerank_score:.3f}"
        print(f"\n{head}{score}")
        for i, s in enumerate(p.sentences):
            mark = "+" if s.kept else "-"
            print(f"  {mark} {s.score:6.3f}  {p.sentence_text(i)}")
    t = result.timings_ms
    print(f"\ncompression rate: {result.compression_rate:.1%} of characters removed; "
          f"{t.get('total', 0.0):.1f} ms ({', '.join(f'{k} {v:.1f}' for k, v in t.items() if k != 'total')})")


def _compress(args: argparse.Namespace) -> int:
    from thresher import Compressor

    passages = read_passages(args.passages, args.format)
    c = Compressor.load(args.model)
    result = c.compress(args.question, passages, threshold=args.threshold, keep_ratio=args.keep_ratio,
                        relative_threshold=args.relative_threshold, passage_threshold=args.passage_threshold,
                        top_k=args.top_k, reorder=args.reorder)
    if args.output == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    elif args.output == "context":
        print("\n\n".join(text for text in result.pruned_passages if text.strip()))
    else:
        _print_readable(result)
    return 0


def _export(args: argparse.Namespace) -> int:
    from thresher.catalogue import export_checkpoint

    out = export_checkpoint(Path(args.checkpoint), Path(args.out), precision=args.precision)
    print(out)
    return 0


def _bench(args: argparse.Namespace) -> int:
    import runpy

    root = Path(args.dir)
    scripts = [root / f"{name}.py" for name in args.names] if args.names else sorted(
        p for p in root.glob("*.py") if not p.name.startswith(("_", "common", "gpu_"))
    )
    if not scripts:
        raise ValueError(f"no benchmark scripts found in {root}: pass --dir, the benchmarks/ folder of a "
                         "thresher checkout (benchmarks are not installed with the package)")
    for script in scripts:
        if not script.is_file():
            raise ValueError(f"no benchmark {script}")
        print(f"== {script.name}", flush=True)
        argv = sys.argv
        sys.argv = [str(script), *(["--quick"] if args.quick else [])]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = argv
    return 0


def build_parser() -> argparse.ArgumentParser:
    from thresher import __version__

    parser = argparse.ArgumentParser(prog="thresher", description="Fast RAG context compression.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log thresher's progress (INFO)")
    parser.add_argument("--version", action="version", version=f"thresher {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compress", help="prune passages for a question")
    p.add_argument("-q", "--question", required=True, help="the question the passages should answer")
    p.add_argument("passages", nargs="?", default="-",
                   help="JSON list, JSONL or text file (blank-line separated); '-' = stdin")
    p.add_argument("--format", choices=["auto", "json", "jsonl", "text"], default="auto",
                   help="input format (auto: from the file suffix, else from the first character)")
    p.add_argument("-m", "--model", default="default", help="model name, model directory or checkpoint")
    p.add_argument("--threshold", type=float, help="keep sentences scoring above this (default: the model's)")
    p.add_argument("--keep-ratio", type=float, help="keep the best-scoring sentences up to this share of characters")
    p.add_argument("--relative-threshold", type=float,
                   help="also drop sentences below this fraction of their passage's best score (default: the model's)")
    p.add_argument("--passage-threshold", type=float,
                   help="passages whose rerank score is below this keep nothing (default: the model's)")
    p.add_argument("--top-k", type=int, help="keep only the k passages with the best rerank scores")
    p.add_argument("--reorder", action="store_true", help="order passages by rerank score")
    p.add_argument("-o", "--output", choices=["text", "json", "context"], default="text",
                   help="text: scored sentences for reading; json: the full result; "
                        "context: only the pruned passages (what to send to the LLM)")
    p.set_defaults(func=_compress)

    p = sub.add_parser("export", help="export a checkpoint folder to a thresher model directory")
    p.add_argument("checkpoint", help="Hugging Face checkpoint folder (config.json + weights)")
    p.add_argument("out", help="model directory to write (model.onnx, tokenizer.json, thresher.json)")
    p.add_argument("--precision", choices=["fp32", "int8", "fp16"], default="int8",
                   help="fp16: for GPU execution providers (encoder-pruner only)")
    p.set_defaults(func=_export)

    p = sub.add_parser("bench", help="run the benchmark suite (benchmarks/*.py)")
    p.add_argument("names", nargs="*", help="benchmark script names (default: all)")
    p.add_argument("--dir", default="benchmarks",
                   help="the benchmarks/ folder of a thresher checkout (default: ./benchmarks)")
    p.add_argument("--quick", action="store_true", help="small runs")
    p.set_defaults(func=_bench)

    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for p in sub.choices.values():  # -v after the subcommand too; SUPPRESS keeps a -v given before it
        if "-v" not in p._option_string_actions:
            p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                           help="log thresher's progress (INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # -v raises thresher's loggers only: dependencies (transformers, uvicorn, ...) stay at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.verbose:
        logging.getLogger("thresher").setLevel(logging.INFO)
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, ImportError) as e:
        print(f"thresher {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
