"""The attention mask of prefix-shared tree rows, shared by the exported yes/no graph and the
torch GPU backend (torch only, so either side imports it without the other's dependencies)."""

from __future__ import annotations

import torch


def tree_mask(branch_ids: torch.Tensor, position_ids: torch.Tensor, sliding_window: int | None,
              dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [R, 1, T, T] (0 = visible, dtype min = hidden) from branch ids [R, T]."""
    width = branch_ids.shape[1]
    col = torch.arange(width, device=branch_ids.device)
    causal = col[None, :] <= col[:, None]  # [Tq, Tk]
    key = branch_ids[:, None, :]  # [R, 1, Tk]
    visible = (key == branch_ids[:, :, None]) | (key == 0)  # [R, Tq, Tk]: own branch or prefix
    allowed = causal[None] & visible
    if sliding_window is not None:
        allowed = allowed & (position_ids[:, :, None] - position_ids[:, None, :] < sliding_window)
    zero = torch.zeros((), dtype=dtype, device=branch_ids.device)
    hidden = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=branch_ids.device)
    return torch.where(allowed, zero, hidden)[:, None]
