"""A short seeded run of each fuzz target (fuzz/): atheris's coverage-guided search, and the
seeded replay that `make asan` uses. `make fuzz` runs the same targets for longer."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "fuzz" / "run.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    # libFuzzer writes crash/oom artifacts into the working directory: never the checkout
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, timeout=300,
                          cwd=tempfile.gettempdir())


@pytest.mark.parametrize("target, runs", [("segmenters", 1_500), ("validator", 4_000), ("packers", 4_000)])
def test_seeded_coverage_guided_run_finds_nothing(target, runs):
    # libFuzzer's RSS check reads the process's peak RSS, which a child forked from this (large)
    # pytest process inherits: the limit is raised so that only real growth would trip it.
    out = _run(target, f"-runs={runs}", "-seed=1", "-rss_limit_mb=16384")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"Done {runs} runs" in out.stderr


@pytest.mark.parametrize("target", ["packers", "validator"])
def test_seeded_replay_finds_nothing(target):
    out = _run(target, "--replay", "1000", "7")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "replay: 1000 inputs, no failure" in out.stdout


def test_a_failing_target_is_reported():
    # The harness really checks: a target that raises fails the run and shows the input.
    code = (f"import sys; sys.path.insert(0, {str(RUN.parent)!r})\n"
            "import run\n"
            "def boom(data):\n    raise AssertionError('planted')\n"
            "run.replay(boom, 5, 1)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "planted" in out.stderr and "input 0 (seed 1) failed" in out.stderr
