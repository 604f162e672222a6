"""Haystack 2.x components: `ThresherRanker` (reorders documents by the model's rerank score)
and `ThresherCompressor` (prunes each document to its useful sentences, then ranks).

    from thresher.integrations.haystack import ThresherCompressor
    pipe.add_component("compressor", ThresherCompressor(top_k=3))
    pipe.connect("retriever.documents", "compressor.documents")

`warm_up()` loads the model (a pipeline calls it before the first run); both have `run` and
`run_async` and serialise with `to_dict`/`from_dict`, so YAML pipelines round-trip. Scores are
the model's rerank score (scale per model kind, see README). Documents come best first; a
document's meta "title" is read as its title (model context, never pruned). Needs
`pip install 'thresher[haystack]'`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from thresher.engine.result import CompressionResult
from thresher.integrations import common


class _Component:
    """Model loading, requests and serialisation shared by the two components."""

    def __init__(self, model: str, top_k: int | None, title_key: str | None, init: dict[str, Any]):
        self.model = model
        self.top_k = top_k
        self.title_key = title_key
        self._init = init  # what to_dict saves: exactly the constructor's arguments
        self._compressor = None

    def warm_up(self) -> None:
        if self._compressor is None:
            self._compressor = common.load(None, self.model)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self._init)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        return default_from_dict(cls, data)

    def _request(self, documents: list[Document], **options: Any) -> tuple[list[dict], dict[str, Any]]:
        if self._compressor is None:
            raise RuntimeError(f"{type(self).__name__} is not warmed up: call warm_up() first "
                               "(a Pipeline does this before its first run)")
        titles = [(d.meta or {}).get(self.title_key) if self.title_key else None for d in documents]
        return common.passages([d.content or "" for d in documents], titles), options


@component
class ThresherRanker(_Component):
    """Ranks documents by the model's rerank score, best first; contents stay unchanged."""

    def __init__(self, model: str = "default", top_k: int | None = None, title_key: str | None = "title"):
        # @component rebuilds the class, so zero-argument super() cannot find it
        _Component.__init__(self, model, top_k, title_key, {"model": model, "top_k": top_k, "title_key": title_key})

    def _ranked(self, documents: list[Document], result: CompressionResult) -> dict[str, list[Document]]:
        return {"documents": [dataclasses.replace(documents[p.index], score=p.rerank_score)
                              for p in result.passages]}

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        passages, options = self._request(documents, **common.options(None, None, top_k or self.top_k))
        return self._ranked(documents, self._compressor.compress(query, passages, **options))

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, documents: list[Document],
                        top_k: int | None = None) -> dict[str, list[Document]]:
        passages, options = self._request(documents, **common.options(None, None, top_k or self.top_k))
        return self._ranked(documents, await self._compressor.acompress(query, passages, **options))


@component
class ThresherCompressor(_Component):
    """Prunes each document's content to its useful sentences, drops documents pruned to
    nothing, and returns the rest best first with `score` and meta "compression_rate"."""

    def __init__(self, model: str = "default", top_k: int | None = None, threshold: float | None = None,
                 keep_ratio: float | None = None, title_key: str | None = "title"):
        _Component.__init__(self, model, top_k, title_key, {"model": model, "top_k": top_k, "threshold": threshold,
                                                            "keep_ratio": keep_ratio, "title_key": title_key})
        self.threshold = threshold
        self.keep_ratio = keep_ratio

    def _options(self, top_k: int | None, threshold: float | None, keep_ratio: float | None) -> dict[str, Any]:
        if threshold is None and keep_ratio is None:
            threshold, keep_ratio = self.threshold, self.keep_ratio
        return common.options(threshold, keep_ratio, top_k or self.top_k)

    @staticmethod
    def _pruned(documents: list[Document], result: CompressionResult) -> dict[str, list[Document]]:
        out = []
        for p in common.survivors(result):
            doc = documents[p.index]
            meta = {**(doc.meta or {}), "compression_rate": p.compression_rate}
            out.append(dataclasses.replace(doc, content=p.pruned_text, score=p.rerank_score, meta=meta))
        return {"documents": out}

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None,
            threshold: float | None = None, keep_ratio: float | None = None) -> dict[str, list[Document]]:
        passages, options = self._request(documents, **self._options(top_k, threshold, keep_ratio))
        return self._pruned(documents, self._compressor.compress(query, passages, **options))

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, documents: list[Document], top_k: int | None = None,
                        threshold: float | None = None,
                        keep_ratio: float | None = None) -> dict[str, list[Document]]:
        passages, options = self._request(documents, **self._options(top_k, threshold, keep_ratio))
        return self._pruned(documents, await self._compressor.acompress(query, passages, **options))
