"""Multi-head attention exported as ONE ONNX `Attention` node (opset 23) on [R, W, H] tensors.

Traced as plain torch, attention becomes ~12 ONNX ops per layer (reshapes and transposes to
[R, heads, W, d], two MatMuls, scale, mask add, softmax), each writing a full tensor. ONNX
Runtime's Attention kernel does the same arithmetic without them: the int8 MiniLM graphs run
~12% faster on this project's CPU with identical outputs (benchmarks/RESULTS.md, "Fused
attention"). `attention` is a torch custom op only while exporting; training and the torch
parity references call the same math in `attention_reference`, with autograd.
"""

from __future__ import annotations

import math

import torch
from onnxscript import opset23

OPSET = 23  # the first with a standard Attention op; modules using it set onnx_opset = OPSET


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                        heads: int) -> torch.Tensor:
    """q, k, v [R, W, H], additive bias broadcastable to [R, heads, W, W] -> context [R, W, H]."""
    r, w, h = q.shape
    d = h // heads

    def split(t: torch.Tensor) -> torch.Tensor:  # [R, W, H] -> [R, heads, W, d]
        return t.view(r, w, heads, d).transpose(1, 2)

    scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(d) + bias
    return (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(r, w, h)


@torch.library.custom_op("thresher::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                  heads: int) -> torch.Tensor:
    return attention_reference(q, k, v, bias, heads)


@_attention_op.register_fake
def _(q, k, v, bias, heads):
    return torch.empty_like(q)


def _attention_onnx(q, k, v, bias, heads: int):
    # 3-D inputs with q_num_heads/kv_num_heads: the kernel splits heads itself (no Transpose nodes).
    return opset23.Attention(q, k, v, bias, q_num_heads=heads, kv_num_heads=heads)[0]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
              heads: int) -> torch.Tensor:
    if torch.compiler.is_exporting():
        return _attention_op(q, k, v, bias, heads)
    return attention_reference(q, k, v, bias, heads)


TRANSLATIONS = {torch.ops.thresher.attention.default: _attention_onnx}
