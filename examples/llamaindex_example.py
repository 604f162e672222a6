"""thresher in LlamaIndex: a BM25 retriever over HotpotQA paragraphs, its nodes pruned and
reranked by ThresherNodePostprocessor (the retriever's nodes are copied, never modified).

    pip install 'thresher[llamaindex]' bm25s
    python examples/llamaindex_example.py
"""

import rag_corpus
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from thresher.integrations.llamaindex import ThresherNodePostprocessor


class BM25Retriever(BaseRetriever):
    def __init__(self, index: rag_corpus.BM25, k: int = 8):
        super().__init__()
        self.index, self.k = index, k

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=p["text"], id_=p["id"], metadata={"title": p["title"]}))
                for p in self.index.search(query_bundle.query_str, self.k)]


questions, paragraphs = rag_corpus.load()
retriever = BM25Retriever(rag_corpus.BM25(paragraphs))
postprocessor = ThresherNodePostprocessor(top_n=4)

question = questions[2]
print(f"Q: {question}\n")
nodes = retriever.retrieve(question)
rag_corpus.show("before (BM25)", [(n.node.metadata["title"], n.node.get_content(), None) for n in nodes])
kept = postprocessor.postprocess_nodes(nodes, query_str=question)
print()
rag_corpus.show("after (thresher)", [(n.node.metadata["title"], n.node.get_content(), n.score) for n in kept])
