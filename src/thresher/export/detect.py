"""Choose the exporter for a HF checkpoint folder from its config.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def exporter_for(checkpoint_dir: Path) -> Callable[..., Path]:
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
        from thresher.models import DEFAULT_SEGMENTER, DEFAULT_THRESHOLD

        def export(src: Path, out: Path, **opts) -> Path:
            opts.setdefault("threshold", DEFAULT_THRESHOLD)
            opts.setdefault("segmenter", DEFAULT_SEGMENTER)
            return export_embed_sim(src, out, **opts)

        return export
    raise ValueError(
        f"{checkpoint_dir}: model_type {model_type!r} with architectures {architectures} is not a "
        "checkpoint thresher can export"
    )
