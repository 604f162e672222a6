"""thresher.json is untrusted input: confined file names, complete verification, every field
checked, a clear ValueError for anything malformed (never AttributeError/KeyError/RecursionError)."""

import json
import shutil

import pytest

import thresher
from thresher.catalogue import resolve
from thresher.manifest import MANIFEST, read_manifest


@pytest.fixture(scope="module")
def default_dir():
    thresher.Compressor.load("default")  # exported once into the cache
    return resolve("default")


@pytest.fixture
def model_copy(default_dir, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(default_dir, copy)
    return copy


def _rewrite(model_dir, **changes) -> dict:
    manifest = json.loads((model_dir / MANIFEST).read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    (model_dir / MANIFEST).write_text(json.dumps(manifest))
    return manifest


def test_an_intact_copy_loads_and_compresses(model_copy):
    assert read_manifest(model_copy)["kind"] == "encoder-pruner"
    result = thresher.Compressor.load(model_copy).compress("Who?", ["Alice wrote it. Bob did not."])
    assert len(result.passages[0].sentences) == 2


@pytest.mark.parametrize("outside", ["/etc/hostname", "/no/such/file", "../outside.txt", "a/../../b"])
def test_names_leaving_the_directory_are_refused_without_opening_them(model_copy, outside):
    files = json.loads((model_copy / MANIFEST).read_text())["files"]
    _rewrite(model_copy, files={**files, outside: "0" * 64})
    with pytest.raises(ValueError, match="names must be relative paths inside the model directory") as e:
        read_manifest(model_copy)
    assert "lacks" not in str(e.value) and "sha256" not in str(e.value)


def test_symlinks_out_of_the_directory_give_one_message_whether_or_not_the_target_exists(model_copy, tmp_path):
    (tmp_path / "secret.txt").write_text("secret")
    messages = []
    for target in (tmp_path / "secret.txt", tmp_path / "missing.txt"):
        link = model_copy / "extra.bin"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        files = json.loads((model_copy / MANIFEST).read_text())["files"]
        _rewrite(model_copy, files={**files, "extra.bin": "0" * 64})
        with pytest.raises(ValueError, match="leads outside the model directory") as e:
            read_manifest(model_copy)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_symlink_inside_the_directory_is_followed(model_copy):
    (model_copy / "tok-link.json").symlink_to(model_copy / "tokenizer.json")
    files = json.loads((model_copy / MANIFEST).read_text())["files"]
    _rewrite(model_copy, files={**files, "tok-link.json": files["tokenizer.json"]})
    assert "tok-link.json" in read_manifest(model_copy)["files"]


@pytest.mark.parametrize("files, message", [
    (None, "files must be a non-empty mapping"),
    ({}, "files must be a non-empty mapping"),
    ([], "files must be a non-empty mapping"),
    ("model.onnx", "files must be a non-empty mapping"),
])
def test_missing_or_empty_files_are_refused(model_copy, files, message):
    _rewrite(model_copy, files=files) if files is not None else _rewrite(model_copy, files=None)
    with pytest.raises(ValueError, match=message):
        read_manifest(model_copy)


def test_a_corrupted_graph_is_refused_even_when_files_omits_it(model_copy):
    files = json.loads((model_copy / MANIFEST).read_text())["files"]
    with open(model_copy / "model.onnx", "r+b") as f:
        f.seek(1000)
        f.write(b"\xff" * 16)
    with pytest.raises(ValueError, match="model.onnx does not match the sha256"):
        thresher.Compressor.load(model_copy)
    _rewrite(model_copy, files={"tokenizer.json": files["tokenizer.json"]})
    with pytest.raises(ValueError, match="files does not list model.onnx, which every encoder-pruner model needs"):
        thresher.Compressor.load(model_copy)


@pytest.mark.parametrize("changes, message", [
    ({"threshold": float("nan")}, r"threshold must be a finite number in \[0.0, 1.0\]"),
    ({"threshold": float("inf")}, "threshold must be a finite number"),
    ({"threshold": 2.5}, "threshold must be a finite number"),
    ({"threshold": -0.1}, "threshold must be a finite number"),
    ({"threshold": "0.5"}, "threshold must be a finite number"),
    ({"threshold": True}, "threshold must be a finite number"),
    ({"threshold": None}, "threshold must be a finite number"),
    ({"kind": None}, "has kind None"),
    ({"kind": ["encoder-pruner"]}, "has kind"),
    ({"format": 2}, "has format 2"),
    ({"name": 7}, "name must be a non-empty string"),
    ({"max_length": "512"}, "max_length must be an integer >= 1"),
    ({"max_length": 0}, "max_length must be an integer >= 1"),
    ({"segmenter": None}, "segmenter must be a non-empty string"),
    ({"special_ids": None}, "special_ids must be a mapping"),
    ({"special_ids": {"cls": 101, "sep": 102}}, "special_ids.pad must be an integer"),
    ({"special_ids": {"cls": -1, "sep": 102, "pad": 0}}, "special_ids.cls must be an integer >= 0"),
    ({"options": [1]}, "options must be a mapping"),
    ({"calibration": [1, 0]}, "calibration must be a mapping with 'sentence' and/or 'rerank'"),
    ({"calibration": {"token": [1, 0]}}, "calibration must be a mapping"),
    ({"calibration": {"sentence": [0, 1]}}, r"calibration.sentence must be \[scale > 0, shift\]"),
    ({"calibration": {"rerank": [1.0, float("nan")]}}, r"calibration.rerank must be \[scale > 0, shift\]"),
    ({"calibration": {"rerank": [1.0]}}, r"calibration.rerank must be"),
    ({"passage_threshold": "0.2"}, "passage_threshold must be a finite number or null"),
    ({"passage_threshold": float("inf")}, "passage_threshold must be a finite number or null"),
    ({"relative_threshold": 1.5}, r"relative_threshold must be a number in \[0, 1\] or null"),
    ({"passage_threshold": 10**400}, "passage_threshold must be a finite number or null"),
    ({"threshold": 10**400}, "threshold must be a finite number"),
    ({"files": {"model.onnx": "x" * 64, "tokenizer.json": "0" * 64}}, r"files\['model.onnx'\] must be a sha256"),
])
def test_every_field_is_checked_with_a_clear_value_error(model_copy, changes, message):
    _rewrite(model_copy, **changes)
    with pytest.raises(ValueError, match=message):
        thresher.Compressor.load(model_copy)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "must hold a JSON object, got list"),
    ("null", "must hold a JSON object, got NoneType"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"options": ' + "{\"a\": " * 50_000 + "1" + "}" * 50_001, "nested too deeply"),
    ("{\"format\": 1, ", "is not valid JSON"),
    ("\udcff", "is not valid JSON"),
])
def test_malformed_json_is_a_value_error(model_copy, text, message):
    (model_copy / MANIFEST).write_text(text, encoding="utf-8", errors="surrogateescape")
    with pytest.raises(ValueError, match=message):
        read_manifest(model_copy)


def test_an_oversized_manifest_is_not_read(model_copy):
    (model_copy / MANIFEST).write_text(" " * (2 << 20) + "{}")
    with pytest.raises(ValueError, match="is over 1,048,576 bytes"):
        read_manifest(model_copy)
