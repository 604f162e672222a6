"""Sentence segmenters vs HotpotQA's gold sentence boundaries, and their speed.

Each HotpotQA paragraph is a list of sentences; joined with "" they give the paragraph text and
the joins are the gold boundaries. A boundary is compared as the position of the first
non-whitespace character of the sentence that starts there (spans are whitespace-trimmed, so
a cut anywhere in the whitespace between two sentences is the same cut).

Reports boundary precision / recall / F1 (micro over all paragraphs), the share of paragraphs
whose boundaries are all exactly right, and speed: chars/s over all paragraphs (one call per
paragraph, as the engine does; best of --repeat passes) and on one ~1 MB text. Speed ratios are against "rules".

    .venv/bin/python benchmarks/segmentation.py [--only NAME,...] [--repeat 3] [--errors NAME] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA as DATA_ROOT  # noqa: E402
from common import HOTPOT, ROOT, command, md_table, write_results  # noqa: E402

from thresher.engine.segment import SEGMENTERS, spans_from_cuts  # noqa: E402

DATA = DATA_ROOT / HOTPOT / "dev.jsonl"
CANDIDATES = ["rules", "pysbd", "blingfire", "punkt"]
BIG_TEXT_CHARS = 1_000_000
# pysbd is superlinear in text length: the full 1 MB text took 152 s (6,565 chars/s) in one run
# on 2026-11-30, so to keep this script short it gets a 100 KB prefix of the same text.
BIG_TEXT_CHARS_FOR = {"pysbd": 100_000}


@lru_cache(maxsize=1)
def _pysbd_segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def split_pysbd(text: str) -> np.ndarray:
    """pysbd, measured but not registered in thresher. Its sentences are located back in the
    text in order (pysbd's own char_span search is slow and can misplace repeated sentences)."""
    if not text.strip():
        return spans_from_cuts(text, ())
    cuts, cursor = [], 0
    for piece in _pysbd_segmenter().segment(text):
        piece = piece.strip()
        at = text.find(piece, cursor) if piece else -1
        if at >= 0:
            cuts.append(at)
            cursor = at + len(piece)
    return spans_from_cuts(text, cuts)


CANDIDATE_FUNCS = SEGMENTERS | {"pysbd": split_pysbd}


def load_paragraphs(path: Path) -> list[tuple[str, frozenset[int]]]:
    """(text, gold boundary positions) for every paragraph of every record."""
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            for _title, sentences in json.loads(line)["context"]:
                text = "".join(sentences)
                out.append((text, gold_boundaries(text, sentences)))
    return out


def _first_nonspace(text: str, at: int) -> int:
    return at + len(text[at:]) - len(text[at:].lstrip())


def gold_boundaries(text: str, sentences: list[str]) -> frozenset[int]:
    joins = np.cumsum([len(s) for s in sentences])[:-1]
    first = _first_nonspace(text, 0)
    starts = {_first_nonspace(text, int(j)) for j in joins}
    return frozenset(s for s in starts if first < s < len(text))


def evaluate(split, paragraphs) -> dict:
    tp = n_pred = n_gold = exact = 0
    for text, gold in paragraphs:
        pred = frozenset(split(text)[1:, 0].tolist())
        tp += len(pred & gold)
        n_pred += len(pred)
        n_gold += len(gold)
        exact += pred == gold
    p = tp / max(n_pred, 1)
    r = tp / max(n_gold, 1)
    return {"precision": p, "recall": r, "f1": 2 * p * r / max(p + r, 1e-12),
            "exact_paragraphs": exact / len(paragraphs), "pred_boundaries": n_pred,
            "gold_boundaries": n_gold}


def speed(split, paragraphs, big_text: str, repeat: int) -> dict:
    """Best of `repeat` passes over all paragraphs (the machine is shared), one pass on big_text."""
    split(paragraphs[0][0])  # lazy import / model load outside the timing
    t_all = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for text, _ in paragraphs:
            split(text)
        t_all = min(t_all, time.perf_counter() - t0)
    t0 = time.perf_counter()
    n_big = split(big_text).shape[0]
    t_big = time.perf_counter() - t0
    chars = sum(len(t) for t, _ in paragraphs)
    return {"chars_per_s": chars / t_all, "seconds_all": t_all, "big_chars_per_s": len(big_text) / t_big,
            "seconds_big": t_big, "big_chars": len(big_text), "big_sentences": n_big}


def show_errors(split, paragraphs, limit: int = 40) -> None:
    shown = 0
    for text, gold in paragraphs:
        pred = frozenset(split(text)[1:, 0].tolist())
        for kind, pos in [("FP", p) for p in pred - gold] + [("FN", g) for g in gold - pred]:
            print(f"{kind} ...{text[max(0, pos - 50):pos]!r} | {text[pos:pos + 30]!r}")
            shown += 1
            if shown >= limit:
                return


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CANDIDATES), help="comma-separated segmenter names")
    ap.add_argument("--repeat", type=int, default=3, help="passes over the paragraphs (best of)")
    ap.add_argument("--errors", metavar="NAME", help="print false/missed boundaries of one segmenter")
    ap.add_argument("--quick", action="store_true", help="one timing pass")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat = 1
    if not DATA.is_file():
        raise SystemExit(f"{DATA} is absent")
    paragraphs = load_paragraphs(DATA)
    if args.errors:
        show_errors(CANDIDATE_FUNCS[args.errors], paragraphs)
        return
    big_text = " ".join(t for t, _ in paragraphs)
    big_text = (big_text + " ") * (BIG_TEXT_CHARS // len(big_text) + 1)
    big_text = big_text[:BIG_TEXT_CHARS]

    results = {}
    for name in args.only.split(","):
        big = big_text[: BIG_TEXT_CHARS_FOR.get(name, BIG_TEXT_CHARS)]
        results[name] = evaluate(CANDIDATE_FUNCS[name], paragraphs) | speed(CANDIDATE_FUNCS[name], paragraphs, big, args.repeat)
    base = results.get("rules")
    rows = [[name, f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['f1']:.4f}", f"{r['exact_paragraphs']:.4f}",
             f"{r['chars_per_s']:,.0f}", f"{r['big_chars_per_s']:,.0f} ({r['big_chars'] // 1000} KB)",
             f"{r['chars_per_s'] / base['chars_per_s']:.3f}x" if base else "-"]
            for name, r in results.items()]
    md = md_table(["segmenter", "boundary P", "boundary R", "boundary F1", "exact paragraphs",
                   "chars/s (paragraphs)", "chars/s (big text)", "speed vs rules"], rows)
    cmd = command("segmentation.py", argv)
    md = (f"{len(paragraphs)} paragraphs ({sum(len(t) for t, _ in paragraphs):,} chars) of "
          f"{HOTPOT}/dev.jsonl; big text: the paragraphs joined and repeated.\n\n{md}\n\n`{cmd}`")
    print(md)
    js, _ = write_results("segmentation", {"command": cmd, "paragraphs": len(paragraphs), "results": results}, md)
    print(f"wrote {js.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
