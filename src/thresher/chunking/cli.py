"""`thresher chunk FILE --method ... --size ...`: print chunks with character offsets.

Output: one JSON object per chunk and line ({"start", "end", "level", "parent", "text"}, and
"window": [start, end] for sentence-window chunks), or
with `-o text` the parent chunks separated by a rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from thresher.chunking import METHODS, make_chunker


def _chunk(args: argparse.Namespace) -> int:
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    from thresher.chunking.base import check_text

    text = check_text(raw, "stdin" if args.file == "-" else args.file)
    chunker = make_chunker(args.method, args.size, model=args.model)
    chunks = chunker.chunk(text)
    if args.output == "text":
        for c in chunks:
            if c.level == 0:
                sys.stdout.write(f"--- [{c.parent}] {c.start}:{c.end}\n{c.text(text)}\n")
        return 0
    for c in chunks:
        row = {"start": c.start, "end": c.end, "level": c.level, "parent": c.parent, "text": c.text(text)}
        if c.window:
            row["window"] = list(c.window)
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("chunk", help="split a text file into chunks (LGMGC or a baseline)")
    p.add_argument("file", help="UTF-8 text file; '-' = stdin")
    p.add_argument("--method", choices=METHODS, default="lgmgc",
                   help="lgmgc = logits-guided parents + multi-granular children (default)")
    p.add_argument("--size", type=int, default=200, help="chunk size theta in words (tokens for fixed-tokens)")
    p.add_argument("-m", "--model", default="smollm2-eos",
                   help="causal-eos model for lgmgc/logits-guided: name, model directory or causal LM checkpoint")
    p.add_argument("-o", "--output", choices=["jsonl", "text"], default="jsonl",
                   help="jsonl: one chunk object per line; text: the top-level chunks with their spans")
    p.set_defaults(func=_chunk)
