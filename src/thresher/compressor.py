"""The Compressor: load a model once, then compress, rank and score."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thresher.catalogue import load_model
from thresher.engine.pipeline import compress_requests
from thresher.engine.request import DEFAULT_LIMITS, Limits, Options, Request, validate
from thresher.engine.result import CompressionResult
from thresher.engine.runner import SessionConfig
from thresher.engine.scorer import Scorer
from thresher.field_calls import FieldCalls
from thresher.scorers import SCORER_KINDS

LONG_BATCH_ITEMS = 100  # compress_batch(progress=None) shows a bar past this many items...
LONG_BATCH_S = 5.0  # ...or once a call has taken this long


class Compressor(FieldCalls):
    """Scores every sentence of retrieved passages for a question and keeps the useful ones.

    >>> c = Compressor.load("default")
    >>> r = c.compress("Who wrote Hamlet?", ["Hamlet is a tragedy. It was written by Shakespeare."])
    >>> r.passages[0].pruned_text
    """

    def __init__(self, scorer: Scorer, limits: Limits = DEFAULT_LIMITS):
        self._scorer = scorer
        self.limits = limits

    @classmethod
    def load(cls, model: str | os.PathLike = "default", *, device: str = "cpu", backend: str = "onnx",
             limits: Limits = DEFAULT_LIMITS, session_config: SessionConfig | None = None,
             call_tokens: int | None = None, **model_options: Any) -> Compressor:
        """Load "default" (or another name in thresher.list_models()), a model directory, or a
        Hugging Face checkpoint folder (exported once into the cache).

        device: "cpu" | "cuda" | "cuda:N". backend: "onnx" (ONNX Runtime: the CPU package, or
        onnxruntime-gpu's CUDA/TensorRT providers) | "torch" (the source checkpoint in torch with
        the Triton kernels; needs torch). A missing device or package raises a clear error.
        session_config: ONNX Runtime options. call_tokens: padded tokens per model call (default
        per model kind and device). `model_options` are kind-specific settings fixed for this
        instance (see the README per model kind).
        """

        scorer = load_model(model, device=device, backend=backend, session_config=session_config,
                            call_tokens=call_tokens, **model_options)
        if scorer.kind not in SCORER_KINDS:
            raise TypeError(f"{model!r} is a {scorer.kind!r} model, which scores chunk boundaries, not "
                            "sentences: use thresher.chunking.LogitsGuidedChunker(model=...)")
        return cls(scorer, limits)

    @property
    def scorer(self) -> Scorer:
        """The loaded scorer (read-only): kind, name, threshold, segmenter."""
        return self._scorer

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

    @property
    def passage_threshold(self) -> float | None:
        """The model's default passage cut: a passage whose rerank score is below it keeps no
        sentence (None: no cut)."""
        return getattr(self._scorer, "passage_threshold", None)

    @property
    def relative_threshold(self) -> float | None:
        """The model's default relative cut in threshold mode: a sentence must also score at least
        this fraction of its passage's best score (None: no relative cut)."""
        return getattr(self._scorer, "relative_threshold", None)

    def validate(self, question: object, passages: object, **options: Any) -> Request:
        """Check one request against this instance's limits and the model's question length
        (TypeError/ValueError naming the field) and return it in normal form, for
        compress_validated()."""
        request = validate(question, passages, Options(**options), self.limits)
        check_question = getattr(self._scorer, "check_question", None)  # a model's token limit
        if check_question is not None:
            check_question(request.question)
        return request

    def compress_validated(self, requests: list[Request]) -> list[CompressionResult]:
        """Compress requests from validate() in one engine call (what batching front doors use:
        the server's batcher, batch jobs)."""
        return compress_requests(self._scorer, requests)

    def compress(self, question: str, passages: Sequence[str | Mapping[str, str]], *,
                 threshold: float | None = None, keep_ratio: float | None = None,
                 relative_threshold: float | None = None, passage_threshold: float | None = None,
                 top_k: int | None = None, reorder: bool = False) -> CompressionResult:
        """Prune `passages` for `question`.

        Args:
            question: the query (non-empty string).
            passages: strings or {"title", "text"} mappings; titles are returned, never pruned.
            threshold: keep sentences scoring >= threshold (default: the model's).
            keep_ratio: instead of a threshold, keep the best sentences up to this fraction of
                characters (0 < keep_ratio <= 1).
            relative_threshold: in threshold mode, also drop sentences scoring below this fraction
                of their passage's best score.
            passage_threshold: passages whose rerank score is below it keep no sentence.
            With neither threshold nor keep_ratio the model's default operating point applies
            (threshold and both cuts, each replaced where given); with either, exactly what is
            given: threshold=t keeps every sentence scoring >= t.
            top_k: keep only the k passages with the highest rerank score.
            reorder: return passages best first by rerank score instead of input order.
        """
        request = self.validate(question, passages, threshold=threshold, keep_ratio=keep_ratio,
                                relative_threshold=relative_threshold, passage_threshold=passage_threshold,
                                top_k=top_k, reorder=reorder)
        return self.compress_validated([request])[0]

    def compress_batch(self, items: Iterable[Mapping[str, Any] | tuple], *, progress: bool | None = None,
                       batch_size: int = 8, **options: Any) -> list[CompressionResult]:
        """Compress many questions: items are (question, passages) tuples or mappings with
        "question", "passages" and optional per-item options. `batch_size` requests share one
        model call (more throughput, more memory). Options given here apply to every item that
        does not set its own. progress: True/False shows/hides a bar; None shows one only for
        more than 100 items or once the call has taken 5 s."""
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
                requests.append(self.validate(question, passages, **opts))
            except (TypeError, ValueError) as e:
                raise type(e)(f"items[{i}]: {e}") from None
        from tqdm.auto import tqdm

        results: list[CompressionResult] = []
        delay = 0.0 if progress or len(requests) > LONG_BATCH_ITEMS else LONG_BATCH_S
        with tqdm(total=len(requests), disable=progress is False, delay=delay, unit="q", desc="compress") as bar:
            for start in range(0, len(requests), batch_size):
                chunk = requests[start : start + batch_size]
                try:
                    results.extend(self.compress_validated(chunk))
                except Exception:
                    self._raise_for_item(chunk, start)
                    raise
                bar.update(len(chunk))
        return results

    def rank(self, query: str, documents: Sequence[str | Mapping[str, Any]], *, top_k: int | None = None,
             return_documents: bool = False, batch_size: int = 32,
             show_progress_bar: bool | None = None) -> list[dict[str, Any]]:
        """CrossEncoder-style ranking: [{"corpus_id", "score"(, "text")}], best first.

        Each document is scored on its own with the query, `batch_size` of them per model call.
        The score is the model's rerank score (see README: its scale depends on the model kind).
        """
        passages = self._pair_results([(query, d) for d in documents], batch_size, show_progress_bar)
        order = np.argsort([-p.rerank_score for p in passages], kind="stable")[:top_k]
        return [
            {"corpus_id": int(i), "score": passages[i].rerank_score,
             **({"text": passages[i].text} if return_documents else {})}
            for i in order
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

    def score(self, pairs: Sequence[tuple[str, str | Mapping[str, Any]]], *, batch_size: int = 32,
              show_progress_bar: bool | None = None) -> np.ndarray:
        """Rerank score of each (query, passage) pair as float32 [N] (CrossEncoder.predict)."""
        passages = self._pair_results(pairs, batch_size, show_progress_bar)
        return np.array([p.rerank_score for p in passages], dtype=np.float32)

    def _pair_results(self, pairs, batch_size: int, progress: bool | None) -> list:
        """Each (query, passage) pair as a one-passage request; the PassageResult of each."""
        if self.rerank_scale is None:
            raise TypeError(f"model kind {self.kind!r} has no rerank score; use a pruner or embed-sim model")
        results = self.compress_batch([(q, [p]) for q, p in pairs], progress=progress, batch_size=batch_size)
        return [r.passages[0] for r in results]

    def _raise_for_item(self, chunk: list[Request], start: int) -> None:
        """After a failed batch, run its requests one by one and raise the first failure again
        naming its item (items[i]); returns when none fails alone."""
        for i, request in enumerate(chunk, start):
            try:
                self.compress_validated([request])
            except (TypeError, ValueError) as e:
                raise type(e)(f"items[{i}]: {e}") from e
            except Exception as e:
                raise RuntimeError(f"items[{i}] failed: {type(e).__name__}: {e}") from e
