"""The Compressor: load a model once, then compress, rank and score."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thresher.engine.onnx_backend import SessionConfig
from thresher.engine.pipeline import compress_requests
from thresher.engine.request import DEFAULT_LIMITS, Limits, Options, Request, validate
from thresher.engine.result import CompressionResult


class Compressor:
    """Scores every sentence of retrieved passages for a question and keeps the useful ones.

    >>> c = Compressor.load("default")
    >>> r = c.compress("Who wrote Hamlet?", ["Hamlet is a tragedy. It was written by Shakespeare."])
    >>> r.passages[0].pruned_text
    """

    def __init__(self, scorer, limits: Limits = DEFAULT_LIMITS):
        self._scorer = scorer
        self.limits = limits

    @classmethod
    def load(cls, model: str | os.PathLike = "default", *, limits: Limits = DEFAULT_LIMITS,
             session_config: SessionConfig | None = None, **model_options: Any) -> Compressor:
        """Load "default" (or another name in thresher.list_models()), a model directory, or a
        Hugging Face checkpoint folder (exported once into the cache). `model_options` are
        kind-specific settings fixed for this instance (see the README per model kind)."""
        from thresher.models import load_scorer

        return cls(load_scorer(model, session_config, model_options), limits)

    @property
    def model(self) -> str:
        return self._scorer.name

    @property
    def kind(self) -> str:
        return self._scorer.kind

    @property
    def threshold(self) -> float:
        """The model's default keep threshold (keep when score >= threshold)."""
        return self._scorer.threshold

    def _request(self, question: object, passages: object, **options: Any) -> Request:
        request = validate(question, passages, Options(**options), self.limits)
        check_question = getattr(self._scorer, "check_question", None)  # a model's token limit
        if check_question is not None:
            check_question(request.question)
        return request

    def compress(self, question: str, passages: Sequence[str | Mapping[str, str]], *,
                 threshold: float | None = None, keep_ratio: float | None = None,
                 top_k: int | None = None, reorder: bool = False) -> CompressionResult:
        """Prune `passages` for `question`.

        Args:
            question: the query (non-empty string).
            passages: strings or {"title", "text"} mappings; titles are returned, never pruned.
            threshold: keep sentences scoring >= threshold (default: the model's).
            keep_ratio: instead of a threshold, keep the best sentences up to this fraction of
                characters (0 < keep_ratio <= 1).
            top_k: keep only the k passages with the highest rerank score.
            reorder: return passages best first by rerank score instead of input order.
        """
        request = self._request(question, passages, threshold=threshold, keep_ratio=keep_ratio,
                                top_k=top_k, reorder=reorder)
        return compress_requests(self._scorer, [request])[0]

    def compress_batch(self, items: Iterable[Mapping[str, Any] | tuple], *, progress: bool = True,
                       batch_size: int = 8, **options: Any) -> list[CompressionResult]:
        """Compress many questions: items are (question, passages) tuples or mappings with
        "question", "passages" and optional per-item options. `batch_size` requests share one
        model call (more throughput, more memory). Options given here apply to every item that
        does not set its own."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        requests = []
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                extra = set(item) - {"question", "passages", *Options.__dataclass_fields__}
                if extra:
                    raise ValueError(f"items[{i}] has unknown keys {sorted(extra)}")
                opts = {**options, **{k: v for k, v in item.items() if k not in ("question", "passages")}}
                question, passages = item.get("question"), item.get("passages")
            elif isinstance(item, tuple) and len(item) == 2:
                (question, passages), opts = item, options
            else:
                raise TypeError(f"items[{i}] must be a (question, passages) tuple or a mapping")
            try:
                requests.append(self._request(question, passages, **opts))
            except (TypeError, ValueError) as e:
                raise type(e)(f"items[{i}]: {e}") from None
        from tqdm.auto import tqdm

        results: list[CompressionResult] = []
        with tqdm(total=len(requests), disable=not progress, unit="q", desc="compress") as bar:
            for start in range(0, len(requests), batch_size):
                chunk = requests[start : start + batch_size]
                try:
                    results.extend(compress_requests(self._scorer, chunk))
                except Exception:
                    _raise_for_item(self._scorer, chunk, start)
                    raise
                bar.update(len(chunk))
        return results

    def rank(self, query: str, documents: Sequence[str], *, top_k: int | None = None,
             return_documents: bool = False) -> list[dict[str, Any]]:
        """CrossEncoder-style ranking: [{"corpus_id", "score"(, "text")}], best first.

        The score is the model's rerank score (see README: its scale depends on the model kind).
        """
        result = self.compress(query, documents, top_k=top_k, reorder=True)
        return [
            {"corpus_id": p.index, "score": p.rerank_score, **({"text": p.text} if return_documents else {})}
            for p in result.passages
        ]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings float32 [len(texts), H] from a bi-encoder model (embed-sim
        kind, e.g. "default"); other kinds raise TypeError. Used by dense retrieval."""
        embed = getattr(self._scorer, "embed", None)
        if embed is None:
            raise TypeError(f"model kind {self.kind!r} has no text embeddings; use an embed-sim model")
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a sequence of strings")
        return embed(list(texts), {})

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Rerank score of each (query, passage) pair as float32 [N] (CrossEncoder.predict)."""
        items = [(q, [p]) for q, p in pairs]
        results = self.compress_batch(items, progress=False, batch_size=32)
        return np.array([r.passages[0].rerank_score for r in results], dtype=np.float32)


def _raise_for_item(scorer, chunk: list[Request], start: int) -> None:
    """After a failed batch, run its requests one by one and raise the first failure again
    naming its item (items[i]); returns when none fails alone."""
    for i, request in enumerate(chunk, start):
        try:
            compress_requests(scorer, [request])
        except (TypeError, ValueError) as e:
            raise type(e)(f"items[{i}]: {e}") from e
        except Exception as e:
            raise RuntimeError(f"items[{i}] failed: {type(e).__name__}: {e}") from e
