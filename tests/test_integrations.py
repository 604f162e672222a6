"""The LangChain, LlamaIndex and Haystack adapters, inside the real frameworks, on HotpotQA
paragraphs: metadata kept, text pruned, empty documents dropped, top-k honoured, the caller's
objects never modified, async paths equal to sync ones, Haystack pipelines round-trip YAML."""

import asyncio
import copy

import pytest

from .conftest import load_jsonl


@pytest.fixture(scope="module")
def row():
    return load_jsonl("hotpotqa_distractor", limit=2)[1]


def paragraphs(row):
    return [{"id": f"p{i}", "title": t, "text": "".join(s)} for i, (t, s) in enumerate(row["context"])]


def expected(compressor, row, ids=None, **options):
    """What the engine keeps of the paragraphs with these ids (all by default), given in this
    order: {paragraph id: (pruned text, rerank score)}, best first."""
    by_id = {p["id"]: p for p in paragraphs(row)}
    ps = [by_id[i] for i in (ids or by_id)]
    result = compressor.compress(row["question"], [{"title": p["title"], "text": p["text"]} for p in ps],
                                 reorder=True, **options)
    return {ps[p.index]["id"]: (p.pruned_text, p.rerank_score) for p in result.passages if p.pruned_text}


# -- LangChain ------------------------------------------------------------------------------------


def test_langchain_compressor_in_a_contextual_compression_retriever(default_compressor, row):
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from thresher.integrations.langchain import ThresherCompressor

    class OverlapRetriever(BaseRetriever):
        """Paragraphs sharing a word with the query, most shared first (a real, tiny retriever)."""

        docs: list[Document]

        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun):
            words = set(query.lower().split())
            shared = [len(words & set(d.page_content.lower().split())) for d in self.docs]
            return [d for n, d in sorted(zip(shared, self.docs), key=lambda x: -x[0]) if n]

    docs = [Document(page_content=p["text"], id=p["id"], metadata={"title": p["title"], "source": "hotpot"})
            for p in paragraphs(row)]
    originals = copy.deepcopy(docs)
    base = OverlapRetriever(docs=docs)
    for options in ({}, {"top_k": 2}, {"keep_ratio": 0.3}, {"threshold": 0.5}):
        compressor = ThresherCompressor(compressor=default_compressor, **options)
        retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
        got = retriever.invoke(row["question"])
        want = expected(default_compressor, row, [d.id for d in base.invoke(row["question"])], **options)
        assert [d.id for d in got] == list(want), options  # best first; emptied documents dropped
        for d in got:
            assert d.page_content == want[d.id][0] and d.metadata["rerank_score"] == want[d.id][1]
            assert d.metadata["title"] == next(o.metadata["title"] for o in originals if o.id == d.id)
            assert d.metadata["source"] == "hotpot" and 0 <= d.metadata["compression_rate"] < 1
        assert asyncio.run(retriever.ainvoke(row["question"])) == got
    assert docs == originals  # the retriever's documents were not modified
    assert len(ThresherCompressor(compressor=default_compressor, top_k=2).compress_documents(
        docs, row["question"])) == 2
    with pytest.raises(TypeError, match="thresher.Compressor"):
        ThresherCompressor(compressor="default").compress_documents(docs, "q")


# -- LlamaIndex -----------------------------------------------------------------------------------


def test_llamaindex_postprocessor_copies_nodes(default_compressor, row):
    from llama_index.core import SummaryIndex
    from llama_index.core.schema import QueryBundle, TextNode

    from thresher.integrations.llamaindex import ThresherNodePostprocessor

    nodes = [TextNode(text=p["text"], id_=p["id"], metadata={"title": p["title"]}) for p in paragraphs(row)]
    index = SummaryIndex(nodes)
    stored = {n.node_id: n.model_copy(deep=True) for n in nodes}
    retrieved = index.as_retriever().retrieve(row["question"])
    assert len(retrieved) == len(nodes)
    post = ThresherNodePostprocessor(compressor=default_compressor, top_n=3)
    got = post.postprocess_nodes(retrieved, query_str=row["question"])
    want = expected(default_compressor, row, top_k=3)
    assert [n.node.node_id for n in got] == list(want)
    for n in got:
        assert (n.node.get_content(), n.score) == want[n.node.node_id]
        assert n.node.metadata["title"] == stored[n.node.node_id].metadata["title"]
        assert "compression_rate" not in n.node.get_content(metadata_mode="llm")
    # the index's nodes (and the retrieved ones) are as they were
    for node_id, before in stored.items():
        assert index.docstore.get_node(node_id) == before
    assert all(r.node == stored[r.node.node_id] for r in retrieved)
    again = asyncio.run(post.apostprocess_nodes(retrieved, QueryBundle(row["question"])))
    assert [(n.node.node_id, n.node.get_content(), n.score) for n in again] == \
           [(n.node.node_id, n.node.get_content(), n.score) for n in got]
    everything = ThresherNodePostprocessor(compressor=default_compressor).postprocess_nodes(
        retrieved, query_str=row["question"])
    assert [n.node.node_id for n in everything] == list(expected(default_compressor, row))
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(retrieved)


# -- Haystack -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def haystack_store(row):
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=p["id"], content=p["text"], meta={"title": p["title"]})
                           for p in paragraphs(row)])
    return store


def test_haystack_pipeline_round_trips_yaml(default_compressor, row, haystack_store):
    from haystack import Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

    from thresher.integrations.haystack import ThresherCompressor

    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=haystack_store, top_k=10))
    pipe.add_component("compressor", ThresherCompressor(top_k=3, keep_ratio=0.4))
    pipe.connect("retriever.documents", "compressor.documents")
    inputs = {"retriever": {"query": row["question"]}, "compressor": {"query": row["question"]}}
    out = pipe.run(inputs)["compressor"]["documents"]
    want = expected(default_compressor, row, top_k=3, keep_ratio=0.4)
    assert [d.id for d in out] == list(want)
    for d in out:
        assert (d.content, d.score) == want[d.id] and d.meta["title"] and 0 <= d.meta["compression_rate"] < 1
    stored = {d.id: d for d in haystack_store.filter_documents()}
    assert all(stored[d.id].content != d.content for d in out if d.meta["compression_rate"] > 0)

    text = pipe.dumps()
    assert "thresher.integrations.haystack.ThresherCompressor" in text and "keep_ratio: 0.4" in text
    loaded = Pipeline.loads(text)
    assert loaded.get_component("compressor").to_dict() == pipe.get_component("compressor").to_dict()
    assert loaded.run(inputs)["compressor"]["documents"] == out


def test_haystack_ranker_and_async(default_compressor, row, haystack_store):
    from thresher.integrations.haystack import ThresherCompressor, ThresherRanker

    docs = haystack_store.filter_documents()
    ranker = ThresherRanker(top_k=4)
    with pytest.raises(RuntimeError, match="warm_up"):
        ranker.run(query=row["question"], documents=docs)
    ranker.warm_up()
    ranked = ranker.run(query=row["question"], documents=docs)["documents"]
    local = default_compressor.rank(row["question"], [{"title": d.meta["title"], "text": d.content} for d in docs],
                                    top_k=4)
    assert [(d.id, d.score) for d in ranked] == [(docs[x["corpus_id"]].id, x["score"]) for x in local]
    assert all(d.content == docs[x["corpus_id"]].content for d, x in zip(ranked, local))  # unchanged
    assert asyncio.run(ranker.run_async(query=row["question"], documents=docs)) == {"documents": ranked}
    assert ThresherRanker.from_dict(ranker.to_dict()).to_dict() == ranker.to_dict()
    compressor = ThresherCompressor(threshold=0.5)
    compressor.warm_up()
    sync = compressor.run(query=row["question"], documents=docs)["documents"]
    assert [d.id for d in sync] == list(expected(default_compressor, row, threshold=0.5))
    assert len(sync) < len(docs)  # documents pruned to nothing are dropped
    assert asyncio.run(compressor.run_async(query=row["question"], documents=docs))["documents"] == sync
