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
SUBCOMMAND_MODULES: tuple[str, ...] = ("thresher.chunking.cli", "thresher.server.cli", "thresher.budget.cli",
                                       "thresher.training.cli", "thresher.batch.cli")


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
                        top_k=args.top_k, reorder=args.reorder)
    if args.output == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False))
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
        raise ValueError(f"no benchmark scripts found in {root}")
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
    parser = argparse.ArgumentParser(prog="thresher", description="Fast RAG context compression.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compress", help="prune passages for a question")
    p.add_argument("-q", "--question", required=True)
    p.add_argument("passages", nargs="?", default="-",
                   help="JSON list, JSONL or text file (blank-line separated); '-' = stdin")
    p.add_argument("--format", choices=["auto", "json", "jsonl", "text"], default="auto")
    p.add_argument("-m", "--model", default="default", help="model name, model directory or checkpoint")
    p.add_argument("--threshold", type=float)
    p.add_argument("--keep-ratio", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--reorder", action="store_true")
    p.add_argument("-o", "--output", choices=["json", "text"], default="text")
    p.set_defaults(func=_compress)

    p = sub.add_parser("export", help="export a checkpoint folder to a thresher model directory")
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.add_argument("--precision", choices=["fp32", "int8", "fp16"], default="int8",
                   help="fp16: for GPU execution providers (encoder-pruner only)")
    p.set_defaults(func=_export)

    p = sub.add_parser("bench", help="run the benchmark suite (benchmarks/*.py)")
    p.add_argument("names", nargs="*", help="benchmark script names (default: all)")
    p.add_argument("--dir", default="benchmarks")
    p.add_argument("--quick", action="store_true", help="small runs")
    p.set_defaults(func=_bench)

    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, ImportError) as e:
        print(f"thresher {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
