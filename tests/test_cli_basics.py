"""CLI basics a new user meets first: --version, help on every option, -v after the subcommand,
--output context, serve --port 0, cache list|clear, explicit data folders, and no torch at start-up."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys

import httpx
import pytest

import thresher
from thresher.cli import build_parser

from .conftest import HAMLET_PASSAGES


def run(args: list[str], env: dict | None = None, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "thresher.cli", *args], input=stdin, capture_output=True,
                          timeout=600, env={**os.environ, **(env or {})})


def walk(parser: argparse.ArgumentParser, path: str = "thresher"):
    """(command path, parser) for the parser and every nested subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{path} {name}")


def test_every_option_has_help_text():
    missing = [f"{path} {action.option_strings or action.dest}"
               for path, parser in walk(build_parser()) for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not action.help]
    assert missing == []


def test_version_prints_the_package_version():
    out = run(["--version"])
    assert out.returncode == 0 and out.stdout.decode().strip() == f"thresher {thresher.__version__}"


@pytest.mark.parametrize("argv", [["--help"], ["compress", "--help"], ["train", "--help"], ["serve", "--help"]])
def test_help_imports_neither_torch_nor_the_server_stack(argv):
    code = ("import sys\nfrom thresher.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'fastapi', 'uvicorn', 'sklearn') if m in sys.modules)\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert "HEAVY []" in out.stdout.decode(), out.stdout.decode()[-300:]


@pytest.fixture(scope="module")
def passages_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("basics") / "passages.json"
    path.write_text(json.dumps(HAMLET_PASSAGES), encoding="utf-8")
    return path


def test_compress_imports_no_torch_and_context_output_is_the_pruned_text(passages_file):
    code = ("import sys\nfrom thresher.cli import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write(f'TORCH {\"torch\" in sys.modules} RC {rc}')")
    args = ["compress", "-q", "Who wrote Hamlet?", str(passages_file), "--output", "context", "--threshold", "0.2"]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=600)
    assert "TORCH False RC 0" in out.stderr.decode(), out.stderr.decode()[-2000:]
    result = thresher.Compressor.load("default").compress(
        "Who wrote Hamlet?", json.loads(passages_file.read_text(encoding="utf-8")), threshold=0.2)
    expected = "\n\n".join(t for t in result.pruned_passages if t.strip())
    assert "Shakespeare" in expected and "Seine" not in expected
    assert out.stdout.decode() == expected + "\n"


def test_verbose_after_the_subcommand_raises_only_thresher_loggers(passages_file):
    code = ("import logging, sys\nfrom thresher.cli import main\nrc = main(sys.argv[1:])\n"
            "print(logging.getLogger('thresher').level, logging.getLogger().level, "
            "logging.getLogger('transformers').getEffectiveLevel(), rc)")
    args = ["compress", "-q", "Who wrote Hamlet?", str(passages_file), "-o", "json", "-v"]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr.decode()
    last = out.stdout.decode().strip().splitlines()[-1]
    assert last.split() == [str(logging.INFO), str(logging.WARNING), str(logging.WARNING), "0"]


def test_serve_port_zero_prints_the_bound_port(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "thresher.cli", "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the server listens (or exits)
        found = re.search(r"on http://([\d.]+):(\d+)$", line.strip())
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(found.group(2))
        assert port != 0
        r = httpx.post(f"http://{found.group(1)}:{port}/v1/compress",
                       json={"question": "Who wrote Hamlet?", "passages": ["Hamlet was written by Shakespeare."]},
                       timeout=120)
        assert r.status_code == 200 and r.json()["passages"][0]["sentences"]
    finally:
        proc.terminate()
        proc.wait(60)


def test_cache_list_and_clear(tmp_path):
    env = {"THRESHER_HOME": str(tmp_path)}
    entry = tmp_path / "models" / "ckpt-0123-0.1.0"
    entry.mkdir(parents=True)
    (entry / "thresher.json").write_text('{"name": "tiny"}')
    (entry / "model.onnx").write_bytes(b"x" * 2_000_000)
    out = run(["cache", "list"], env)
    assert out.returncode == 0 and str(tmp_path) in out.stdout.decode()
    assert re.search(r"ckpt-0123-0\.1\.0\s+2\.0 MB\s+tiny", out.stdout.decode())
    out = run(["cache", "clear", "nonexistent"], env)
    assert out.returncode == 2 and "nonexistent" in out.stderr.decode() and entry.is_dir()
    out = run(["cache", "clear"], env)
    assert out.returncode == 0 and "removed 1 model(s), 2.0 MB" in out.stdout.decode()
    assert not entry.exists()


def test_cache_defaults_to_the_platform_cache_folder(monkeypatch):
    import platformdirs

    from thresher.cache import cache_home

    monkeypatch.delenv("THRESHER_HOME", raising=False)
    assert str(cache_home()) == platformdirs.user_cache_dir("thresher", appauthor=False)
    monkeypatch.setenv("THRESHER_HOME", "/tmp/elsewhere")
    assert str(cache_home()) == "/tmp/elsewhere"


@pytest.mark.parametrize("argv,names", [
    (["train", "--out", "run"], "--data-dir"),
    (["budget", "eval"], "--data"),
])
def test_data_commands_need_an_explicit_data_folder(argv, names, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "THRESHER_DATA"}
    out = subprocess.run([sys.executable, "-m", "thresher.cli", *argv], capture_output=True, timeout=600,
                         env=env, cwd=tmp_path)
    err = out.stderr.decode()
    assert out.returncode == 2 and names in err and "THRESHER_DATA" in err, err[-1500:]
    out = run([*argv, *(["--data-dir"] if names == "--data-dir" else ["--data"]), str(tmp_path / "nope")])
    assert out.returncode == 2 and "nope" in out.stderr.decode() and "is not a folder" in out.stderr.decode()


def test_bench_outside_a_checkout_says_where_benchmarks_live(tmp_path):
    out = subprocess.run([sys.executable, "-m", "thresher.cli", "bench"], capture_output=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 2 and "--dir" in out.stderr.decode() and "checkout" in out.stderr.decode()
