"""The HTTP service, started for real (uvicorn on an ephemeral loopback port) with the default model."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from contextlib import contextmanager

import httpx
import pytest

from thresher.client import Client, ServerError
from thresher.server.cli import build_server
from thresher.server.errors import ERRORS
from thresher.server.settings import Settings, add_arguments, from_args, settings_table

HAMLET = ["Hamlet is a tragedy. It was written by William Shakespeare around 1600.",
          {"title": "Cats", "text": "Cats sleep most of the day. They are hunters."}]


@contextmanager
def serve(compressor, **settings):
    """A real server in a thread; yields (base_url, uvicorn.Server). Shuts down gracefully."""
    server = build_server(Settings(port=0, **settings), compressor)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(60)


@pytest.fixture(scope="module")
def compressor(default_compressor):
    return default_compressor


@pytest.fixture(scope="module")
def url(compressor):
    # generous time bounds: the shared CI machine may be slow, and 503s here would be noise
    with serve(compressor, max_wait_ms=20, max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        yield base


@pytest.fixture(scope="module")
def limited(compressor):
    """Small limits and a bearer token."""
    with serve(compressor, api_key="s3cret", max_body_bytes=2_000, max_passages=3, max_passage_chars=200,
               max_question_chars=50, max_client_batch_size=2) as (base, _):
        yield base


def engine(compressor, items: list[dict]) -> list[dict]:
    """What the engine gives for these requests computed as one batch, timings removed."""
    requests = [compressor.validate(i["question"], i["passages"],
                                    **{k: v for k, v in i.items() if k not in ("question", "passages")})
                for i in items]
    return [strip(r.to_dict()) for r in compressor.compress_validated(requests)]


def strip(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "timings_ms"}


def metric(base: str, name: str, **labels) -> float:
    text = httpx.get(f"{base}/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{re.escape(name)}{re.escape('{' + want + '}') if want else ''} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def running(base: str) -> float:
    """Batches started so far."""
    return metric(base, "thresher_batch_requests_count")


def blocker(n_passages: int = 30) -> dict:
    """A request that keeps the model busy for about a second on 2 CPU cores."""
    text = " ".join(f"Sentence {i} describes the history of a small town in the north." for i in range(20))
    return {"question": "Which town is in the north?", "passages": [text] * n_passages}


# -- schema round trips ---------------------------------------------------------------------------


def test_compress_round_trip(url, compressor):
    item = {"question": "Who wrote Hamlet?", "passages": HAMLET}
    r = httpx.post(f"{url}/v1/compress", json=item)
    assert r.status_code == 200, r.text
    body = r.json()
    assert strip(body) == engine(compressor, [item])[0]
    assert body["passages"][1]["title"] == "Cats"
    assert {"queue", "run", "total"} <= set(body["timings_ms"])
    assert r.headers["x-batch-size"] == "1" and r.headers["x-batch-slot"] == "0"
    for h in ("x-queue-time", "x-inference-time", "x-total-time"):
        assert float(r.headers[h]) >= 0


def test_compress_list_body_is_one_batch(url, compressor):
    items = [{"question": "Who wrote Hamlet?", "passages": HAMLET, "threshold": 0.1},
             {"question": "What do cats do?", "passages": HAMLET, "keep_ratio": 0.5},
             {"question": "Who wrote Hamlet?", "passages": HAMLET, "top_k": 1, "reorder": True},
             {"question": "Who wrote Hamlet?", "passages": HAMLET, "threshold": 0.0, "passage_threshold": 0.5}]
    r = httpx.post(f"{url}/v1/compress", json=items)
    assert r.status_code == 200, r.text
    assert [strip(b) for b in r.json()] == engine(compressor, items)
    assert len(set(r.headers["x-batch-id"].split(","))) == 1
    assert r.headers["x-batch-slot"] == "0,1,2,3"
    cut = r.json()[3]["passages"]  # the passage cut reaches the engine: below it, nothing is kept
    assert any(p["rerank_score"] < 0.5 for p in cut) and any(p["rerank_score"] >= 0.5 for p in cut)
    assert all((p["pruned_text"] == "") == (p["rerank_score"] < 0.5) for p in cut)


def test_rerank_tei_shape(url, default_compressor):
    texts = ["Cats sleep a lot.", "Shakespeare wrote Hamlet.", "Paris is in France."]
    ranked = Client(url).rerank("Who wrote Hamlet?", texts, return_text=True, raw_scores=True)
    expected = default_compressor.rank("Who wrote Hamlet?", texts, return_documents=True)
    assert ranked == [{"index": e["corpus_id"], "score": e["score"], "text": e["text"]} for e in expected]
    assert ranked[0]["index"] == 1
    assert "text" not in Client(url).rerank("Who wrote Hamlet?", texts)[0]


def test_client_and_health(url, compressor):
    client = Client(url)
    health = client.health()
    assert {k: health[k] for k in ("status", "model", "kind")} == {
        "status": "ok", "model": compressor.model, "kind": compressor.kind}
    assert health["queued"] >= 0 and health["last_success_s"] >= 0
    one = client.compress("Who wrote Hamlet?", HAMLET, threshold=0.2).to_dict()
    assert strip(one) == engine(compressor, [{"question": "Who wrote Hamlet?", "passages": HAMLET,
                                          "threshold": 0.2}])[0]
    both = client.compress_batch([{"question": "Who wrote Hamlet?", "passages": HAMLET}] * 2)
    assert len(both) == 2 and both[0].passages == both[1].passages
    with pytest.raises(ServerError) as e:
        client.compress("Who?", HAMLET, keep_ratio=2)
    assert (e.value.status, e.value.error_type) == (422, "validation") and "keep_ratio" in e.value.message


def test_metrics_exposed(url):
    httpx.post(f"{url}/v1/compress", json={"question": "Who wrote Hamlet?", "passages": HAMLET})
    httpx.post(f"{url}/v1/compress", content=b"{")
    text = httpx.get(f"{url}/metrics").text
    for name in ("thresher_requests_total", "thresher_request_duration_seconds_bucket", "thresher_queue_size",
                 "thresher_batch_requests_bucket", "thresher_batch_tokens_bucket",
                 'thresher_stage_duration_seconds_bucket{le="0.0001",stage="run"}',
                 'thresher_stage_duration_seconds_count{stage="queue"}'):
        assert name in text, name
    assert metric(url, "thresher_requests_total", route="/v1/compress", status="200") >= 1
    assert metric(url, "thresher_request_failure_total", error_type="malformed") >= 1


def test_openapi_statuses_come_from_the_error_table(url):
    doc = httpx.get(f"{url}/openapi.json").json()
    compress = doc["paths"]["/v1/compress"]["post"]
    assert {int(s) for s in compress["responses"]} == {200, 400, 401, 413, 422, 500, 503, 504}
    assert "requestBody" in compress
    for path, methods in doc["paths"].items():
        for op in methods.values():
            for status, response in op["responses"].items():
                if status != "200":
                    kinds = re.findall(r"`(\w+)`:", response["description"])
                    assert kinds and all(ERRORS[k].status == int(status) for k in kinds), (path, status)


# -- error paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body, status, kind, needle", [
    (b"{", 400, "malformed", "not valid JSON"),
    (b"", 400, "malformed", "empty"),
    (b'{"question": "q", "passages": ["a"]', 400, "malformed", "not valid JSON"),
    (b"\xff\xfe\x00", 400, "malformed", "not valid"),
    (b"3", 422, "validation", "JSON object"),
    (b"[]", 422, "validation", "max_client_batch_size"),
    (b'{"question": "q"}', 422, "validation", "'passages' is missing"),
    (b'{"question": "q", "passages": [], "bogus": 1}', 422, "validation", "bogus"),
    (b'{"question": "", "passages": ["a"]}', 422, "validation", "question is empty"),
    (b'{"question": "q", "passages": [1]}', 422, "validation", "passages[0]"),
    (b'{"question": "q", "passages": ["a"], "threshold": "high"}', 422, "validation", "threshold"),
    (b'[{"question": "q", "passages": ["a"]}, {"question": "q", "passages": "a"}]', 422, "validation", "[1]"),
])
def test_bad_bodies(url, body, status, kind, needle):
    r = httpx.post(f"{url}/v1/compress", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["error_type"] == kind and needle in r.json()["error"]


def test_rerank_bad_bodies(url):
    for body, needle in [({"query": "q"}, "texts"), ({"query": "q", "texts": [1]}, "texts"),
                         ({"query": "q", "texts": ["a"], "truncate": 1}, "truncate"),
                         ({"query": "", "texts": ["a"]}, "query is empty"), ([1], "JSON object")]:
        r = httpx.post(f"{url}/rerank", json=body)
        assert r.status_code == 422 and needle in r.json()["error"], (body, r.text)


def test_unknown_route_and_method(url):
    assert httpx.get(f"{url}/v2/nothing").json()["error_type"] == "not_found"
    r = httpx.get(f"{url}/v1/compress")
    assert r.status_code == 405 and r.json()["error_type"] == "method_not_allowed"


AUTH = {"Authorization": "Bearer s3cret"}


def test_auth(limited):
    ok = {"question": "Who?", "passages": ["Shakespeare wrote Hamlet."]}
    assert httpx.post(f"{limited}/v1/compress", json=ok).status_code == 401
    r = httpx.post(f"{limited}/v1/compress", json=ok, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert httpx.post(f"{limited}/rerank", json={"query": "q", "texts": ["a"]}).status_code == 401
    assert httpx.post(f"{limited}/v1/rerank", json={"query": "q", "documents": ["a"]}).status_code == 401
    assert httpx.post(f"{limited}/embed", json={"inputs": "a"}).status_code == 401
    assert httpx.post(f"{limited}/v1/compress", json=ok, headers=AUTH).status_code == 200
    assert Client(limited, api_key="s3cret").compress("Who?", ["Shakespeare wrote Hamlet."]).passages
    assert httpx.get(f"{limited}/health").status_code == 200  # probes stay open


@pytest.mark.parametrize("item, needle", [
    ({"question": "q", "passages": ["a"] * 4}, "passages has 4 items; the limit is 3"),
    ({"question": "q", "passages": ["a" * 201]}, "passages[0] has 201 characters; the limit is 200"),
    ({"question": "q" * 51, "passages": ["a"]}, "question has 51 characters"),
    ([{"question": "q", "passages": ["a"]}] * 3, "the body lists 3 requests; send 1 to 2"),
])
def test_limits(limited, item, needle):
    r = httpx.post(f"{limited}/v1/compress", json=item, headers=AUTH)
    assert r.status_code == 422 and needle in r.json()["error"], r.text


def test_body_too_large(limited):
    big = json.dumps({"question": "q", "passages": ["a" * 100] * 30}).encode()
    r = httpx.post(f"{limited}/v1/compress", content=big, headers=AUTH)
    assert r.status_code == 413 and r.json()["error_type"] == "payload_too_large"
    # chunked (no Content-Length): caught while reading
    r = httpx.post(f"{limited}/v1/compress", content=iter([big[:1500], big[1500:]]), headers=AUTH)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]


# -- settings and CLI -----------------------------------------------------------------------------


def test_settings_from_env_flags_and_validation():
    s = Settings.from_env({"THRESHER_MAX_BATCH_TOKENS": "123", "THRESHER_MAX_WAIT_MS": "0.5",
                           "THRESHER_API_KEY": "k"})
    assert (s.max_batch_tokens, s.max_wait_ms, s.api_key, s.host) == (123, 0.5, "k", "127.0.0.1")
    with pytest.raises(ValueError, match="THRESHER_PORT='http' is not a valid int"):
        Settings.from_env({"THRESHER_PORT": "http"})
    with pytest.raises(ValueError, match="max_batch_requests must be an int >= 1"):
        Settings(max_batch_requests=0)
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_args(parser.parse_args(["--max-batch-requests", "4", "--port", "0"])).max_batch_requests == 4
    assert "`THRESHER_MAX_QUEUED_REQUESTS`" in settings_table()
    assert s.limits.max_passages == 256


def test_readme_tables_are_the_code_tables():
    from pathlib import Path

    from thresher.server.errors import error_table

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert settings_table() in readme and error_table() in readme


def test_serve_subcommand_is_registered():
    from thresher.cli import build_parser

    args = build_parser().parse_args(["serve", "--port", "9", "--max-wait-ms", "1"])
    assert args.func.__module__ == "thresher.server.cli" and args.port == 9 and args.max_wait_ms == 1.0


def test_load_generator_client_reads_every_answer_on_one_connection(url):
    """benchmarks/load.py drives the server with its own lean HTTP/1.1 client (httpx cost the
    2-core machine most of a core at 400 req/s); it must read 200s, 4xx bodies and keep-alive
    the same way a real client does."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "load.py"
    spec = importlib.util.spec_from_file_location("thresher_load_benchmark", path)
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    host, port = url.removeprefix("http://").split(":")

    async def run() -> tuple[list[int], int]:
        client = load.LeanClient(host, int(port))
        good = json.dumps({"question": "Who wrote Hamlet?", "passages": HAMLET}).encode()
        codes = [await client.post("/v1/compress", body) for body in
                 (good, b"{not json", json.dumps({"question": "q"}).encode(), good)]
        client.close()
        return codes, client.opened

    codes, opened = asyncio.run(run())
    assert codes == [200, 400, 422, 200] and opened == 1


# -- helpers --------------------------------------------------------------------------------------


class ThreadPost:
    """POST in a background thread: `with ThreadPost(url, body) as p: ...` then p.response."""

    def __init__(self, url: str, body):
        self.response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._post, args=(url, body), daemon=True)

    def _post(self, url, body) -> None:
        self.response = httpx.post(url, json=body, timeout=120)

    def __enter__(self) -> ThreadPost:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join(120)


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
