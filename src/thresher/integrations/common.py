"""What the framework adapters share: loading the Compressor once, turning a framework's
documents into passages, and reading back which passages survived.

Adapters keep the framework's own objects (ids, metadata, embeddings) and only swap the text,
so this module never sees them: it works on plain texts and titles and returns PassageResults
whose `index` points back at the caller's document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thresher.compressor import Compressor
from thresher.engine.result import CompressionResult, PassageResult


def load(compressor: Compressor | None, model: str) -> Compressor:
    """The given Compressor, else `model` loaded (adapters cache the result)."""
    if compressor is not None:
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a thresher.Compressor, got {type(compressor).__name__}")
        return compressor
    return Compressor.load(model)


def passages(texts: Sequence[str], titles: Sequence[Any]) -> list[dict[str, Any]]:
    """Engine passages; a title that is not a string is left out (it is model context only)."""
    return [{"text": t, **({"title": h} if isinstance(h, str) else {})} for t, h in zip(texts, titles)]


def options(threshold: float | None, keep_ratio: float | None, top_k: int | None) -> dict[str, Any]:
    """Compression options with passages best first, as rerankers return them."""
    return {"threshold": threshold, "keep_ratio": keep_ratio, "top_k": top_k, "reorder": True}


def survivors(result: CompressionResult) -> list[PassageResult]:
    """Passages that kept any text, best first; a passage pruned to nothing is dropped."""
    return [p for p in result.passages if p.pruned_text]
