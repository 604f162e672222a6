"""benchmarks/report.py: plots and REPORT.md from the JSON results in benchmarks/out."""

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


def report(*args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / "report.py"), *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", ["quality-validation", "pruner_sweep", "load", "packer"])
def test_the_committed_results_are_there(name):
    data = json.loads((BENCH / "out" / f"{name}.json").read_text(encoding="utf-8"))
    cores = data["machine"].get("cores") or data["machine"]["cpus"]  # the key before 2026-12-01: cpus
    assert data["command"].startswith(".venv/bin/python benchmarks/") and cores >= 1


def test_report_plots_every_figure_with_its_provenance(tmp_path):
    report("--no-run", "--out", str(tmp_path))
    text = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    for png in ("quality.png", "latency.png", "load.png", "packer.png"):
        width, height = png_size(tmp_path / png)
        assert width >= 800 and height >= 400, (png, width, height)
        assert f"]({png})" in text
    for name in ("quality-validation", "pruner_sweep", "load", "packer"):
        data = json.loads((BENCH / "out" / f"{name}.json").read_text(encoding="utf-8"))
        cores = data["machine"].get("cores") or data["machine"]["cpus"]
        assert data["command"] in text and data["written"] in text and f"{cores} cores" in text
    quality = json.loads((BENCH / "out" / "quality-validation.json").read_text(encoding="utf-8"))
    assert f"recall {quality['chosen']['recall']:.3f} (default model)" in text
    assert f"the model's threshold {quality['model_threshold']:g} alone" in text
    sweep = json.loads((BENCH / "out" / "pruner_sweep.json").read_text(encoding="utf-8"))
    for row in sweep["rows"]:
        n = row["passages"]
        assert f"{n} passage{'s' if n > 1 else ''}: p50 {row['thresher_int8']['p50']:.1f} ms" in text


def test_missing_results_are_named_not_invented(tmp_path):
    results = tmp_path / "out"
    results.mkdir()
    shutil.copy(BENCH / "out" / "packer.json", results)
    report("--no-run", "--results", str(results), "--out", str(tmp_path / "report"))
    text = (tmp_path / "report" / "REPORT.md").read_text(encoding="utf-8")
    assert "](packer.png)" in text and png_size(tmp_path / "report" / "packer.png")
    for missing in ("quality-validation.json", "pruner_sweep.json", "load.json"):
        assert f"No `{missing}` in the results" in text
    assert not (tmp_path / "report" / "quality.png").exists()


def test_other_results_folders_are_never_filled_by_running_benchmarks(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "report.py"), "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--results other than benchmarks/out needs --no-run" in done.stderr
