import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # Haystack would post usage events online

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_jsonl(name: str, limit: int | None = None) -> list[dict]:
    """Records of ../shared/data/<name>/dev.jsonl; skips the test when the data is absent."""
    import json

    path = DATA / name / "dev.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


@pytest.fixture(scope="session")
def default_compressor():
    """The embedded default model (the trained pruner), exported once into $THRESHER_HOME (or
    ~/.cache/thresher)."""
    import thresher

    return thresher.Compressor.load("default")


@pytest.fixture(scope="session")
def cosine_compressor():
    """minilm-cosine: the embed-sim model (question-sentence cosine), SAGE's and chunking's embedder."""
    import thresher

    return thresher.Compressor.load("minilm-cosine")
