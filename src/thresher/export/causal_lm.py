"""Load a causal LM for a yes/no scorer: checkpoint folder or GGUF file, optional LoRA merged.

transformers' own model classes run the architecture (Gemma, Gemma 2, Gemma 3 text, Llama family);
no checkpoint code is executed (trust_remote_code stays off). A PEFT LoRA adapter is checked
against the base weights' shapes before loading and merged into them, so the exported graph is a
plain model. The tokenizer must encode "Yes" and "No" as one token each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from thresher.cache import cache_home
from thresher.export.configs import CAUSAL_TYPES
from thresher.manifest import atomic_directory, sha256_file


@dataclass
class CausalLM:
    model: torch.nn.Module  # a transformers *ForCausalLM in eval mode, fp32
    tokenizer: object  # transformers PreTrainedTokenizerFast
    source: dict  # what was loaded: path, gguf file, adapter


def _split_source(source: Path) -> tuple[Path, str | None]:
    if source.is_file() and source.suffix.lower() == ".gguf":
        return source.parent, source.name
    if (source / "config.json").is_file():
        return source, None
    raise ValueError(f"{source} is neither a checkpoint folder (with config.json) nor a .gguf file")


def check_adapter(model: torch.nn.Module, adapter_dir: Path) -> None:
    """Refuse (ValueError) a LoRA adapter whose target modules are absent or have other shapes."""
    from safetensors import safe_open

    cfg_path = adapter_dir / "adapter_config.json"
    weights = adapter_dir / "adapter_model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise ValueError(f"{adapter_dir} is not a PEFT adapter folder "
                         "(needs adapter_config.json and adapter_model.safetensors)")
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{adapter_dir}: peft_type {cfg.get('peft_type')!r}; only LoRA adapters are supported")
    with safe_open(str(weights), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    checked = 0
    for key, shape in shapes.items():
        if not key.endswith(("lora_A.weight", "lora_B.weight")):
            continue
        path = key.removeprefix("base_model.model.").rsplit(".lora_", 1)[0]
        try:
            module = model.get_submodule(path)
        except AttributeError:
            raise ValueError(f"adapter {adapter_dir} does not match the base model: it adapts {path!r}, "
                             "which the base model does not have") from None
        weight = getattr(module, "weight", None)
        if weight is None or weight.dim() != 2:
            raise ValueError(f"adapter {adapter_dir} adapts {path!r}, which is not a linear layer")
        out_f, in_f = weight.shape
        ok = shape[1] == in_f if key.endswith("lora_A.weight") else shape[0] == out_f
        if not ok:
            raise ValueError(f"adapter {adapter_dir} does not match the base model: {key} has shape "
                             f"{list(shape)} but {path} is {in_f} -> {out_f}")
        checked += 1
    if not checked:
        raise ValueError(f"adapter {adapter_dir} holds no LoRA weights")


def load_causal_lm(source: str | Path, adapter: str | Path | None = None) -> CausalLM:
    """Load a causal LM in fp32 (GGUF tensors are de-quantized) and merge `adapter` into it."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, gguf_file = _split_source(Path(source))
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    config = AutoConfig.from_pretrained(folder, **kw)
    if config.model_type not in CAUSAL_TYPES:
        raise ValueError(f"{source}: model_type {config.model_type!r} is not a supported causal LM "
                         f"({', '.join(CAUSAL_TYPES)})")
    # Gemma 2 soft-caps attention logits, which only the eager implementation does.
    attn = "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attn, **kw)
    tokenizer = AutoTokenizer.from_pretrained(folder, **kw)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{source}: a fast tokenizer (tokenizer.json) is required")
    info = {"path": str(Path(source)), **({"gguf_file": gguf_file} if gguf_file else {})}
    if adapter is not None:
        from peft import PeftModel

        adapter = Path(adapter)
        check_adapter(model, adapter)
        try:
            model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
        except (RuntimeError, KeyError) as e:
            raise ValueError(f"adapter {adapter} does not match the base model: {e}") from None
        info["adapter"] = str(adapter)
    model.eval()
    return CausalLM(model, tokenizer, info)


def single_token_id(tokenizer, word: str) -> int:
    """The id of `word` encoded without special tokens; ValueError unless it is one token."""
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"the tokenizer encodes {word!r} as {len(ids)} tokens {ids}; a yes/no scorer "
                         "needs it to be exactly one token")
    return int(ids[0])


def special_ids_added(tokenizer) -> tuple[list[int], list[int]]:
    """Ids the tokenizer adds before and after a text by default (e.g. [BOS], [])."""
    plain = tokenizer.encode("Yes", add_special_tokens=False)
    full = tokenizer.encode("Yes")
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
    if at is None:
        raise ValueError("cannot locate the text among the tokenizer's special tokens")
    return [int(i) for i in full[:at]], [int(i) for i in full[at + len(plain):]]


def cached_checkpoint(gguf_path: str | Path) -> Path:
    """A de-quantized fp32 checkpoint folder of a GGUF file, written once into the user cache.

    De-quantizing takes about a minute on 2 cores; later loads of the folder take a second.
    """

    gguf_path = Path(gguf_path)
    final = cache_home() / "checkpoints" / f"{gguf_path.stem}-{sha256_file(gguf_path)[:12]}"
    if (final / "config.json").is_file():
        return final
    with atomic_directory(final) as tmp:
        lm = load_causal_lm(gguf_path)
        lm.model.save_pretrained(tmp)
        lm.tokenizer.save_pretrained(tmp)
    return final
