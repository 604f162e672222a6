"""The rerank and embed protocols of other servers on `thresher serve`, driven by their real
clients: Haystack's HuggingFaceTEIRanker and LlamaIndex's TEI postprocessor (TEI's /rerank) and
the Cohere SDK (/v1/rerank, /v2/rerank) pointed at a loopback server."""

import asyncio

import httpx
import numpy as np
import pytest

from thresher.scorers.scale import PROBABILITY, sigmoid, unit_scores
from thresher.server.settings import Settings

from .conftest import load_jsonl
from .test_server import serve


def unit(scores):
    """What the 0..1 front doors return for the default model: its calibrated probability as is."""
    return unit_scores(scores, PROBABILITY)

QUERY = "Who wrote Hamlet?"
TEXTS = ["Cats sleep a lot.", "Hamlet is a tragedy. It was written by William Shakespeare.",
         "Paris is the capital of France."]


@pytest.fixture(scope="module")
def url(default_compressor):
    with serve(default_compressor, max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        yield base


@pytest.fixture(scope="module")
def hotpot():
    row = load_jsonl("hotpotqa_distractor", limit=1)[0]
    return row["question"], ["".join(s) for _, s in row["context"]]


def test_tei_rerank_scores(url, default_compressor, hotpot):
    query, texts = hotpot
    local = default_compressor.rank(query, texts, return_documents=True)
    raw = httpx.post(f"{url}/rerank", json={"query": query, "texts": texts, "raw_scores": True,
                                            "return_text": True}).json()
    assert raw == [{"index": d["corpus_id"], "score": d["score"], "text": d["text"]} for d in local]
    squashed = httpx.post(f"{url}/rerank", json={"query": query, "texts": texts}).json()
    assert [s["index"] for s in squashed] == [d["corpus_id"] for d in local]  # best first
    # the default's rerank score is a calibrated probability already: TEI's 0..1 score is that score
    np.testing.assert_allclose([s["score"] for s in squashed], [d["score"] for d in local], rtol=1e-6)
    assert all(0 < s["score"] < 1 and "text" not in s for s in squashed)
    # truncate is accepted and changes nothing: thresher scores long texts in blocks
    kept = httpx.post(f"{url}/rerank", json={"query": query, "texts": texts, "truncate": True,
                                             "truncation_direction": "Left"}).json()
    assert kept == squashed


def test_tei_rerank_squashes_a_logit_scale(logit_compressor, hotpot):
    query, texts = hotpot
    local = logit_compressor.rank(query, texts)
    with serve(logit_compressor) as (base, _):
        squashed = httpx.post(f"{base}/rerank", json={"query": query, "texts": texts}).json()
    assert [s["index"] for s in squashed] == [d["corpus_id"] for d in local]
    np.testing.assert_allclose([s["score"] for s in squashed], sigmoid([d["score"] for d in local]), rtol=1e-6)


@pytest.mark.parametrize("body, needle", [
    ({"query": QUERY}, "texts must be a non-empty list of strings"),
    ({"query": QUERY, "texts": []}, "texts must be a non-empty list of strings"),
    ({"query": QUERY, "texts": ["a", 1]}, "texts must be a non-empty list of strings"),
    ({"query": QUERY, "texts": ["a"], "raw_scores": "yes"}, "raw_scores must be a boolean"),
    ({"query": QUERY, "texts": ["a"], "truncation_direction": "Up"}, "truncation_direction must be 'Left' or 'Right'"),
    ({"query": QUERY, "texts": ["a"], "top_n": 1}, "unknown keys ['top_n']"),
    ({"query": "", "texts": ["a"]}, "query is empty"),
    ([QUERY], "must be a JSON object"),
])
def test_tei_rerank_bad_bodies(url, body, needle):
    r = httpx.post(f"{url}/rerank", json=body)
    assert r.status_code == 422 and needle in r.json()["error"], r.text


def test_info_and_embed_on_a_reranker(url, default_compressor):
    info = httpx.get(f"{url}/info").json()
    assert info["model_id"] == default_compressor.model and "reranker" in info["model_type"]
    assert info["max_client_batch_size"] == Settings().limits.max_passages  # texts per request
    assert info["max_input_length"] == default_compressor.scorer.max_length
    assert info["thresher"] == {"kind": "encoder-pruner", "rerank_scale": "probability", "never_truncates": True}
    r = httpx.post(f"{url}/embed", json={"inputs": "hello"})
    assert r.status_code == 422 and "has no text embeddings" in r.json()["error"]


def test_embed_on_an_embedder(cosine_compressor):
    with serve(cosine_compressor, max_passages=3) as (base, _):
        texts = ["Shakespeare wrote Hamlet.", "Cats sleep a lot."]
        vectors = httpx.post(f"{base}/embed", json={"inputs": texts, "truncate": True}).json()
        np.testing.assert_allclose(vectors, cosine_compressor.embed(texts), atol=1e-6)
        one = httpx.post(f"{base}/embed", json={"inputs": texts[0]}).json()
        np.testing.assert_allclose(one, cosine_compressor.embed(texts[:1]), atol=1e-6)
        assert "embedding" in httpx.get(f"{base}/info").json()["model_type"]
        for body, needle in [({"inputs": []}, "inputs must be"), ({"inputs": ["a"] * 4}, "inputs has 4 items; the "
                                                                  "limit is 3 (max_passages)"),
                             ({"inputs": "a", "prompt_name": "query"}, "prompt_name is not supported")]:
            r = httpx.post(f"{base}/embed", json=body)
            assert r.status_code == 422 and needle in r.json()["error"], r.text


def test_cohere_shape(url, default_compressor, hotpot):
    query, texts = hotpot
    documents = [texts[0], {"text": texts[1], "source": "kept as given"}, *texts[2:]]
    body = httpx.post(f"{url}/v1/rerank", json={"model": "anything", "query": query, "documents": documents,
                                                "top_n": 3, "return_documents": True}).json()
    local = default_compressor.rank(query, texts, top_k=3)
    assert [r["index"] for r in body["results"]] == [d["corpus_id"] for d in local]
    np.testing.assert_allclose([r["relevance_score"] for r in body["results"]],  # calibrated already
                               [d["score"] for d in local], rtol=1e-6)
    for r in body["results"]:
        given = documents[r["index"]]
        assert r["document"] == (given if isinstance(given, dict) else {"text": given})
    assert body["model"] == default_compressor.model and body["id"]
    for bad, needle in [({"query": query, "documents": []}, "documents must be a non-empty list"),
                        ({"query": query, "documents": [{"title": "x"}]}, "documents[0] must be a string"),
                        ({"query": query, "documents": ["a"], "top_n": 0}, "top_n must be an integer >= 1")]:
        r = httpx.post(f"{url}/v1/rerank", json=bad)
        assert r.status_code == 422 and needle in r.json()["error"], r.text


def test_haystack_tei_ranker(url, default_compressor, hotpot):
    from haystack import Document
    from haystack.components.rankers import HuggingFaceTEIRanker

    query, texts = hotpot
    docs = [Document(content=t) for t in texts]
    local = default_compressor.rank(query, texts, top_k=3)
    for raw in (False, True):
        ranker = HuggingFaceTEIRanker(url=url, top_k=3, raw_scores=raw)
        ranked = ranker.run(query=query, documents=docs)["documents"]
        assert [d.content for d in ranked] == [texts[d["corpus_id"]] for d in local]
        want = [d["score"] for d in local]
        np.testing.assert_allclose([d.score for d in ranked], want if raw else unit(want), rtol=1e-6)
    async_ranked = asyncio.run(HuggingFaceTEIRanker(url=url, top_k=3).run_async(query=query, documents=docs))
    assert [d.content for d in async_ranked["documents"]] == [texts[d["corpus_id"]] for d in local]
    from haystack.components.rankers.hugging_face_tei import TruncationDirection

    truncated = HuggingFaceTEIRanker(url=url, top_k=3).run(query=query, documents=docs,
                                                           truncation_direction=TruncationDirection.LEFT)
    assert [d.content for d in truncated["documents"]] == [texts[d["corpus_id"]] for d in local]


def test_llamaindex_tei_postprocessor(url, default_compressor, hotpot):
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.postprocessor.tei_rerank import TextEmbeddingInference

    query, texts = hotpot
    nodes = [NodeWithScore(node=TextNode(text=t), score=0.0) for t in texts]
    got = TextEmbeddingInference(base_url=url, top_n=4).postprocess_nodes(nodes, QueryBundle(query))
    local = default_compressor.rank(query, texts, top_k=4)
    assert [n.node.text for n in got] == [texts[d["corpus_id"]] for d in local]
    np.testing.assert_allclose([n.score for n in got], unit([d["score"] for d in local]), rtol=1e-6)


def test_cohere_clients(url, default_compressor, hotpot):
    import cohere

    query, texts = hotpot
    local = default_compressor.rank(query, texts, top_k=2)
    v1 = cohere.Client(api_key="unused", base_url=url)
    answer = v1.rerank(query=query, documents=texts, top_n=2, return_documents=True, model="thresher")
    assert [r.index for r in answer.results] == [d["corpus_id"] for d in local]
    assert [r.document.text for r in answer.results] == [texts[d["corpus_id"]] for d in local]
    np.testing.assert_allclose([r.relevance_score for r in answer.results],
                               unit([d["score"] for d in local]), rtol=1e-6)
    v2 = cohere.ClientV2(api_key="unused", base_url=url)
    answer2 = v2.rerank(model="thresher", query=query, documents=texts, top_n=2)
    assert [(r.index, r.relevance_score) for r in answer2.results] == [(r.index, r.relevance_score)
                                                                       for r in answer.results]


def test_limits_are_named_in_the_protocols_terms(default_compressor):
    with serve(default_compressor, max_passages=3, max_passage_chars=50) as (base, _):
        r = httpx.post(f"{base}/rerank", json={"query": QUERY, "texts": ["a"] * 4})
        assert r.status_code == 422 and "texts has 4 items; the limit is 3" in r.json()["error"], r.text
        r = httpx.post(f"{base}/v1/rerank", json={"query": QUERY, "documents": ["a", "b" * 51]})
        assert r.status_code == 422 and "documents[1] has 51 characters; the limit is 50" in r.json()["error"]
