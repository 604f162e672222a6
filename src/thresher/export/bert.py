"""A BERT encoder in plain torch, loaded from a HF checkpoint's config.json + safetensors.

thresher's own module code (no remote code, no transformers model class), so the exported graph
takes packed rows: position ids restart per sequence and a block-diagonal attention mask is
built from segment ids, which makes a packed row compute exactly what each sequence alone would.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from thresher.export.attention import OPSET, attention


def block_mask(segment_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[R, W] segment ids (0 = pad) -> additive [R, 1, W, W] mask; a token sees its own segment.

    Padding (segment 0) sees only padding, so no query row is fully masked: a fully masked row's
    softmax is left to each kernel's convention (torch and ONNX Runtime's Attention differ), and
    outputs would then differ at padding positions. Uses the dtype's minimum, not -inf.
    """
    visible = segment_ids[:, :, None] == segment_ids[:, None, :]
    zero = torch.zeros((), dtype=dtype)
    return torch.where(visible, zero, torch.finfo(dtype).min)[:, None]


class BertLayer(nn.Module):
    onnx_opset = OPSET

    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx = attention(self.query(x), self.key(x), self.value(x), mask, self.heads)
        x = self.attn_norm(x + self.attn_out(ctx))
        # gelu(u) for u < -10 is below 1e-22 and soon subnormal, which x86 computes many times
        # slower; clamping there changes outputs by < 1e-22 and keeps every value normal.
        return self.out_norm(x + self.down(nn.functional.gelu(self.up(x).clamp(min=-10.0))))


class BertEncoder(nn.Module):
    """Inputs: input_ids, position_ids [R, W] int64, segment_ids [R, W] int32.
    Output: last hidden state [R, W, H]."""

    def __init__(self, config: dict):
        super().__init__()
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"hidden_act {config.get('hidden_act')!r} is not supported (need 'gelu')")
        h, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.word = nn.Embedding(config["vocab_size"], h)
        self.position = nn.Embedding(config["max_position_embeddings"], h)
        self.token_type = nn.Embedding(config.get("type_vocab_size", 2), h)
        self.emb_norm = nn.LayerNorm(h, eps=eps)
        self.layers = nn.ModuleList(
            BertLayer(h, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"])
        )

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, segment_ids: torch.Tensor):
        x = self.word(input_ids) + self.position(position_ids) + self.token_type.weight[0]
        x = self.emb_norm(x)
        mask = block_mask(segment_ids, x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        return x


_LAYER_NAMES = {
    "attention.self.query": "query", "attention.self.key": "key", "attention.self.value": "value",
    "attention.output.dense": "attn_out", "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "up", "output.dense": "down", "output.LayerNorm": "out_norm",
}
_EMB_NAMES = {
    "embeddings.word_embeddings": "word", "embeddings.position_embeddings": "position",
    "embeddings.token_type_embeddings": "token_type", "embeddings.LayerNorm": "emb_norm",
}


def hf_to_local(state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Map HF BertModel weight names (optionally under `prefix`, e.g. 'bert.') to BertEncoder's."""
    out = {}
    for name, t in state.items():
        if not name.startswith(prefix):
            continue
        name = name[len(prefix):]
        stem, _, leaf = name.rpartition(".")
        if stem in _EMB_NAMES:
            out[f"{_EMB_NAMES[stem]}.{leaf}"] = t
        elif stem.startswith("encoder.layer."):
            idx, _, sub = stem[len("encoder.layer."):].partition(".")
            if sub in _LAYER_NAMES:
                out[f"layers.{idx}.{_LAYER_NAMES[sub]}.{leaf}"] = t
    return out


def load_bert(checkpoint_dir: str | Path, prefix: str = "") -> tuple[BertEncoder, dict]:
    """Build BertEncoder from config.json and model.safetensors; every weight must be present."""
    checkpoint_dir = Path(checkpoint_dir)
    config = json.loads((checkpoint_dir / "config.json").read_text())
    model = BertEncoder(config)
    state = hf_to_local(load_file(str(checkpoint_dir / "model.safetensors")), prefix)
    missing, _ = model.load_state_dict(state, strict=False)
    if missing:
        raise ValueError(f"{checkpoint_dir}/model.safetensors lacks weights: {missing[:5]}")
    return model.eval(), config
