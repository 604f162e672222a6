"""Which kind a HF checkpoint folder is, from its config.json, and the exporter of each kind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from thresher.engine.segment import DEFAULT_SEGMENTER
from thresher.export.configs import is_causal_lm_config, is_provence_config

# Default threshold of a bi-encoder (embed-sim) export. Chosen on hotpotqa_distractor/dev.jsonl
# (221 questions) by benchmarks/quality_sweep.py --model minilm-cosine: the largest threshold (0.01
# grid) whose recall is >= 0.85.
COSINE_THRESHOLD = 0.31


def kind_of(checkpoint_dir: Path) -> str:
    """The model kind a checkpoint folder exports to by default. One causal LM can serve as a
    causal-yesno scorer or a causal-eos chunker: by default it scores yes/no (EXIT)."""
    if checkpoint_dir.suffix.lower() == ".gguf":  # a GGUF file is a causal LM (transformers gguf_file=)
        return "causal-yesno"
    config_path = checkpoint_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_path} cannot be read as JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} is not a JSON object")
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type == "bert" and architectures in ([], ["BertModel"]):
        if not (checkpoint_dir / "modules.json").is_file():
            raise ValueError(f"{checkpoint_dir} is a plain BertModel without sentence-transformers "
                             "pooling files (modules.json); thresher exports bi-encoders only")
        return "embed-sim"
    if is_provence_config(config):
        return "encoder-pruner"
    if is_causal_lm_config(config):
        return "causal-yesno"
    raise ValueError(
        f"{checkpoint_dir}: model_type {model_type!r} with architectures {architectures} is not a "
        "checkpoint thresher can export"
    )


def exporter_for(checkpoint_dir: Path) -> Callable[..., Path]:
    return exporter_for_kind(kind_of(checkpoint_dir))


def exporter_for_kind(kind: str) -> Callable[..., Path]:
    """The exporter of a kind: (checkpoint, out_dir, **options) -> out_dir."""
    if kind == "embed-sim":
        from thresher.export.embed_sim import export_embed_sim

        def export(src: Path, out: Path, **opts) -> Path:
            opts.setdefault("threshold", COSINE_THRESHOLD)
            opts.setdefault("segmenter", DEFAULT_SEGMENTER)
            return export_embed_sim(src, out, **opts)

        return export
    if kind == "encoder-pruner":
        from thresher.export.provence import export_provence

        return export_provence
    if kind == "causal-yesno":
        from thresher.export.yesno import export_causal_yesno

        return export_causal_yesno
    if kind == "causal-eos":
        from thresher.export.causal_eos import export_causal_eos

        return export_causal_eos
    raise ValueError(f"no exporter for kind {kind!r}; known: ['causal-eos', 'causal-yesno', 'embed-sim', "
                     "'encoder-pruner']")
