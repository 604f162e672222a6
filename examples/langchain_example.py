"""thresher in LangChain: a BM25 retriever over HotpotQA paragraphs, wrapped in a
ContextualCompressionRetriever whose compressor is thresher (prune + rerank).

    pip install 'thresher[langchain]' langchain-classic bm25s
    python examples/langchain_example.py
"""

import rag_corpus
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from thresher.integrations.langchain import ThresherCompressor


class BM25Retriever(BaseRetriever):
    index: object
    k: int = 8

    def _get_relevant_documents(self, query: str, *, run_manager) -> list[Document]:
        return [Document(page_content=p["text"], id=p["id"], metadata={"title": p["title"]})
                for p in self.index.search(query, self.k)]


questions, paragraphs = rag_corpus.load()
base = BM25Retriever(index=rag_corpus.BM25(paragraphs))
retriever = ContextualCompressionRetriever(base_compressor=ThresherCompressor(top_k=4), base_retriever=base)

question = questions[1]
print(f"Q: {question}\n")
before = base.invoke(question)
rag_corpus.show("before (BM25)", [(d.metadata["title"], d.page_content, None) for d in before])
after = retriever.invoke(question)
print()
rag_corpus.show("after (thresher)", [(d.metadata["title"], d.page_content, d.metadata["rerank_score"]) for d in after])
