"""Bad input through the Python API: a clear ValueError naming the field, before any model work."""

import os
import subprocess
import sys

import pytest

from thresher.engine.request import Options, validate


@pytest.mark.parametrize("options, message", [
    ({"threshold": 10**400}, r"threshold must be a finite number, got an integer of 1,329 bits"),
    ({"threshold": -(10**5000)}, r"threshold must be a finite number"),
    ({"threshold": float("inf")}, r"threshold must be a finite number, got inf"),
    ({"keep_ratio": 10**400}, r"keep_ratio must be a finite number"),
    ({"keep_ratio": float("nan")}, r"keep_ratio must be a finite number, got nan"),
])
def test_huge_or_non_finite_numbers_are_value_errors(options, message):
    with pytest.raises(ValueError, match=message):
        Options(**options)


@pytest.mark.parametrize("question, passages, field", [
    ("\ud800", ["text"], r"question has a lone surrogate '\\ud800' at character 0"),
    ("q", ["ok", "a\udfffb"], r"passages\[1\] has a lone surrogate '\\udfff' at character 1"),
    ("q", [{"text": "x\ud800"}], r"passages\[0\]\.text has a lone surrogate"),
    ("q", [{"title": "T\udc00", "text": "x"}], r"passages\[0\]\.title has a lone surrogate"),
])
def test_lone_surrogates_are_refused_naming_the_field(question, passages, field):
    with pytest.raises(ValueError, match=field):
        validate(question, passages, Options())


def test_valid_non_ascii_text_passes():
    request = validate("Wer? 東京 😀", ["Ünïcødé 😀."], Options())
    assert request.passages[0].text == "Ünïcødé 😀."


def test_compress_refuses_surrogates_and_huge_thresholds(default_compressor):
    with pytest.raises(ValueError, match="question has a lone surrogate"):
        default_compressor.compress("who\ud800?", ["Some text."])
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        default_compressor.compress("who?", ["Some text."], threshold=10**400)


def test_question_over_the_models_token_limit_is_refused_by_name(default_compressor):
    question = "word " * 600  # 3,000 characters: under the character limit, over the window
    with pytest.raises(ValueError, match=r"question has \d+ tokens; this model takes at most \d+ \(its \d+-token window"):
        default_compressor.compress(question, ["Some text."])


def test_compress_batch_names_the_failing_item(default_compressor):
    items = [("Who?", ["Alice wrote it."]), ("word " * 600, ["Some text."]), ("Why?", ["Because."])]
    with pytest.raises(ValueError, match=r"^items\[1\]: question has \d+ tokens"):
        default_compressor.compress_batch(items, progress=False)
    with pytest.raises(ValueError, match=r"^items\[2\]: passages\[0\] has a lone surrogate"):
        default_compressor.compress_batch(items[:1] * 2 + [("Why?", ["\udfff"])], progress=False)


def test_bad_thresher_threads_fails_at_load_not_at_import():
    env = {**os.environ, "THRESHER_THREADS": "abc"}
    code = ("import thresher\n"
            "from thresher.engine.runner import SessionConfig\n"
            "try:\n    SessionConfig()\nexcept ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "THRESHER_THREADS must be an integer >= 0, got 'abc'" in out.stdout
