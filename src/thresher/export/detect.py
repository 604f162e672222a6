"""Choose the exporter for a HF checkpoint folder from its config.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def exporter_for(checkpoint_dir: Path) -> Callable[..., Path]:
    if checkpoint_dir.suffix.lower() == ".gguf":  # a GGUF file is a causal LM (transformers gguf_file=)
        return exporter_for_kind("causal-yesno")
    config_path = checkpoint_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_path} cannot be read as JSON: {e}") from None
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type == "bert" and architectures in ([], ["BertModel"]):
        if not (checkpoint_dir / "modules.json").is_file():
            raise ValueError(f"{checkpoint_dir} is a plain BertModel without sentence-transformers "
                             "pooling files (modules.json); thresher exports bi-encoders only")
        from thresher.export.embed_sim import export_embed_sim
        from thresher.models import COSINE_THRESHOLD, DEFAULT_SEGMENTER

        def export(src: Path, out: Path, **opts) -> Path:
            opts.setdefault("threshold", COSINE_THRESHOLD)
            opts.setdefault("segmenter", DEFAULT_SEGMENTER)
            return export_embed_sim(src, out, **opts)

        return export
    from thresher.export.provence import export_provence, is_provence_config

    if is_provence_config(config):
        return export_provence
    from thresher.export.causal_lm import SUPPORTED_TYPES

    if model_type in SUPPORTED_TYPES and any(a.endswith("ForCausalLM") for a in architectures or [""]):
        return exporter_for_kind("causal-yesno")  # a causal LM by default scores yes/no (EXIT)
    raise ValueError(
        f"{checkpoint_dir}: model_type {model_type!r} with architectures {architectures} is not a "
        "checkpoint thresher can export"
    )


def exporter_for_kind(kind: str) -> Callable[..., Path]:
    """The exporter of an explicitly requested kind, for checkpoints whose config alone does not
    decide it (one causal LM can serve as a causal-yesno scorer or a causal-eos chunker)."""
    if kind == "causal-yesno":
        from thresher.export.yesno import export_causal_yesno

        return export_causal_yesno
    if kind == "causal-eos":
        from thresher.export.causal_eos import export_causal_eos

        return export_causal_eos
    raise ValueError(f"no exporter for kind {kind!r} by name; known: ['causal-eos', 'causal-yesno']")
