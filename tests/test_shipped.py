"""The default model shipped exported in the package: its files match its manifest, it was made from
the shipped LoRA delta, it loads straight from the package (no cache, no torch), and a fresh export
from the delta gives the same scores."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import tomllib

import thresher
from thresher.catalogue import (
    NAMED_MODELS,
    PRUNER_CALIBRATION,
    PRUNER_RELATIVE_THRESHOLD,
    PRUNER_THRESHOLD,
    TRAINED_PRUNER,
    resolve,
)
from thresher.manifest import (
    MANIFEST,
    ORT_SUPPORTED,
    content_digest,
    onnxruntime_version,
    read_manifest,
    sha256_file,
)

from .conftest import load_jsonl

SHIPPED = TRAINED_PRUNER / "model"
ROOT = Path(__file__).resolve().parents[1]


def test_shipped_files_match_their_manifest():
    manifest = json.loads((SHIPPED / MANIFEST).read_text(encoding="utf-8"))
    assert set(manifest["files"]) == {"model.onnx", "tokenizer.json"}
    for name, digest in manifest["files"].items():
        assert sha256_file(SHIPPED / name) == digest, name
    read_manifest(SHIPPED)  # the loader's own check agrees


def test_shipped_model_was_exported_from_the_shipped_delta():
    manifest = read_manifest(SHIPPED)
    record = json.loads((TRAINED_PRUNER / "train.json").read_text(encoding="utf-8"))
    assert manifest["source"]["delta_sha256"] == record["delta_sha256"] == sha256_file(TRAINED_PRUNER / "delta.safetensors")
    assert manifest["kind"] == "encoder-pruner"
    # the operating point the catalogue states is the one shipped (a stale export would differ)
    assert (manifest["threshold"], manifest["relative_threshold"], manifest["calibration"]) == (
        PRUNER_THRESHOLD, PRUNER_RELATIVE_THRESHOLD, PRUNER_CALIBRATION)
    assert manifest["onnxruntime"]["supported"] == ORT_SUPPORTED


def test_default_loads_from_the_package_without_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("THRESHER_HOME", str(tmp_path))
    assert resolve("default") == SHIPPED == NAMED_MODELS["minilm-pruner"].shipped
    c = thresher.Compressor.load("default")
    assert c.compress("Who wrote Hamlet?", ["Hamlet was written by Shakespeare. Paris is big."]).passages
    assert not (tmp_path / "models").exists()


def test_pyproject_onnxruntime_range_is_the_manifest_range():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert f"onnxruntime{ORT_SUPPORTED}" in deps


def with_recorded_ort(tmp_path, name: str, version: str):
    shutil.copytree(SHIPPED, tmp_path / name)
    manifest = json.loads((tmp_path / name / MANIFEST).read_text(encoding="utf-8"))
    manifest["onnxruntime"]["version"] = version
    (tmp_path / name / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return tmp_path / name


def test_another_onnxruntime_minor_warns_once(tmp_path, caplog):
    current = onnxruntime_version()
    other = with_recorded_ort(tmp_path, "other", "1.0.0")  # a minor no supported release has
    same = with_recorded_ort(tmp_path, "same", current.split(".")[0] + "." + current.split(".")[1] + ".99")
    with caplog.at_level(logging.WARNING, logger="thresher"):
        read_manifest(other)
        read_manifest(other)
        read_manifest(same)  # same minor, other patch release: silent
    warned = [r.getMessage() for r in caplog.records if "onnxruntime" in r.getMessage()]
    assert len(warned) == 1 and "calibrated on onnxruntime 1.0.0" in warned[0] and "may shift" in warned[0]


def test_checkpoint_key_follows_content_not_path(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "config.json").write_text('{"model_type": "bert"}')
    (a / "model.safetensors").write_bytes(b"\0" * 100)
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    assert content_digest(a) == content_digest(b)
    (b / "model.safetensors").write_bytes(b"\1" * 100)
    assert content_digest(a) != content_digest(b)


@pytest.mark.slow
def test_fresh_export_scores_like_the_shipped_graph(tmp_path):
    from thresher.shipped import export_default

    fresh = export_default(tmp_path / "model")
    pairs = [(r["question"], "".join(sentences)) for r in load_jsonl("hotpotqa_distractor", limit=8)
             for _, sentences in r["context"][:3]]
    shipped_scores = thresher.Compressor.load(SHIPPED).compress_batch(
        [(q, [p]) for q, p in pairs], progress=False)
    fresh_scores = thresher.Compressor.load(fresh).compress_batch([(q, [p]) for q, p in pairs], progress=False)
    a = np.array([s.score for r in shipped_scores for p in r.passages for s in p.sentences])
    b = np.array([s.score for r in fresh_scores for p in r.passages for s in p.sentences])
    assert a.size > 50 and np.abs(a - b).max() < 1e-4
