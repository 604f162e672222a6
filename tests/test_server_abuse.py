"""What one client can do to the service: nothing it sends gets a 500, hangs a worker, or costs
other clients their answers (health floods, deep JSON, huge numbers, stalled or abandoned bodies)."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from thresher.server.settings import Settings

from .test_server import metric, running, serve


def raw_post(base: str, body: bytes, declared: int, pause_s: float = 0.0, close: bool = False) -> bytes:
    """POST with a declared Content-Length, sending `body` (maybe less); returns what came back."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/compress HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer k\r\n"
                  + f"Content-Length: {declared}\r\n\r\n".encode() + body)
        if close:
            return b""
        time.sleep(pause_s)
        return s.recv(65536)


@pytest.fixture(scope="module")
def guarded(default_compressor):
    with serve(default_compressor, api_key="k", body_timeout_s=0.5, health_interval_s=3600,
               max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        yield base


AUTH = {"authorization": "Bearer k"}


@pytest.mark.parametrize("body, needle", [
    (b"[" * 100_000 + b"]" * 100_000, "nests JSON too deeply"),
    (b'{"question": "q", "passages": [], "top_k": ' + b"9" * 5000 + b"}", "refuses"),
])
def test_hostile_json_is_400(guarded, body, needle):
    r = httpx.post(f"{guarded}/v1/compress", content=body, headers=AUTH, timeout=30)
    assert r.status_code == 400 and r.json()["error_type"] == "malformed" and needle in r.json()["error"]


@pytest.mark.parametrize("threshold", ["1" + "0" * 400, "1e400", "-1e400"])
def test_unrepresentable_threshold_is_422(guarded, threshold):
    body = '{"question": "Who?", "passages": ["A sentence."], "threshold": ' + threshold + "}"
    r = httpx.post(f"{guarded}/v1/compress", content=body, headers=AUTH, timeout=30)
    assert r.status_code == 422 and "threshold" in r.json()["error"]


def test_health_flood_never_queues_work(guarded):
    """/health answers from state: 200 probes run no batch and do not slow real work."""
    batches = running(guarded)
    assert httpx.get(f"{guarded}/health").status_code == 200  # the first probe may run the model, off-queue
    with httpx.Client(timeout=30) as c:
        codes = [c.get(f"{guarded}/health").status_code for _ in range(200)]
        ok = c.post(f"{guarded}/v1/compress", json={"question": "Who?", "passages": ["It was Ann."]}, headers=AUTH)
    assert set(codes) == {200} and ok.status_code == 200
    assert running(guarded) == batches + 1  # only the compress request became a batch


def test_stalled_body_gets_408_and_frees_the_connection(guarded):
    reply = raw_post(guarded, b'{"question": ', declared=200, pause_s=1.5)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:80]
    assert b"body_timeout" in reply


def test_client_leaving_mid_body_is_not_an_error(guarded):
    before = metric(guarded, "thresher_requests_total", route="/v1/compress", status="500")
    for _ in range(5):
        raw_post(guarded, b'{"question": "half', declared=500, close=True)
    time.sleep(0.5)
    assert metric(guarded, "thresher_requests_total", route="/v1/compress", status="500") == before
    assert httpx.get(f"{guarded}/health").status_code == 200


def test_docs_can_be_turned_off(default_compressor):
    with serve(default_compressor, docs=False) as (base, _):
        assert [httpx.get(f"{base}{p}").status_code for p in ("/docs", "/redoc", "/openapi.json")] == [404] * 3
    with serve(default_compressor) as (base, _):
        assert httpx.get(f"{base}/openapi.json").status_code == 200


@pytest.mark.parametrize("env, match", [
    ({"THRESHER_MAX_WAIT_MS": "nan"}, "max_wait_ms must be a finite number"),
    ({"THRESHER_REQUEST_TIMEOUT_S": "inf"}, "request_timeout_s must be a finite number"),
    ({"THRESHER_DOCS": "maybe"}, "THRESHER_DOCS='maybe' is not a valid bool"),
    ({"THRESHER_BODY_TIMEOUT_S": "0"}, "body_timeout_s must be > 0"),
])
def test_bad_settings_are_refused(env, match):
    with pytest.raises(ValueError, match=match):
        Settings.from_env(env)
    assert Settings.from_env({"THRESHER_DOCS": "off"}).docs is False


def test_concurrent_health_probes_run_the_model_once(default_compressor):
    """With no batch yet, many simultaneous /health calls share one probe."""
    with serve(default_compressor, health_interval_s=3600) as (base, server):
        service = server.config.app.state.service
        calls = []
        original = service.compressor.compress

        def counting(*a, **k):
            calls.append(1)
            return original(*a, **k)

        service.compressor.compress = counting
        threads = [threading.Thread(target=lambda: httpx.get(f"{base}/health", timeout=60)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(calls) == 1
        assert json.loads(httpx.get(f"{base}/health").text)["status"] == "ok"
