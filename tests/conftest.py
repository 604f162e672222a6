import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # Haystack would post usage events online

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# The first records of some sets, kept in the repository (tests/data/README.md) so the core tests run
# in any clone; they are byte-for-byte the head of ../shared/data's files.
SAMPLE = Path(__file__).resolve().parent / "data"
# CI sets THRESHER_REQUIRE_DATA=1: there a missing ../shared/data fails the run instead of skipping.
REQUIRE_DATA = os.environ.get("THRESHER_REQUIRE_DATA") == "1"


# A two-passage request for the CLI and install tests: one relevant sentence, one irrelevant passage.
HAMLET_QUESTION = "Who wrote Hamlet?"
HAMLET_PASSAGES = [{"title": "Hamlet", "text": "Hamlet is a tragedy. It was written by William Shakespeare around 1600."},
                   "Paris is the capital of France. The Seine flows through it."]


def pytest_sessionstart(session) -> None:
    if REQUIRE_DATA and not DATA.is_dir():
        raise pytest.UsageError(f"THRESHER_REQUIRE_DATA=1 but {DATA} is absent: the data-dependent tests "
                                "would only skip")


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def load_jsonl(name: str, limit: int | None = None) -> list[dict]:
    """The first `limit` records of <name>/dev.jsonl: from tests/data when the sample holds that many,
    else from ../shared/data; skips when absent (fails under THRESHER_REQUIRE_DATA=1)."""
    import json

    sample = SAMPLE / name / "dev.jsonl"
    use_sample = limit is not None and sample.is_file() and limit <= _lines(sample)
    path = sample if use_sample else DATA / name / "dev.jsonl"
    if not path.is_file():
        if REQUIRE_DATA:
            pytest.fail(f"{path} is absent (THRESHER_REQUIRE_DATA=1)")
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


@pytest.fixture(scope="session")
def raw_default_dir(tmp_path_factory):
    """A copy of the default model directory without its calibration and cuts: the heads' raw
    outputs (sentence keep probabilities, rank logits), as a Provence checkpoint reports them."""
    import json
    import shutil

    from thresher.catalogue import resolve
    from thresher.manifest import MANIFEST

    copy = tmp_path_factory.mktemp("raw-default") / "model"
    shutil.copytree(resolve("default"), copy)
    manifest = json.loads((copy / MANIFEST).read_text(encoding="utf-8"))
    for key in ("calibration", "passage_threshold", "relative_threshold"):
        manifest.pop(key, None)
    manifest["rerank_activation"] = "identity"
    (copy / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return copy


@pytest.fixture(scope="session")
def logit_compressor(raw_default_dir):
    """The default network with raw rank logits as rerank scores (rerank_scale "logit")."""
    import thresher

    return thresher.Compressor.load(raw_default_dir)
