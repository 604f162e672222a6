"""What a checkpoint's config.json says it is: the predicates the exporters and export.detect
share. Torch-free, so detection never imports an exporter."""

from __future__ import annotations

# model_type values whose attention accepts a custom 4D mask (verified in tests/test_exit.py).
CAUSAL_TYPES = ("llama", "gemma", "gemma2", "gemma3_text", "mistral", "qwen2")


def is_provence_config(config: dict) -> bool:
    """True for Provence and OpenProvence config.json contents."""
    model_type = str(config.get("model_type", "")).lower()
    return model_type in ("provence", "open_provence") or "Provence" in (config.get("architectures") or [])


def is_causal_lm_config(config: dict) -> bool:
    architectures = config.get("architectures") or [""]
    return config.get("model_type") in CAUSAL_TYPES and any(str(a).endswith("ForCausalLM") for a in architectures)
