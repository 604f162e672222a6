"""Sentence segmentation with character offsets, offline.

A segmenter maps a text to int64 spans [S, 2] (start, end) that are whitespace-trimmed, in
order, non-overlapping, and together cover every non-whitespace character of the text: no text
is ever lost between sentences. Segmenters are chosen by name from the model manifest.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

# Abbreviations after which a period does not end a sentence (lower-case, without the period).
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx dept est fig gen gov lt col
    capt sgt rev hon inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec no vol pp
    ed eds u.s u.k u.n a.m p.m ph.d b.a m.a d.c op ca""".split()  # noqa: SIM905
)
# A candidate boundary: terminal punctuation, optional closing quotes/brackets, then whitespace.
_CANDIDATE = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|\n\s*\n")
_WORD_BEFORE = re.compile(r"([\w.]+)\.$")
_NEXT_START = re.compile(r"\s+([\"'“‘(\[]*)(\S)")


def _is_boundary(text: str, end: int) -> bool:
    """True when the candidate ending at `end` (exclusive) really ends a sentence."""
    mark = text[end - 1]
    nxt = _NEXT_START.match(text, end)
    if nxt is None:
        return False  # only whitespace follows: the final sentence ends at the text's end
    first = nxt.group(2)
    if mark in "\n\r\t ":  # blank line: paragraph break
        return True
    if first.islower():
        return False  # "... approx. five" continues the sentence
    if text[end - 1] == "." or text[end - 2 : end] in {".\"", ".'", ".”", ".’", ".)", ".]"}:
        head = text[max(0, end - 24) : end].rstrip("\"'”’)]")
        word = _WORD_BEFORE.search(head)
        if word:
            w = word.group(1).lower()
            if w in _ABBREVIATIONS:
                return False
            if len(w) == 1 and w.isalpha():
                return False  # an initial: "J. K. Rowling"
    return True


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def split_rules(text: str) -> np.ndarray:
    """thresher's own rules: terminal punctuation + capital next, abbreviation and initial aware."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _CANDIDATE.finditer(text):
        if _is_boundary(text, m.end()):
            span = _trimmed(text, start, m.end())
            if span:
                spans.append(span)
            start = m.end()
    span = _trimmed(text, start, len(text))
    if span:
        spans.append(span)
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def split_whole(text: str) -> np.ndarray:
    """The whole (trimmed) text as one sentence."""
    span = _trimmed(text, 0, len(text))
    return np.asarray([span] if span else [], dtype=np.int64).reshape(-1, 2)


SEGMENTERS: dict[str, Callable[[str], np.ndarray]] = {
    "rules": split_rules,
    "whole": split_whole,
}
DEFAULT_SEGMENTER = "rules"


def get_segmenter(name: str) -> Callable[[str], np.ndarray]:
    try:
        return SEGMENTERS[name]
    except KeyError:
        raise ValueError(f"unknown segmenter {name!r}; available: {sorted(SEGMENTERS)}") from None
