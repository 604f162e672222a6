"""What a valid thresher.json holds: every field checked, file names confined to the model folder.

A manifest is input like any other: a model directory may come from someone else. Each check
raises ValueError naming the field; none opens a listed file before its name is known to stay
inside the model directory, so an error never tells whether some outside file exists.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
KINDS = ("embed-sim", "encoder-pruner", "causal-yesno", "causal-eos")
REQUIRED_FILES = ("model.onnx", "tokenizer.json")  # every kind runs a graph on its tokenizer's ids
# Score scales (README): cosine for embed-sim, probabilities for the scoring kinds; causal-eos
# places chunk boundaries and keeps no sentences, so it has no threshold.
THRESHOLD_RANGE = {"embed-sim": (-1.0, 1.0), "encoder-pruner": (0.0, 1.0), "causal-yesno": (0.0, 1.0)}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_IDS = ("pad_id", "yes_id", "no_id", "eos_id")


def _finite(value: int | float) -> bool:
    """math.isfinite without the OverflowError of a huge JSON integer."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r:.80}")


def _str(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r:.80}")


def confined(model_dir: Path, name: object) -> Path:
    """The path of a listed file, refusing any name that could leave `model_dir`: absolute
    paths, '..', backslashes, NUL, and symbolic links that resolve outside it."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise ValueError(f"files lists {name!r:.80}, which is not a file name")
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"files lists {name!r:.80}: names must be relative paths inside the model "
                         "directory, without '..'")
    root = model_dir.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise ValueError(f"files lists {name!r:.80}, which leads outside the model directory "
                         "(a symbolic link); copy the file into the directory instead")
    return path


def check_calibration(calibration: Any, where: str) -> None:
    """`calibration`: {"sentence": [scale, shift], "rerank": [scale, shift]}, both optional; each
    maps a model output p (a probability) or z (a logit) to sigmoid(scale * logit + shift)."""
    if calibration is None:
        return
    if not isinstance(calibration, dict) or set(calibration) - {"sentence", "rerank"}:
        raise ValueError(f"{where}: calibration must be a mapping with 'sentence' and/or 'rerank', "
                         f"got {calibration!r:.80}")
    for key, pair in calibration.items():
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v) for v in pair)
                or pair[0] <= 0):
            raise ValueError(f"{where}: calibration.{key} must be [scale > 0, shift], finite numbers, "
                             f"got {pair!r:.80}")


def check_fields(manifest: Any, where: str) -> None:
    """Raise ValueError naming the first field of a decoded manifest that is missing or wrong."""
    if not isinstance(manifest, dict):
        raise ValueError(f"{where} must hold a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT_VERSION:
        raise ValueError(f"{where} has format {manifest.get('format')!r:.80}; this thresher reads {FORMAT_VERSION}")
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where} has kind {kind!r:.80}; known kinds: {list(KINDS)}")
    _str(f"{where}: name", manifest.get("name"))
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError(f"{where}: files must be a non-empty mapping of file name -> sha256; without it "
                         "nothing would be verified")
    for name in REQUIRED_FILES:
        if name not in files:
            raise ValueError(f"{where}: files does not list {name}, which every {kind} model needs")
    for name, digest in files.items():
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ValueError(f"{where}: files[{name!r:.80}] must be a sha256 (64 lower-case hex digits)")
    _int(f"{where}: max_length", manifest.get("max_length"), 1)
    if kind != "causal-eos" or "segmenter" in manifest:
        _str(f"{where}: segmenter", manifest.get("segmenter"))
    if kind in THRESHOLD_RANGE:
        threshold, (lo, hi) = manifest.get("threshold"), THRESHOLD_RANGE[kind]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
                _finite(threshold) and lo <= threshold <= hi):
            raise ValueError(f"{where}: threshold must be a finite number in [{lo}, {hi}] for {kind}, "
                             f"got {threshold!r:.80}")
    if kind in ("embed-sim", "encoder-pruner"):
        ids = manifest.get("special_ids")
        if not isinstance(ids, dict):
            raise ValueError(f"{where}: special_ids must be a mapping with cls, sep and pad")
        for key in ("cls", "sep", "pad"):
            _int(f"{where}: special_ids.{key}", ids.get(key), 0)
    for key in _IDS:
        if key in manifest:
            _int(f"{where}: {key}", manifest[key], 0)
    if kind == "encoder-pruner":
        check_calibration(manifest.get("calibration"), where)
        pt = manifest.get("passage_threshold")
        if pt is not None and (isinstance(pt, bool) or not isinstance(pt, (int, float)) or not _finite(pt)):
            raise ValueError(f"{where}: passage_threshold must be a finite number or null, got {pt!r:.80}")
        rt = manifest.get("relative_threshold")
        if rt is not None and (isinstance(rt, bool) or not isinstance(rt, (int, float)) or not 0 <= rt <= 1):
            raise ValueError(f"{where}: relative_threshold must be a number in [0, 1] or null, got {rt!r:.80}")
    for key in ("options", "prompt", "source"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise ValueError(f"{where}: {key} must be a mapping, got {type(manifest[key]).__name__}")
    if kind == "causal-yesno" and not isinstance(manifest.get("prompt"), dict):
        raise ValueError(f"{where}: prompt must be a mapping (the causal-yesno prompt template)")
