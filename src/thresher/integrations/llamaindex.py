"""LlamaIndex: `ThresherNodePostprocessor`, a node postprocessor that prunes and reranks.

    from thresher.integrations.llamaindex import ThresherNodePostprocessor
    engine = index.as_query_engine(node_postprocessors=[ThresherNodePostprocessor(top_n=3)])

Each node is copied before its text changes, so the index's own nodes are never modified. A
node's `score` becomes the model's rerank score (scale per model kind, see README); its metadata
gets "compression_rate". Nodes pruned to nothing are dropped; the rest come best first. A
metadata "title" (see `title_key`) is read as the passage title (model context, never pruned).
`apostprocess_nodes` (LlamaIndex's own) runs it in a worker thread. Needs
`pip install 'thresher[llamaindex]'`.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from thresher.engine.result import CompressionResult
from thresher.integrations import common


class ThresherNodePostprocessor(BaseNodePostprocessor):
    """Prunes each node's text to its useful sentences and reranks the nodes."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = Field(default="default", description="thresher model name, directory or checkpoint")
    compressor: Any = Field(default=None, description="an already loaded thresher.Compressor", exclude=True)
    top_n: int | None = Field(default=None, description="keep at most this many nodes, best first")
    threshold: float | None = Field(default=None, description="keep sentences scoring >= threshold")
    keep_ratio: float | None = Field(default=None, description="or keep this fraction of characters")
    title_key: str | None = Field(default="title", description="metadata key read as the title")
    _loaded: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "ThresherNodePostprocessor"

    def _compressor(self):
        if self._loaded is None:
            self._loaded = common.load(self.compressor, self.model)
        return self._loaded

    def _request(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> tuple[str, list, dict]:
        if query_bundle is None:
            raise ValueError("ThresherNodePostprocessor needs the query (query_bundle or query_str)")
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        titles = [n.node.metadata.get(self.title_key) if self.title_key else None for n in nodes]
        return (query_bundle.query_str, common.passages(texts, titles),
                common.options(self.threshold, self.keep_ratio, self.top_n))

    @staticmethod
    def _nodes(nodes: list[NodeWithScore], result: CompressionResult) -> list[NodeWithScore]:
        out = []
        for p in common.survivors(result):
            node = nodes[p.index].node.model_copy(deep=True)  # the index's node stays as it was
            node.set_content(p.pruned_text)
            node.metadata["compression_rate"] = p.compression_rate
            for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                excluded.append("compression_rate")  # bookkeeping, not text for the LLM or embedder
            out.append(NodeWithScore(node=node, score=p.rerank_score))
        return out

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if not nodes:
            return []
        query, passages, options = self._request(nodes, query_bundle)
        return self._nodes(nodes, self._compressor().compress(query, passages, **options))
