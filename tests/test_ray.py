"""The batch job on Ray Data and the server on Ray Serve, on a local Ray with 2 CPUs: the same
bytes as the single-process job, a killed actor loses and duplicates nothing, and Serve answers
thresher's HTTP API."""

from __future__ import annotations

import os
import socket

import httpx
import pytest
import ray

from thresher.batch import run_job
from thresher.integrations.ray_data import run_ray_job

from .batch_data import hotpot_requests, write_jsonl


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def job_input(tmp_path_factory, default_compressor):
    """20 real requests and one bad line, with the single-process job's output and errors."""
    root = tmp_path_factory.mktemp("ray")
    src = write_jsonl(root / "in.jsonl", hotpot_requests(20), {7: b'{"id": "bad", "question": 3}'})
    run_job(default_compressor, str(src), root / "single.jsonl", batch_chars=20_000)
    return src, root


def test_ray_job_writes_the_single_process_bytes(local_ray, job_input):
    src, root = job_input
    summary = run_ray_job("default", str(src), root / "ray.jsonl", actors=2, lines_per_chunk=4)
    assert (summary.requests, summary.bad_lines) == (20, 1)
    assert (root / "ray.jsonl").read_bytes() == (root / "single.jsonl").read_bytes()
    assert (root / "ray.jsonl.errors.jsonl").read_bytes() == (root / "single.jsonl.errors.jsonl").read_bytes()


def crash_once_loader(marker: str, crash_on_call: int):
    """A loader whose Compressor kills its actor process (os._exit) on its `crash_on_call`-th
    batch, once per test (the marker file says it happened)."""

    class CrashOnce:
        def __init__(self):
            from thresher import Compressor
            from thresher.engine.runner import SessionConfig

            self.inner = Compressor.load("default", session_config=SessionConfig(intra_op_threads=1))
            self.limits = self.inner.limits
            self.calls = 0

        def compress_batch(self, items, **kwargs):
            self.calls += 1
            if self.calls == crash_on_call and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)
            return self.inner.compress_batch(items, **kwargs)

    return CrashOnce


def test_a_killed_actor_loses_and_duplicates_nothing(local_ray, job_input):
    src, root = job_input
    marker = root / "crashed"
    summary = run_ray_job("default", str(src), root / "killed.jsonl", actors=1, lines_per_chunk=4,
                          batch_requests=2, load=crash_once_loader(str(marker), crash_on_call=4))
    assert marker.exists()  # the actor died mid-job (on its 4th batch: line 7 or later)...
    assert summary.requests == 20  # ...and Ray restarted it and retried its chunk
    assert (root / "killed.jsonl").read_bytes() == (root / "single.jsonl").read_bytes()


def test_ray_job_resumes_after_the_last_written_line(local_ray, job_input):
    src, root = job_input
    lines = (root / "single.jsonl").read_bytes().splitlines(keepends=True)
    out = root / "resumed.jsonl"
    out.write_bytes(b"".join(lines[:12]) + lines[12][:40])
    summary = run_ray_job("default", str(src), out, actors=1, lines_per_chunk=8)
    assert summary.requests == 8 and out.read_bytes() == (root / "single.jsonl").read_bytes()


def test_cli_ray_actors_runs_the_ray_job(local_ray, job_input, capsys):
    import json

    from thresher.cli import main

    src, root = job_input
    out = root / "cli.jsonl"
    assert main(["batch", str(src), "-o", str(out), "--ray-actors", "1", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 20
    assert out.read_bytes() == (root / "single.jsonl").read_bytes()


def test_ray_job_refuses_parquet_input(local_ray, tmp_path):
    with pytest.raises(ValueError, match="reads a JSONL file"):
        run_ray_job("default", str(tmp_path / "in.parquet"), tmp_path / "out.jsonl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_thresher_http_api(local_ray, default_compressor):
    from ray import serve

    from thresher.integrations.ray_serve import run
    from thresher.server.settings import Settings

    url = run(Settings(model="default"), port=free_port(), replicas=1)
    try:
        (record, other) = hotpot_requests(2)
        body = {"question": record["question"], "passages": record["passages"]}
        with httpx.Client(base_url=url, timeout=120) as client:
            assert client.get("/health").json()["status"] == "ok"
            got = client.post("/v1/compress", json=body)
            pair = client.post("/v1/compress", json=[body, {"question": other["question"],
                                                          "passages": other["passages"]}])
            bad = client.post("/v1/compress", json={"question": "", "passages": ["x"]})
        want = default_compressor.compress(record["question"], record["passages"]).to_dict()
        assert got.status_code == 200 and "x-batch-size" in got.headers
        assert got.json()["passages"] == want["passages"]
        assert [r["passages"] for r in pair.json()][0] == want["passages"]
        assert bad.status_code == 422 and "question is empty" in bad.json()["error"]
    finally:
        serve.shutdown()
