"""Segmenters on adversarial text: time per size, and the old `rules` candidate scan beside the
new one in the same run.

The old scan (the pattern before issue 17's fix, `[.!?…]+[closers]*(?=\\s)`, kept here as the
reference) retried every suffix of a run of terminal punctuation; the new one is linear. For
each shape (fuzz/shapes.py) and size the script times every registered segmenter (best of
--repeat) and, for `rules`, the old scan; it prints the growth per 10x of size and the
old/new ratio.

    .venv/bin/python benchmarks/segment_adversarial.py [--sizes 1000,10000,100000] [--old-max 16000] [--quick]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fuzz"))
from shapes import SHAPES, best_seconds  # noqa: E402

from thresher.engine import segment  # noqa: E402
from thresher.engine.segment import SEGMENTERS  # noqa: E402

OLD_CANDIDATE = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|\n[^\S\n]*\n")


def old_rules(text: str):
    cuts = (m.end() for m in OLD_CANDIDATE.finditer(text) if segment._is_boundary(text, m.end()))
    return segment.spans_from_cuts(text, cuts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000", help="comma-separated text lengths")
    ap.add_argument("--old-max", type=int, default=16_000, help="largest size the old scan is timed at")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="sizes 1,000 and 10,000, old scan to 4,000, one pass")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.old_max, args.repeat = "1000,10000", 4_000, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| shape | segmenter | " + " | ".join(f"{n:,} chars" for n in sizes) + " | growth per 10x |")
    print("|---|---|" + "---|" * (len(sizes) + 1))
    for shape, make in SHAPES.items():
        for name, split in sorted(SEGMENTERS.items()):
            t = [best_seconds(split, make(n), args.repeat) for n in sizes]
            growth = (t[-1] / max(t[0], 1e-6)) ** (1 / max(len(sizes) - 1, 1))
            print(f"| {shape} | {name} | " + " | ".join(f"{s * 1e3:.1f} ms" for s in t) + f" | {growth:.1f}x |")
    print("\nold vs new `rules` candidate scan (same run):\n")
    print("| shape | chars | old | new | old/new |")
    print("|---|---|---|---|---|")
    for shape in ("periods", "closers", "mixed", "no-spaces"):
        n = 2_000
        while n <= args.old_max:
            text = SHAPES[shape](n)
            old, new = best_seconds(old_rules, text, 1), best_seconds(segment.split_rules, text, args.repeat)
            print(f"| {shape} | {n:,} | {old * 1e3:.1f} ms | {new * 1e3:.2f} ms | {old / max(new, 1e-6):,.0f}x |")
            n *= 2


if __name__ == "__main__":
    main()
