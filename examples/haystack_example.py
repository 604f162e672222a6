"""thresher in a Haystack 2.x pipeline: InMemoryBM25Retriever -> ThresherCompressor, saved to
YAML and loaded back.

    pip install 'thresher[haystack]'
    python examples/haystack_example.py
"""

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # Haystack posts usage events otherwise

import rag_corpus  # noqa: E402
from haystack import Document, Pipeline  # noqa: E402
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402

from thresher.integrations.haystack import ThresherCompressor  # noqa: E402

questions, paragraphs = rag_corpus.load()
store = InMemoryDocumentStore()
store.write_documents([Document(id=p["id"], content=p["text"], meta={"title": p["title"]}) for p in paragraphs])

pipe = Pipeline()
pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=8))
pipe.add_component("compressor", ThresherCompressor(top_k=4))
pipe.connect("retriever.documents", "compressor.documents")
pipe = Pipeline.loads(pipe.dumps())  # the YAML form round-trips

question = questions[3]
print(f"Q: {question}\n")
out = pipe.run({"retriever": {"query": question}, "compressor": {"query": question}},
               include_outputs_from={"retriever"})
rag_corpus.show("before (BM25)", [(d.meta["title"], d.content, d.score) for d in out["retriever"]["documents"]])
print()
rag_corpus.show("after (thresher)", [(d.meta["title"], d.content, d.score) for d in out["compressor"]["documents"]])
