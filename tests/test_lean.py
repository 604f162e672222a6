"""A user's install: the wheel built from this checkout, in a fresh virtualenv holding only the core
dependencies (and what they need), no torch. The CLI and the API must work on first use, from a
folder outside the checkout.

The core dependencies are not downloaded: their installed copies in this environment are linked into
the new venv's site-packages (pip check then confirms the set is complete), so the test runs offline.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import thresher

from .conftest import HAMLET_PASSAGES, HAMLET_QUESTION

ROOT = Path(__file__).resolve().parents[1]
QUESTION, PASSAGES = HAMLET_QUESTION, HAMLET_PASSAGES


def core_closure() -> dict[str, importlib.metadata.Distribution]:
    """pyproject's core dependencies and, recursively, what they require (extras left out)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    todo, seen = list(project["dependencies"]), {}
    while todo:
        req = Requirement(todo.pop())
        key = canonicalize_name(req.name)
        if key in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen[key] = importlib.metadata.distribution(req.name)
        todo.extend(seen[key].requires or [])
    return seen


def link_into(site: Path, dists) -> None:
    here = Path(sysconfig.get_paths()["purelib"])
    for dist in dists:
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            if (here / top).exists() and not (site / top).exists():
                (site / top).symlink_to(here / top)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


@pytest.fixture(scope="session")
def lean(tmp_path_factory) -> dict:
    """{python, thresher, cwd, env} of the lean venv, built once per session."""
    tmp = tmp_path_factory.mktemp("lean")
    out = run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-build-isolation", "--no-deps", "-q",
               "-w", str(tmp / "dist")])
    assert out.returncode == 0, out.stderr[-3000:]
    wheel = next((tmp / "dist").glob("thresher-*.whl"))
    out = run([sys.executable, "-m", "venv", str(tmp / "venv")])
    assert out.returncode == 0, out.stderr
    python = tmp / "venv" / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = core_closure()
    assert "torch" not in deps and "transformers" not in deps, sorted(deps)
    link_into(site, deps.values())
    out = run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)])
    assert out.returncode == 0, out.stderr[-3000:]
    out = run([str(python), "-m", "pip", "check"])
    assert out.returncode == 0, out.stdout + out.stderr  # the linked set satisfies every requirement
    (tmp / "user").mkdir()
    (tmp / "user" / "passages.json").write_text(json.dumps(PASSAGES), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"THRESHER_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1"}
    return {"python": str(python), "thresher": str(tmp / "venv" / "bin" / "thresher"), "cwd": tmp / "user",
            "env": env, "home": tmp / "home"}


def test_the_lean_venv_has_no_torch(lean):
    out = run([lean["python"], "-c", "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('transformers'))"],
              cwd=lean["cwd"], env=lean["env"])
    assert out.stdout.split() == ["None", "None"], out.stderr


def test_cli_help_version_and_compress_work_on_first_use(lean):
    for argv in (["--help"], ["compress", "--help"], ["--version"]):
        out = run([lean["thresher"], *argv], cwd=lean["cwd"], env=lean["env"])
        assert out.returncode == 0, (argv, out.stderr[-2000:])
    for options in ([], ["--threshold", "0.2"]):  # the default operating point, then a plain threshold
        out = run([lean["thresher"], "compress", "-q", QUESTION, "passages.json", "--output", "context", *options],
                  cwd=lean["cwd"], env=lean["env"])
        assert out.returncode == 0, out.stderr[-2000:]
        expected = thresher.Compressor.load("default").compress(
            QUESTION, PASSAGES, threshold=float(options[1]) if options else None).pruned_passages
        assert out.stdout == "\n\n".join(t for t in expected if t.strip()) + "\n"
        assert "Shakespeare" in out.stdout
    assert "Seine" not in out.stdout  # at 0.2 the Paris passage (best sentence 0.045) is dropped
    assert not (lean["home"] / "models").exists()  # loaded from the package, nothing exported


def test_api_scores_match_this_environment_without_importing_torch(lean):
    code = ("import json, sys, thresher\n"
            f"r = thresher.Compressor.load('default').compress({QUESTION!r}, {PASSAGES!r})\n"
            "print(json.dumps([s.score for p in r.passages for s in p.sentences]))\n"
            "print('torch' in sys.modules, thresher.__file__)")
    out = run([lean["python"], "-c", code], cwd=lean["cwd"], env=lean["env"])
    assert out.returncode == 0, out.stderr[-2000:]
    scores_line, modules_line = out.stdout.strip().splitlines()[-2:]
    here = thresher.Compressor.load("default").compress(QUESTION, PASSAGES)
    assert json.loads(scores_line) == pytest.approx([s.score for p in here.passages for s in p.sentences], abs=1e-6)
    torch_loaded, where = modules_line.split(maxsplit=1)
    assert torch_loaded == "False" and "site-packages" in where and str(ROOT) not in where


def test_models_that_need_an_export_say_how_to_get_it(lean):
    out = run([lean["thresher"], "compress", "-q", QUESTION, "passages.json", "-m", "minilm-cosine"],
              cwd=lean["cwd"], env=lean["env"])
    assert out.returncode == 2 and "pip install 'thresher[export]'" in out.stderr, out.stderr[-2000:]
