"""The package's shape: imports point down the layers, and no modules import each other in a circle.

Layers, bottom to top (ARCHITECTURE in the README): the native core, kernels, the manifest and
the cache; the engine (with the scorer contract, the runners and the tree mask); scorers; export;
the catalogue (named models, resolution, backends); the Compressor; the other front doors.
A module may import its own layer or any below it. Only the AST is read: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import thresher

PACKAGE = Path(thresher.__file__).parent
LAYERS = [
    ("thresher._native", "thresher._lazy", "thresher.kernels", "thresher.manifest", "thresher.manifest_schema",
     "thresher.cache", "thresher.announce", "thresher.datadir"),
    ("thresher.engine",),
    ("thresher.scorers",),
    ("thresher.export",),
    ("thresher.catalogue", "thresher.backends"),
    ("thresher.compressor", "thresher.field_calls"),
    ("thresher.cli", "thresher.cache_cli", "thresher.client", "thresher.server", "thresher.chunking",
     "thresher.budget", "thresher.training", "thresher.integrations", "thresher.batch", "thresher.shipped",
     "thresher"),
]


def layer(module: str) -> int:
    for level, prefixes in enumerate(LAYERS):
        # "thresher" itself is the package's front door, not a prefix that catches every module
        if any(module == p or (p != "thresher" and module.startswith(p + ".")) for p in prefixes):
            return level
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, known: set[str]) -> set[str]:
    """thresher modules `path` imports, at module level or inside functions. `from thresher import
    __version__` reads the version, not the front door, and is not counted."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "thresher" and all(a.name == "__version__" for a in node.names):
                continue
            names = [f"{node.module}.{a.name}" for a in node.names]
            found.update(n if n in known else node.module for n in names)
    return {m for m in found if m == "thresher" or m.startswith("thresher.")}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, set(mods)) for m, p in mods.items()}


def test_every_import_points_down(graph):
    upward = [f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
              for m, targets in graph.items() for t in sorted(targets)
              if layer(t) > layer(m) and not m.startswith(t + ".")]
    assert not upward, "\n".join(upward)


def test_no_import_cycles(graph):
    # Depth-first search for a back edge; a package's __init__ importing its own modules is fine.
    edges = {m: {t for t in ts if t in graph and not t.startswith(m + ".") and not m.startswith(t + ".")}
             for m, ts in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                return [*stack[stack.index(t):], t]
            if t not in state and (cycle := visit(t)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (cycle := visit(m)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_check_sees_a_violation(tmp_path):
    """The rule can fail: an engine module importing the catalogue is upward."""
    bad = tmp_path / "bad.py"
    bad.write_text("from thresher.catalogue import resolve\n")
    found = imports(bad, set(modules()))
    assert found == {"thresher.catalogue"} and layer("thresher.catalogue") > layer("thresher.engine.batch")
