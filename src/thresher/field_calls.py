"""The calls RAG code already makes elsewhere, on Compressor: sentence-transformers' CrossEncoder
`predict`, and awaitable `acompress`/`acompress_batch` for async frameworks.

A mixin so that compressor.py keeps one job (loading and compressing); it uses only the
Compressor's public methods and its scorer's kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thresher.scorers.scale import LOGIT, rerank_scale, sigmoid

ACTIVATIONS = (None, "sigmoid", "none")


class FieldCalls:
    """Mixed into Compressor."""

    @property
    def rerank_scale(self) -> str | None:
        """What rerank scores mean for this model: "logit", "probability", "cosine", or None
        (no rerank score). thresher.scorers.scale explains why it matters."""
        return rerank_scale(self.scorer)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32,
                show_progress_bar: bool | None = None, activation_fn: str | None = None,
                convert_to_numpy: bool = True) -> np.ndarray:
        """CrossEncoder.predict: the rerank score of each (query, passage) pair, float32 [N].

        activation_fn: None = CrossEncoder's default for a one-label model: sigmoid where this
        model's score is a logit, the score as is where it already is a probability or a cosine;
        "sigmoid" = always; "none" = the raw score (as `score`).
        """
        if activation_fn not in ACTIVATIONS:
            raise ValueError(f"activation_fn must be one of {list(ACTIVATIONS)}, got {activation_fn!r}")
        if not convert_to_numpy:
            raise ValueError("convert_to_numpy=False is not supported: predict returns a float32 array")
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(x, str) for x in pairs):
            raise TypeError("pairs must be a list of (query, passage) tuples; wrap a single pair in a list")
        scores = self.score(pairs, batch_size=batch_size, show_progress_bar=show_progress_bar)
        if activation_fn == "sigmoid" or (activation_fn is None and self.rerank_scale == LOGIT):
            return sigmoid(scores)
        return scores

    async def acompress(self, question: str, passages: Sequence[str | Mapping[str, Any]],
                        **options: Any) -> Any:
        """compress() in a worker thread, so the event loop keeps serving while the model runs."""
        return await asyncio.to_thread(self.compress, question, passages, **options)

    async def acompress_batch(self, items: Iterable[Mapping[str, Any] | tuple], **options: Any) -> list:
        """compress_batch() in a worker thread (no progress bar unless asked for)."""
        options.setdefault("progress", False)
        return await asyncio.to_thread(self.compress_batch, list(items), **options)

