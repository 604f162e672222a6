"""What every chunker returns, and the shared steps: input checks, sentence units, word counts.

A chunking of a document is a *partition*: parent chunks are character spans [start, end) that
follow each other without gaps or overlaps and together cover the whole text, whitespace
included, so `"".join(text[c.start:c.end] for c in parents) == text` always holds. Multi-granular
chunkers add children (level 1, 2, ...) that partition their parent in the same way.

Cut positions always fall on the start of a sentence unit (a sentence with the whitespace that
follows it; the first unit also takes any leading whitespace). Units longer than the chunk size
(a sentence of 900 words, a text without sentence punctuation) are split at whitespace into
pieces of at most `max_words` words first, and pieces longer than `max_chars` characters (one
"word" of 10,000 characters) at character positions, so every unit fits one chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from thresher.engine.segment import get_segmenter

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    """A character span [start, end) of the document; level 0 = parent, 1, 2 = finer children.

    `parent` is the index of the level-0 chunk a child belongs to (a parent's own index for
    level 0), so small-to-big retrieval can return `text[parents[c.parent]]` for any hit `c`.
    `window` is the span to return when this chunk is retrieved, where that is not the chunk
    itself: sentence-window retrieval indexes single sentences and returns the sentences around
    them (windows of neighbouring chunks overlap; the chunks themselves still partition).
    """

    start: int
    end: int
    level: int = 0
    parent: int = 0
    window: tuple[int, int] | None = None

    def text(self, document: str) -> str:
        return document[self.start : self.end]

    @property
    def returned_span(self) -> tuple[int, int]:
        """[start, end) of the text a retriever hands back for this chunk."""
        return self.window or (self.start, self.end)


class Chunker(Protocol):
    name: str

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of `text`; the level-0 chunks partition it exactly (see module docstring)."""
        ...


def check_text(text: object, what: str = "text") -> str:
    """Return `text` as str or raise: bytes must be valid UTF-8; lone surrogates and NUL
    characters (signs of binary data or a lossy decode) are refused rather than chunked."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        raw = bytes(text)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{what} is not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r}); "
                             "decode it yourself or pass str") from None
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str (or UTF-8 bytes), got {type(text).__name__}")
    bad = re.search(r"[\x00\ud800-\udfff]", text)
    if bad:
        raise ValueError(f"{what} has a non-text character {bad.group()!r} at offset {bad.start()} "
                         "(NUL or a lone surrogate: binary data or a lossy decode?)")
    return text


def word_starts(text: str) -> np.ndarray:
    """int64 start offsets of the whitespace-separated words of `text`."""
    return np.fromiter((m.start() for m in _WORD.finditer(text)), dtype=np.int64)


def words_in(bounds: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Words starting inside each span bounds[i]..bounds[i+1] (a partition's boundaries)."""
    return np.diff(np.searchsorted(starts, bounds, side="left"))


def _split_long(text: str, a: int, b: int, starts: np.ndarray, max_words: int, max_chars: int) -> list[int]:
    """Cut positions (exclusive of a) that split text[a:b] into pieces of <= max_words words
    and <= max_chars characters, at word starts where possible."""
    inner = starts[(starts > a) & (starts < b)]
    cuts = [int(x) for x in inner[max_words - 1 :: max_words]] if inner.size >= max_words else []
    out, prev = [], a
    for c in [*cuts, b]:
        while c - prev > max_chars:
            prev += max_chars
            out.append(prev)
        if c < b:
            out.append(c)
        prev = c
    return out


def sentence_units(text: str, segmenter: str = "rules", max_words: int | None = None,
                   max_chars: int | None = None) -> np.ndarray:
    """Boundaries int64 [U+1] of sentence units partitioning `text` (0 and len(text) included).

    An empty text has no unit ([0]); a text of only whitespace is one unit.
    """
    n = len(text)
    if n == 0:
        return np.zeros(1, np.int64)
    spans = get_segmenter(segmenter)(text)
    cuts = spans[1:, 0] if spans.shape[0] > 1 else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    if max_words is None and max_chars is None:
        return bounds
    max_words = max_words or n + 1
    max_chars = max_chars or n + 1
    starts = word_starts(text)
    sizes = words_in(bounds, starts)
    lengths = np.diff(bounds)
    long = np.flatnonzero((sizes > max_words) | (lengths > max_chars))
    if long.size == 0:
        return bounds
    extra = [c for u in long.tolist()
             for c in _split_long(text, int(bounds[u]), int(bounds[u + 1]), starts, max_words, max_chars)]
    return np.unique(np.concatenate([bounds, np.asarray(extra, np.int64)]))


MAX_CHARS_PER_WORD = 20  # a unit longer than 20 * size characters is cut at character positions


def chunk_units(text: str, size: int, segmenter: str = "rules") -> np.ndarray:
    """sentence_units for chunks of `size` words: every unit fits one chunk (<= size words,
    <= MAX_CHARS_PER_WORD * size characters)."""
    return sentence_units(text, segmenter, max_words=size, max_chars=MAX_CHARS_PER_WORD * size)


def pack_units(unit_words: np.ndarray, size: int) -> np.ndarray:
    """Greedy packing of consecutive units into groups of <= size words (a unit larger than
    size forms its own group). Returns the unit index where each group starts, int64 [G]."""
    starts, total = [0], 0
    for i, w in enumerate(unit_words.tolist()):
        if total and total + w > size:
            starts.append(i)
            total = 0
        total += w
    return np.asarray(starts if unit_words.size else [], np.int64)


def chunks_from_bounds(bounds: np.ndarray) -> list[Chunk]:
    """Level-0 chunks from partition boundaries [0, c1, ..., len]; [0] (empty text) -> []."""
    b = bounds.tolist()
    return [Chunk(b[i], b[i + 1], 0, i) for i in range(len(b) - 1)]


def check_size(size: object, what: str = "size") -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"{what} must be an int (words per chunk), got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"{what} must be >= 1 word, got {size}")
    return int(size)
