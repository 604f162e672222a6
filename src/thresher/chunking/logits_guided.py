"""LGMGC's logits-guided chunker: cut where a causal LM thinks the passage is complete.

Scan a document in windows of at most `size` words made of whole sentence units. For a window
s1..sn, one forward pass of the `causal-eos` model over prompt + window gives
log P(EOS | prompt, s1..sk) for every k at once (causal attention: the state after sk does not
see sk+1); cut after the k with the highest probability and start the next window there. When
the rest of the document fits in `size` words it becomes the last chunk. A window of a single
unit (a sentence as long as the chunk size) is cut after that unit without a model call.

Each window depends on the previous cut, so windows are sequential within a document; the
windows of different documents are scored together in one batch (`chunk_many`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from thresher.chunking.base import (
    Chunk,
    check_size,
    check_text,
    chunk_units,
    chunks_from_bounds,
    word_starts,
    words_in,
)

DEFAULT_EOS_MODEL = "smollm2-eos"


def load_eos_model(model: str | os.PathLike = DEFAULT_EOS_MODEL, **options):
    """A CausalEosModel from a named model, a model directory or a causal LM checkpoint folder
    (exported once as `causal-eos` into the cache: a causal LM folder alone does not say which
    kind it should become). options: thresher.catalogue.load_model's (device, session_config...)."""
    from thresher.catalogue import load_model

    return load_model(model, kind="causal-eos", **options)


class _Doc:
    """Per-document scan state: unit boundaries, words per unit, cut units so far."""

    def __init__(self, text: str, units: np.ndarray, unit_words: np.ndarray):
        self.text = text
        self.units = units
        self.cum_words = np.concatenate([[0], np.cumsum(unit_words)])
        self.pos = 0  # first unit not yet in a chunk
        self.cuts = [0]  # unit indices where chunks start

    @property
    def n_units(self) -> int:
        return self.units.shape[0] - 1

    def window_end(self, size: int) -> int:
        """Exclusive unit index: the most whole units from pos with <= size words (>= 1 unit)."""
        limit = self.cum_words[self.pos] + size
        return max(self.pos + 1, int(np.searchsorted(self.cum_words, limit, side="right")) - 1)


class LogitsGuidedChunker:
    """Parent chunks of about `size` words (theta) cut at the model's most likely EOS.

    model: a `CausalEosModel`, or a name/path for `load_eos_model` (default "smollm2-eos").
    batch_docs: documents whose windows share one model batch in `chunk_many`.
    """

    def __init__(self, size: int, model=DEFAULT_EOS_MODEL, *, segmenter: str | None = None,
                 batch_docs: int = 8):
        self.size = check_size(size)
        if size < 2:
            raise ValueError("size must be >= 2 words for a window to hold a choice of cut")
        self.model = model if hasattr(model, "eos_log_probs") else load_eos_model(model)
        self.segmenter = segmenter or self.model.segmenter
        self.batch_docs = check_size(batch_docs, "batch_docs")
        self.name = f"lgmgc-{self.size}"
        self.timings: dict[str, float] = {}  # cumulative ms: "model" (ONNX run) and "total"

    def chunk(self, text: str) -> list[Chunk]:
        return self.chunk_many([text])[0]

    def chunk_many(self, texts: list[str]) -> list[list[Chunk]]:
        t0 = time.perf_counter()
        texts = [check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        docs = []
        for text in texts:
            units = chunk_units(text, self.size, self.segmenter)
            docs.append(_Doc(text, units, words_in(units, word_starts(text))))
        pending = [d for d in docs if d.n_units > 0]
        while pending:
            active = pending[: self.batch_docs]
            self._step(active)
            pending = [d for d in pending if d.pos < d.n_units]
        out = [chunks_from_bounds(d.units[np.asarray(d.cuts + [d.n_units], np.int64)])
               if d.n_units else [] for d in docs]
        self.timings["total"] = self.timings.get("total", 0.0) + (time.perf_counter() - t0) * 1e3
        return out

    def _step(self, docs: list[_Doc]) -> None:
        """Advance every document by one chunk; one model call for all windows that need it."""
        windows, ends, owners = [], [], []
        for d in docs:
            if d.cum_words[-1] - d.cum_words[d.pos] <= self.size:
                d.pos = d.n_units  # the rest fits in one chunk
                continue
            stop = d.window_end(self.size)
            if stop - d.pos == 1:
                d.pos = stop  # one unit fills the window: no choice to make
                if d.pos < d.n_units:
                    d.cuts.append(d.pos)
                continue
            a = int(d.units[d.pos])
            window = d.text[a : int(d.units[stop])]
            unit_ends = d.units[d.pos + 1 : stop + 1] - a
            # read at each sentence's last non-space character (trailing whitespace belongs to
            # the next token in byte-level BPE)
            content_ends = np.array([len(window[: e].rstrip()) for e in unit_ends.tolist()], np.int64)
            windows.append(window)
            ends.append(content_ends)
            owners.append(d)
        if not windows:
            return
        logps = self.model.eos_log_probs(windows, ends, self.timings)
        for d, logp in zip(owners, logps):
            k = int(np.argmax(logp))  # all -inf (window beyond the model) -> first unit
            d.pos += k + 1
            if d.pos < d.n_units:
                d.cuts.append(d.pos)
