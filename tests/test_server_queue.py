"""The server under load: bounded queues (503), deadlines (504), clients that leave, concurrency
that must equal one-at-a-time answers, and a draining shutdown. Shares test_server.py's helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest

import thresher
from thresher.client import Client, ServerError

from .conftest import load_jsonl
from .test_server import ThreadPost, blocker, engine, metric, running, serve, strip, wait_for


@pytest.fixture(scope="module")
def url(default_compressor):
    with serve(default_compressor, max_wait_ms=20, max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        yield base


def test_full_queue_answers_503_with_retry_after(default_compressor):
    with serve(default_compressor, max_batch_requests=1, max_queued_requests=1) as (base, _), httpx.Client(timeout=60) as c:
        with ThreadPost(f"{base}/v1/compress", blocker()) as busy:
            wait_for(lambda: running(base) == 1)
            with ThreadPost(f"{base}/v1/compress", {"question": "q", "passages": ["a."]}) as queued:
                wait_for(lambda: metric(base, "thresher_queue_size") == 1)  # the queue is now full
                r = c.post(f"{base}/v1/compress", json={"question": "q", "passages": ["b."]})
                assert r.status_code == 503 and r.json()["error_type"] == "overloaded"
                assert r.headers["retry-after"] == "1"
                with pytest.raises(ServerError) as e:
                    Client(base, max_retries=0).compress("q", ["c."])
                assert (e.value.status, e.value.error_type, e.value.retry_after) == (503, "overloaded", 1.0)
        assert busy.response.status_code == 200 and queued.response.status_code == 200


def test_queue_bound_in_time_answers_503(default_compressor):
    """Admission also stops when the queued work would take longer than max_queue_wait_s."""
    with serve(default_compressor, max_batch_requests=1, max_queue_wait_s=0.05) as (base, _):
        assert httpx.post(f"{base}/v1/compress", json=blocker(3), timeout=60).status_code == 200  # sets the pace
        with ThreadPost(f"{base}/v1/compress", blocker()) as busy:
            wait_for(lambda: running(base) == 2)
            with ThreadPost(f"{base}/v1/compress", blocker()) as queued:  # admitted: the queue was empty
                wait_for(lambda: metric(base, "thresher_queue_size") == 1)
                r = httpx.post(f"{base}/v1/compress", json={"question": "q", "passages": ["a."]})
                assert r.status_code == 503 and "max_queue_wait_s=0.05" in r.json()["error"], r.text
                assert int(r.headers["retry-after"]) >= 1
        assert busy.response.status_code == 200 and queued.response.status_code == 200


class GatedScorer:
    """The real scorer whose calls wait until the test opens the gate: a batch runs for exactly as
    long as the test needs, with no assumption about the machine's speed."""

    def __init__(self, scorer):
        self._scorer, self.entered, self.gate = scorer, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._scorer, name)

    def score(self, *args, **kwargs):
        self.entered.set()
        self.gate.wait(120)
        return self._scorer.score(*args, **kwargs)


def test_timeout_answers_504_and_drops_the_queued_request(default_compressor):
    gated = GatedScorer(default_compressor.scorer)
    with serve(thresher.Compressor(gated), max_batch_requests=1, request_timeout_s=0.5) as (base, _):
        # the first request's batch is held at the gate until the queued one has timed out
        with ThreadPost(f"{base}/v1/compress", {"question": "q", "passages": ["held."]}) as busy:
            assert gated.entered.wait(60)
            r = httpx.post(f"{base}/v1/compress", json={"question": "q", "passages": ["a."]}, timeout=60)
            gated.gate.set()
        assert busy.response.status_code == 504 and r.status_code == 504
        assert r.json()["error_type"] == "timeout" and "request_timeout_s" in r.json()["error"]
        wait_for(lambda: metric(base, "thresher_dropped_total", reason="timeout") == 1)
        assert metric(base, "thresher_batch_requests_count") == 1  # only the held request was computed


def test_disconnected_client_is_dropped_before_computing(default_compressor):
    with serve(default_compressor, max_batch_requests=1) as (base, _):
        host, port = base.removeprefix("http://").split(":")
        with ThreadPost(f"{base}/v1/compress", blocker()) as busy:
            wait_for(lambda: running(base) == 1)
            body = json.dumps({"question": "q", "passages": ["gone."]}).encode()
            with socket.create_connection((host, int(port))) as s:
                s.sendall(b"POST /v1/compress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                wait_for(lambda: metric(base, "thresher_queue_size") == 1)
            # the socket is closed while the request waits in the queue
        assert busy.response.status_code == 200
        wait_for(lambda: metric(base, "thresher_dropped_total", reason="disconnected") == 1)
        assert metric(base, "thresher_batch_requests_count") == 1


# -- concurrency ----------------------------------------------------------------------------------


def mixed_requests(n: int = 32) -> list[dict]:
    records = load_jsonl("hotpotqa_distractor", limit=n)
    options = [{}, {"threshold": 0.2}, {"keep_ratio": 0.4}, {"top_k": 3, "reorder": True}, {"reorder": True}]
    items = []
    for i, rec in enumerate(records):
        passages = [{"title": t, "text": "".join(s)} if i % 2 else "".join(s) for t, s in rec["context"]]
        items.append({"question": rec["question"], "passages": passages[: 1 + i % 6], **options[i % 5]})
    return items


@pytest.fixture(scope="module")
def mixed(default_compressor):
    """32 mixed requests and their one-at-a-time engine results."""
    items = mixed_requests()
    return items, [engine(default_compressor, [item])[0] for item in items]


async def post_all(base: str, items: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=180) as c:
        return await asyncio.gather(*(c.post(f"{base}/v1/compress", json=i) for i in items))


def test_concurrent_requests_match_one_at_a_time_exactly(url, mixed):
    """32 concurrent mixed requests, dynamically batched, give exactly the one-at-a-time answers
    (the engine packs each request into rows of its own, so batch-mates cannot change a bit)."""
    items, alone = mixed
    responses = asyncio.run(post_all(url, items))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    assert max(int(r.headers["x-batch-size"]) for r in responses) > 1, "no request was batched with another"
    batches: dict[str, set[int]] = {}
    for r in responses:
        batches.setdefault(r.headers["x-batch-id"], set()).add(int(r.headers["x-batch-slot"]))
    assert all(slots == set(range(len(slots))) for slots in batches.values())
    assert [strip(r.json()) for r in responses] == alone


def test_concurrent_requests_without_batching_match_one_at_a_time_exactly(default_compressor, mixed):
    items, alone = mixed
    with serve(default_compressor, max_batch_requests=1, max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        responses = asyncio.run(post_all(base, items))
    assert all(r.status_code == 200 and r.headers["x-batch-size"] == "1" for r in responses)
    assert [strip(r.json()) for r in responses] == alone


def test_shutdown_drains_in_flight_requests(default_compressor):
    items = [{"question": f"Question {i} about the town?", "passages": blocker(3)["passages"]} for i in range(5)]
    with serve(default_compressor, max_batch_requests=2) as (base, server):
        posts = [ThreadPost(f"{base}/v1/compress", blocker()).__enter__()]
        wait_for(lambda: running(base) == 1)
        posts += [ThreadPost(f"{base}/v1/compress", item).__enter__() for item in items]
        wait_for(lambda: metric(base, "thresher_queue_size") == 5)
        server.should_exit = True  # what SIGTERM does
        for p in posts:
            p.__exit__()
        assert [p.response.status_code for p in posts] == [200] * 6
        registry = server.config.app.state.service.metrics.registry  # the server is gone: read directly
        assert registry.get_sample_value("thresher_batch_requests_sum") == 6
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/health")
