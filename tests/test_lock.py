"""The committed lock: compiled from requirements/dev.in as it is now, every pin hashed, every input
satisfied; pyproject's core ranges hold the locked versions; requirements/lowest.txt sits on the floors."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"


def requirement_lines(path: Path) -> list[str]:
    """Logical lines (backslash continuations joined), comments and blanks dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    lines = (line.split("#")[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def pins(path: Path) -> dict[str, Version]:
    out = {}
    for line in requirement_lines(path):
        name, version = line.split()[0].split("==")
        out[canonicalize_name(name)] = Version(version)
    return out


def core_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_lock_was_compiled_from_the_current_input():
    digest = hashlib.sha256((REQ / "dev.in").read_bytes()).hexdigest()
    assert digest in (REQ / "dev.lock").read_text(encoding="utf-8").splitlines()[0], "run `make lock`"


def test_every_locked_pin_is_exact_and_hashed():
    for path in (REQ / "dev.lock", REQ / "nodeps.lock"):
        for line in requirement_lines(path):
            assert re.match(r"^[A-Za-z0-9_.\-]+==\S+ ", line) and "--hash=sha256:" in line, line


def test_lock_satisfies_every_input_and_the_core_ranges():
    locked = pins(REQ / "dev.lock") | pins(REQ / "nodeps.lock")
    wanted = [Requirement(line) for path in (REQ / "dev.in", REQ / "nodeps.in") for line in requirement_lines(path)]
    for req in [*wanted, *core_requirements()]:
        version = locked.get(canonicalize_name(req.name))
        assert version is not None, f"{req.name} is not in the lock"
        assert req.specifier.contains(version, prereleases=True), f"{req} but the lock has {version}"


def test_lowest_pins_sit_on_the_pyproject_floors():
    lowest = pins(REQ / "lowest.txt")
    for req in core_requirements():
        floor = next(Version(s.version) for s in req.specifier if s.operator == ">=")
        pinned = lowest[canonicalize_name(req.name)]
        # the floor's release (1.24) is the pin's prefix (1.24.1: 1.24.0 was never published)
        assert pinned.release[:len(floor.release)] == floor.release and req.specifier.contains(pinned), req
