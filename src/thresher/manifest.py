"""The model directory's manifest (thresher.json): what a model is and how to run it.

A model directory holds thresher.json, model.onnx and tokenizer.json. Every file listed under
"files" is verified against its sha256 when the directory is loaded, so a truncated copy or a
swapped file is refused instead of giving wrong scores.

Scores move with the onnxruntime version (kernels and int8 paths change between releases), so the
manifest records the version a model's threshold was chosen with; loading it under another
minor version logs a warning once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from thresher.manifest_schema import FORMAT_VERSION, KINDS, check_fields, confined  # noqa: F401 (re-exported)

MANIFEST = "thresher.json"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few KB; a larger one is not read into memory
# The onnxruntime releases the shipped thresholds and README figures were checked on; the same range
# as pyproject's core dependency (a test keeps the two equal). Below 1.24 the opset-23 graphs do not load.
ORT_SUPPORTED = ">=1.24,<1.33"

log = logging.getLogger(__name__)
_warned: set[tuple[str, str]] = set()


def onnxruntime_version() -> str:
    """The installed onnxruntime's version, read from its metadata (importing it costs ~0.1 s)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "absent"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def warn_if_runtime_differs(manifest: dict[str, Any], where: str | Path) -> None:
    """Log once per (model, version pair) when this onnxruntime's minor differs from the one the
    model's threshold was chosen with: keep decisions near the threshold may flip."""
    recorded = (manifest.get("onnxruntime") or {}).get("version")
    current = onnxruntime_version()
    if not recorded or _minor(recorded) == _minor(current) or (str(where), current) in _warned:
        return
    _warned.add((str(where), current))
    log.warning("%s was calibrated on onnxruntime %s (supported %s); this is onnxruntime %s, so its scores "
                "may shift slightly and sentences near the threshold may flip", where, recorded,
                manifest["onnxruntime"].get("supported", ORT_SUPPORTED), current)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def content_digest(folder: str | Path) -> str:
    """sha256 over every file's relative path and content: the same checkpoint copied elsewhere has
    the same digest, a changed config or weight file a new one (sizes and mtimes play no part)."""
    folder = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + sha256_file(path).encode())
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary folder beside `final`, renamed to `final` when the block succeeds and
    removed when it fails, so a crash never leaves a half-written folder that a later run trusts.
    If another process renamed its complete copy into place first, that copy wins."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def write_manifest(model_dir: Path, manifest: dict[str, Any]) -> None:
    """Hash every file named in manifest['files'] and write thresher.json atomically."""
    manifest = dict(manifest, format=FORMAT_VERSION)
    manifest.setdefault("onnxruntime", {"version": onnxruntime_version(), "supported": ORT_SUPPORTED})
    manifest["files"] = {name: sha256_file(model_dir / name) for name in manifest["files"]}
    write_atomic(model_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())


def read_manifest(model_dir: str | Path, verify: bool = True) -> dict[str, Any]:
    """Read and check thresher.json (every field, see manifest_schema) and the files it lists;
    raises ValueError naming what is wrong."""
    model_dir = Path(model_dir)
    path = model_dir / MANIFEST
    if not path.is_file():
        raise ValueError(f"{model_dir} is not a thresher model directory (no {MANIFEST})")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path} is over {MAX_MANIFEST_BYTES:,} bytes; it is not a thresher manifest")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a thresher manifest") from None
    check_fields(manifest, str(path))
    for name, digest in manifest["files"].items():
        f = confined(model_dir, name)
        if not f.is_file():
            raise ValueError(f"{model_dir} lacks {name}, which {MANIFEST} lists")
        if verify and sha256_file(f) != digest:
            raise ValueError(f"{f} does not match the sha256 in {MANIFEST}; re-export the model")
    warn_if_runtime_differs(manifest, model_dir)
    return manifest
