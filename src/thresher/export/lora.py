"""Low-rank adapters on the BERT encoder's linear layers, and the small file that ships them.

Training changes the pip-installed all-MiniLM-L6-v2 only through (a) a rank-r update B @ A of
every attention and feed-forward matrix, (b) its LayerNorms and (c) the new heads. That is all
that must ship: `delta.safetensors` holds A and B (fp16), the heads (fp16) and the LayerNorms
(fp32: their trained values sit close to the base's, where fp16 would round the change away).
`apply_delta` rebuilds exactly the network that the file describes on top of the base weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

ADAPTED = ("query", "key", "value", "attn_out", "up", "down")


class LoRALinear(nn.Module):
    """y = base(x) + scale * (x @ A^T) @ B^T, with the base frozen and B starting at zero."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t() * self.scale

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            self.base.weight += self.scale * self.lora_b @ self.lora_a
        return self.base.requires_grad_(True)


def add_adapters(net: nn.Module, rank: int, alpha: float) -> list[nn.Parameter]:
    """Freeze the backbone, wrap its linear layers, unfreeze LayerNorms and heads; returns the
    trainable parameters."""
    net.requires_grad_(False)
    for layer in net.bert.layers:
        for name in ADAPTED:
            setattr(layer, name, LoRALinear(getattr(layer, name), rank, alpha))
    for name, p in net.named_parameters():
        if "lora_" in name or "norm" in name or not name.startswith("bert."):
            p.requires_grad_(True)
    return [p for p in net.parameters() if p.requires_grad]


def merge_adapters(net: nn.Module) -> nn.Module:
    for layer in net.bert.layers:
        for name in ADAPTED:
            module = getattr(layer, name)
            if isinstance(module, LoRALinear):
                setattr(layer, name, module.merged())
    return net


def delta_state(net: nn.Module) -> dict[str, torch.Tensor]:
    """The shipped tensors of an adapted (unmerged) network; LoRA factors carry their scale."""
    out = {}
    for name, module in net.named_modules():
        if isinstance(module, LoRALinear):
            out[f"{name}.lora_b"] = (module.lora_b * module.scale).detach().half().contiguous()
            out[f"{name}.lora_a"] = module.lora_a.detach().half().contiguous()
    for name, p in net.named_parameters():
        if "lora_" in name or not p.requires_grad:
            continue
        p = p.detach().contiguous()
        out[name] = p.float() if "norm" in name else p.half()
    return out


def save_delta(state: dict[str, torch.Tensor], path: str | Path) -> str:
    """Write a delta_state() to path; returns its sha256 (recorded in train.json)."""
    import hashlib

    from safetensors.torch import save_file

    save_file(state, str(path))
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def apply_delta(net: nn.Module, path: str | Path) -> nn.Module:
    """Load `path` into a plain (unadapted) network built on the base weights, in fp32."""
    from safetensors.torch import load_file

    delta = load_file(str(path))
    params = dict(net.named_parameters())
    with torch.no_grad():
        for name, t in delta.items():
            if name.endswith(".lora_a"):
                continue
            if name.endswith(".lora_b"):
                stem = name[: -len(".lora_b")]
                weight = params.get(f"{stem}.weight")
                a = delta.get(f"{stem}.lora_a")
                if weight is None or a is None or weight.shape != (t.shape[0], a.shape[1]):
                    raise ValueError(f"{path}: {stem} does not match the base network")
                weight += t.float() @ a.float()
            elif name in params and params[name].shape == t.shape:
                params[name].copy_(t.float())
            else:
                raise ValueError(f"{path}: tensor {name} {tuple(t.shape)} does not match the base network")
    return net
