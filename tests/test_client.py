"""thresher.client against a real server on loopback: keep-alive, retries that honour
Retry-After, the async variant, and answers parsed back into CompressionResult."""

import asyncio
import time

import pytest

from thresher.client import AsyncClient, Client, ServerError
from thresher.engine.result import CompressionResult

from .test_server import ThreadPost, blocker, metric, running, serve, wait_for

PASSAGES = [{"id": "h", "title": "Hamlet", "text": "Hamlet is a tragedy. It was written by William Shakespeare.",
             "metadata": {"page": 1}},
            "Paris is the capital of France.  It has many museums.\nThe Louvre is one."]


@pytest.fixture(scope="module")
def server(default_compressor):
    with serve(default_compressor, max_wait_ms=5, max_queue_wait_s=100, request_timeout_s=120) as (base, uv):
        yield base, uv


def test_results_are_compression_results(server, default_compressor):
    base, _ = server
    with Client(base) as client:
        got = client.compress("Who wrote Hamlet?", PASSAGES, reorder=True)
        want = default_compressor.compress("Who wrote Hamlet?", PASSAGES, reorder=True)
        assert isinstance(got, CompressionResult)
        # the whole result, byte-exact texts included, equals the local one (timings aside)
        assert got.passages == want.passages and got.compression_rate == want.compression_rate
        assert got.model == want.model and "queue" in got.timings_ms
        items = [("Who wrote Hamlet?", PASSAGES), {"question": "Where is the Louvre?", "passages": PASSAGES,
                                                   "keep_ratio": 0.5}] * 3
        batch = client.compress_batch(items, batch_size=4)  # two list bodies
        local = default_compressor.compress_batch(items)
        assert [b.passages for b in batch] == [r.passages for r in local]
        assert client.rerank("Who wrote Hamlet?", ["Paris is in France.", "Shakespeare wrote Hamlet."])[0]["index"] == 1
        assert client.info()["model_id"] == want.model
        with pytest.raises(ServerError) as e:
            client.compress("", PASSAGES)
        assert (e.value.status, e.value.error_type) == (422, "validation") and "question" in e.value.message


def test_keep_alive_reuses_one_connection(default_compressor):
    with serve(default_compressor) as (base, uv):
        with Client(base) as client:
            for _ in range(4):
                client.health()
                client.compress("Who wrote Hamlet?", PASSAGES)
            assert len(uv.server_state.connections) == 1 and uv.server_state.total_requests == 8
        wait_for(lambda: len(uv.server_state.connections) == 0)


def test_retries_honour_retry_after(default_compressor):
    with serve(default_compressor, max_batch_requests=1, max_queued_requests=1) as (base, _):
        with ThreadPost(f"{base}/v1/compress", blocker()) as busy:
            wait_for(lambda: running(base) == 1)
            with ThreadPost(f"{base}/v1/compress", {"question": "q", "passages": ["a."]}) as queued:
                wait_for(lambda: metric(base, "thresher_queue_size") == 1)  # full: the next one gets 503
                with Client(base, max_retries=0) as impatient, pytest.raises(ServerError) as e:
                    impatient.compress("q", ["c."])
                assert (e.value.status, e.value.retry_after) == (503, 1.0)
                refused = metric(base, "thresher_requests_total", route="/v1/compress", status="503")
                started = time.perf_counter()
                with Client(base, max_retries=20) as patient:
                    result = patient.compress("Who wrote Hamlet?", ["Shakespeare wrote Hamlet."])
                waited = time.perf_counter() - started
        assert busy.response.status_code == 200 and queued.response.status_code == 200
        retried = metric(base, "thresher_requests_total", route="/v1/compress", status="503") - refused
    assert "Shakespeare" in result.passages[0].pruned_text
    # every refused try was followed by the server's Retry-After (1 s) before the next one
    assert retried >= 1 and waited >= retried * 1.0


def test_connection_errors_are_retried_then_raised():
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    with Client(f"http://127.0.0.1:{port}", max_retries=2) as client, pytest.raises(ConnectionError):
        client.health()
    assert time.perf_counter() - started >= 0.25 + 0.5  # two backoffs: 0.25 s, 0.5 s
    with pytest.raises(ValueError, match="max_retries"):
        Client(max_retries=-1)


def test_async_client(server, default_compressor):
    base, _ = server

    async def main():
        async with AsyncClient(base) as client:
            one, many = await asyncio.gather(
                client.compress("Who wrote Hamlet?", PASSAGES),
                client.compress_batch([("Who wrote Hamlet?", PASSAGES)] * 5, batch_size=2))
            return one, many, await client.health(), await client.rerank("Who wrote Hamlet?", ["a.", "b."])

    one, many, health, ranked = asyncio.run(main())
    want = default_compressor.compress("Who wrote Hamlet?", PASSAGES)
    assert one.passages == want.passages and [m.passages for m in many] == [want.passages] * 5
    assert health["status"] == "ok" and sorted(r["index"] for r in ranked) == [0, 1]
