"""The attention mask of prefix-shared tree rows, shared by the exported yes/no graph and the
torch GPU backend (torch only, so either side imports it without the other's dependencies)."""

from __future__ import annotations

import torch

# Branch id = tree slot in the row * TREE_STRIDE + branch number (0 = the tree's prefix); see
# thresher._native.pack_forest. With one tree per row (pack_tree) ids are the branch numbers.
TREE_STRIDE = 1 << 16


def tree_mask(branch_ids: torch.Tensor, position_ids: torch.Tensor, sliding_window: int | None,
              dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [R, 1, T, T] (0 = visible, dtype min = hidden) from branch ids [R, T]:
    a token sees the earlier tokens of its own branch and of its own tree's prefix."""
    width = branch_ids.shape[1]
    col = torch.arange(width, device=branch_ids.device)
    causal = col[None, :] <= col[:, None]  # [Tq, Tk]
    query, key = branch_ids[:, :, None], branch_ids[:, None, :]  # [R, Tq, 1], [R, 1, Tk]
    prefix = query - torch.remainder(query, TREE_STRIDE)  # the query's tree prefix id (padding: none)
    visible = (key == query) | (key == prefix)  # [R, Tq, Tk]
    allowed = causal[None] & visible
    if sliding_window is not None:
        allowed = allowed & (position_ids[:, :, None] - position_ids[:, None, :] < sliding_window)
    zero = torch.zeros((), dtype=dtype, device=branch_ids.device)
    hidden = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=branch_ids.device)
    return torch.where(allowed, zero, hidden)[:, None]


def sliding_window_of(config) -> int | None:
    """The sliding-attention window of a HF config whose layers mix full and sliding attention
    (Gemma 2/3), else None."""
    layer_types = getattr(config, "layer_types", None) or []
    return getattr(config, "sliding_window", None) if "sliding_attention" in layer_types else None


def tree_masks(branch_ids: torch.Tensor, position_ids: torch.Tensor, sliding_window: int | None,
               dtype: torch.dtype):
    """What a HF decoder takes as `attention_mask` for tree rows: one full mask, or a mask per
    layer type when some layers attend within a sliding window."""
    full = tree_mask(branch_ids, position_ids, None, dtype)
    if sliding_window is None:
        return full
    return {"full_attention": full,
            "sliding_attention": tree_mask(branch_ids, position_ids, sliding_window, dtype)}
