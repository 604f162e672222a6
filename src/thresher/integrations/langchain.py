"""LangChain: `ThresherCompressor`, a document compressor for ContextualCompressionRetriever.

    from thresher.integrations.langchain import ThresherCompressor
    compressor = ThresherCompressor(top_k=3)          # loads thresher's default model on first use
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=bm25)

Each document's `page_content` is pruned to its useful sentences; its metadata is kept and gets
"rerank_score" (the model's score; scale per model kind, see README) and "compression_rate".
Documents pruned to nothing are dropped; the rest come best first. A metadata "title" (see
`title_key`) is read as the passage title: model context, never pruned or returned as text.
Needs `pip install 'thresher[langchain]'`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, PrivateAttr

from thresher.engine.result import CompressionResult
from thresher.integrations import common


class ThresherCompressor(BaseDocumentCompressor):
    """Prunes and reranks retrieved documents with a thresher model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "default"  # a thresher model name, model directory or checkpoint folder
    compressor: Any = None  # or an already loaded thresher.Compressor (shared, loaded once)
    threshold: float | None = None  # keep sentences scoring >= threshold (None: the model's)
    keep_ratio: float | None = None  # or keep the best sentences up to this fraction of characters
    top_k: int | None = None  # keep at most this many documents, best first
    title_key: str | None = "title"  # metadata key read as each document's title (None: no titles)
    _loaded: Any = PrivateAttr(default=None)

    def _compressor(self):
        if self._loaded is None:
            self._loaded = common.load(self.compressor, self.model)
        return self._loaded

    def _request(self, documents: Sequence[Document]) -> tuple[list[dict], dict[str, Any]]:
        titles = [d.metadata.get(self.title_key) if self.title_key else None for d in documents]
        return (common.passages([d.page_content for d in documents], titles),
                common.options(self.threshold, self.keep_ratio, self.top_k))

    @staticmethod
    def _documents(documents: Sequence[Document], result: CompressionResult) -> list[Document]:
        out = []
        for p in common.survivors(result):
            doc = documents[p.index]
            meta = {**doc.metadata, "rerank_score": p.rerank_score, "compression_rate": p.compression_rate}
            out.append(Document(page_content=p.pruned_text, metadata=meta, id=doc.id))
        return out

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        passages, options = self._request(documents)
        return self._documents(documents, self._compressor().compress(query, passages, **options))

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks | None = None) -> Sequence[Document]:
        """As compress_documents; the model runs in a worker thread, off the event loop."""
        passages, options = self._request(documents)
        result = await self._compressor().acompress(query, passages, **options)
        return self._documents(documents, result)
