"""Sentence segmentation with character offsets, offline.

A segmenter maps a text to int64 spans [S, 2] (start, end) that are whitespace-trimmed, in
order, non-overlapping, and together cover every non-whitespace character of the text: no text
is ever lost between sentences. Segmenters are chosen by name from the model manifest.

Every segmenter only proposes *cut* positions; `spans_from_cuts` turns cuts into spans, so the
invariants above hold by construction whatever a third-party library returns. Third-party
segmenters (blingfire, NLTK Punkt) are imported on first use only.
Measured on HotpotQA's gold boundaries: benchmarks/RESULTS.md, "Sentence segmentation"; pysbd
was measured too and left out (less accurate than "rules" and superlinear: minutes for 1 MB).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

from thresher.engine import nltk_punkt

# Abbreviations after which a period does not end a sentence (lower-case, without the final
# period). Titles and Latin forms only: "etc", "inc", "co", "bros" and month names end
# sentences as often as not in encyclopaedic text ("... by Warner Bros. It ...").
_ABBREVIATIONS = frozenset(
    """mr mrs ms messrs dr prof sr jr st mt ft vs cf al approx fig figs gen gov lt col capt sgt
    rev hon pp vol vols ed eds viz sen rep pres adm maj cmdr brig supt pvt e.g i.e""".split()  # noqa: SIM905
)
# Abbreviations that take a number next ("No. 5", "Op. 27", "ca. 1500"): no boundary before a
# digit, but "... said no. The ..." still ends a sentence.
_BEFORE_NUMBER = frozenset(["no", "nos", "art", "sec", "ch", "op", "nr", "ca"])
# A candidate boundary: a run of terminal punctuation and its closing quotes/brackets, followed
# by whitespace; or a blank line (paragraph break). The whitespace test is made after the match
# on purpose: inside the pattern, a lookahead `(?=\s)` made `re` retry every suffix of a long run
# of periods, quadratic time ("a" + "." * 16_000 + "b" took ~25 s while holding the GIL). Each
# alternative here always matches greedily or fails at once, so the scan is linear.
_CANDIDATE = re.compile(r"[.!?…]+[\"'”’)\]]*|\n[^\S\n]*\n")
_WORD_BEFORE = re.compile(r"(\w[\w.'’-]*)\.$")
_NON_SPACE = re.compile(r"\S")
_OPENERS = re.compile(r"[\"'“‘(\[]*")
_TRAILING_CLOSERS = "\"'”’)]"


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    piece = text[start:end]
    stripped = piece.lstrip()
    if not stripped:
        return None
    start += len(piece) - len(stripped)
    return start, start + len(stripped.rstrip())


def spans_from_cuts(text: str, cuts: Iterable[int]) -> np.ndarray:
    """Trimmed spans of the pieces between cut positions; pieces of only whitespace vanish.

    Cuts outside (0, len(text)) or not increasing are ignored, so every character of the text
    lies in exactly one piece and every non-whitespace character in exactly one span.
    """
    spans: list[tuple[int, int]] = []
    prev = 0
    for cut in cuts:
        if prev < cut < len(text):
            span = _trim(text, prev, cut)
            if span:
                spans.append(span)
            prev = cut
    span = _trim(text, prev, len(text))
    if span:
        spans.append(span)
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _next_start(text: str, end: int) -> str | None:
    """The character that starts the next sentence after `end`, skipping whitespace and opening
    quotes/brackets (an opener itself when only openers precede whitespace); None when only
    whitespace follows. Forward scans only: a backtracking regex here cost O(run) per retry."""
    first = _NON_SPACE.search(text, end)
    if first is None:
        return None
    p = first.start()
    q = _OPENERS.match(text, p).end()
    return text[q] if q < len(text) and not text[q].isspace() else text[max(p, q - 1)]


def _is_boundary(text: str, end: int) -> bool:
    """True when the candidate ending at `end` (exclusive) really ends a sentence."""
    mark = text[end - 1]
    if mark == "\n":  # blank line: paragraph break
        return True
    first = _next_start(text, end)
    if first is None:
        return False  # only whitespace follows: the final sentence ends at the text's end
    if first.islower() or first in ",;:":
        return False  # "... approx. five", "(ed.), p. 5" continue the sentence
    head = text[max(0, end - 32) : end].rstrip(_TRAILING_CLOSERS)
    if head.endswith(".") and not head.endswith(".."):
        word = _WORD_BEFORE.search(head)
        if word:
            w = word.group(1).lower()
            if w in _ABBREVIATIONS or (w in _BEFORE_NUMBER and first.isdigit()):
                return False
            if len(w) == 1 and w != "i":
                # an initial ("J. K. Rowling") or "c. 1597", "b. 1950"; but "Ahmed I." and
                # "World War I." are Roman numerals that end their sentence.
                return False
            if "." in w and len(w) <= 6 and all(len(p) <= 2 for p in w.split(".")):
                # dotted acronyms ("U.S.", "D.C.", "Ph.D."): a sentence may end on one, but
                # before a capital they are far more often mid-sentence ("U.S. Army").
                return False
    return True


def _rule_cuts(text: str) -> Iterable[int]:
    n = len(text)
    for m in _CANDIDATE.finditer(text):
        end = m.end()
        # str.isspace is the `\s` of a str pattern (both are Py_UNICODE_ISSPACE).
        if (text[end - 1] == "\n" or (end < n and text[end].isspace())) and _is_boundary(text, end):
            yield end


def split_rules(text: str) -> np.ndarray:
    """thresher's own rules: terminal punctuation, whitespace, then no lower-case letter;
    abbreviation, initial, acronym and decimal aware (a decimal point has no space after it)."""
    return spans_from_cuts(text, _rule_cuts(text))


def split_whole(text: str) -> np.ndarray:
    """The whole (trimmed) text as one sentence."""
    return spans_from_cuts(text, ())


def split_blingfire(text: str) -> np.ndarray:
    """blingfire's sentence breaker (a compiled finite-state model, Microsoft)."""
    blingfire = nltk_punkt.import_optional("blingfire")
    if not text.strip():
        return spans_from_cuts(text, ())
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    return spans_from_cuts(text, (start for start, _ in offsets))


def split_punkt(text: str) -> np.ndarray:
    """NLTK's Punkt with its trained English parameters: the boundaries of `nltk.sent_tokenize`,
    which Provence was trained with (engine/nltk_punkt.py: offline, pickle-free, any length)."""
    if not text.strip():
        return spans_from_cuts(text, ())
    return spans_from_cuts(text, nltk_punkt.span_starts(text))


SEGMENTERS: dict[str, Callable[[str], np.ndarray]] = {
    "rules": split_rules,
    "whole": split_whole,
    "blingfire": split_blingfire,
    "punkt": split_punkt,
}
DEFAULT_SEGMENTER = "rules"  # chosen from the numbers in benchmarks/RESULTS.md


def get_segmenter(name: str) -> Callable[[str], np.ndarray]:
    try:
        return SEGMENTERS[name]
    except KeyError:
        raise ValueError(f"unknown segmenter {name!r}; available: {sorted(SEGMENTERS)}") from None
