"""The `thresher` command line: compress from files and stdin, errors as messages + exit 2."""

import json
import subprocess
import sys

import pytest

from thresher.cli import main, read_passages


def run_cli(args, stdin=b""):
    return subprocess.run([sys.executable, "-m", "thresher.cli", *args], input=stdin, capture_output=True,
                          timeout=600)


@pytest.fixture(scope="module")
def passages_file(tmp_path_factory, default_compressor):  # the fixture exports the default once
    path = tmp_path_factory.mktemp("cli") / "passages.json"
    path.write_text(json.dumps([
        {"title": "Hamlet", "text": "Hamlet is a tragedy. It was written by William Shakespeare."},
        "Paris is the capital of France. It has many museums.",
    ]), encoding="utf-8")
    return path


def test_compress_json_output(passages_file):
    out = run_cli(["compress", "-q", "Who wrote Hamlet?", str(passages_file), "-o", "json"])
    assert out.returncode == 0, out.stderr.decode()
    result = json.loads(out.stdout)
    assert result["passages"][0]["title"] == "Hamlet"
    assert "Shakespeare" in result["passages"][0]["pruned_text"]
    assert 0.0 <= result["compression_rate"] <= 1.0


def test_compress_readable_from_stdin_jsonl():
    lines = b'"Hamlet is a tragedy. It was written by William Shakespeare."\n{"text": "Paris is in France."}\n'
    out = run_cli(["compress", "-q", "Who wrote Hamlet?", "-", "--format", "jsonl"], stdin=lines)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    assert "+" in text and "compression rate" in text and "Shakespeare" in text


def test_text_format_splits_on_blank_lines(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("First passage. Two sentences.\n\nSecond passage.\n", encoding="utf-8")
    assert read_passages(str(path), "auto") == ["First passage. Two sentences.", "Second passage."]


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"\xff\xfe not utf8", "bad.json", "not valid UTF-8"),
        (b"[1, 2", "bad.json", "not valid JSON"),
        (b'{"text": "a"}\n{broken\n', "bad.jsonl", "line 2 is not valid JSON"),
        (b'{"a": 1}', "obj.json", "expected a JSON list"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path, capsys, content, name, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["compress", "-q", "q", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_bad_option_exit_code(passages_file, capsys):
    assert main(["compress", "-q", "q", str(passages_file), "--keep-ratio", "2"]) == 2
    assert "keep_ratio must be in (0, 1]" in capsys.readouterr().err


def test_export_refuses_unknown_checkpoint(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "resnet"}')
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "not a checkpoint thresher can export" in capsys.readouterr().err


def test_every_benchmark_that_bench_runs_takes_quick():
    """`thresher bench --quick` passes --quick to each script; a script without it would stop the
    suite with an argparse error. Each script's own parser is run with --quick (main() is patched
    so that nothing is measured)."""
    import argparse
    import runpy
    from pathlib import Path
    from unittest import mock

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    scripts = sorted(p for p in root.glob("*.py") if not p.name.startswith(("_", "common", "gpu_")))
    assert scripts
    real = argparse.ArgumentParser.parse_args
    for script in scripts:
        parsed = []

        def stop_after_parse(self, args=None, namespace=None, parsed=parsed):
            parsed.append(real(self, args, namespace))
            raise SystemExit(0)

        with mock.patch.object(argparse.ArgumentParser, "parse_args", stop_after_parse), \
                mock.patch.object(sys, "argv", [str(script), "--quick"]), pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(script), run_name="__main__")
        assert exit_.value.code == 0 and parsed and parsed[0].quick, script.name
