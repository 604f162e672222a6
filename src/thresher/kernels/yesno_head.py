"""Fused yes/no head: final hidden states at scoring positions -> normalised P(Yes).

A causal yes/no scorer needs two numbers per sentence, the logits of "Yes" and "No" at the
last prompt position, and from them P(Yes) / (P(Yes) + P(No)). The model's LM head would
compute [N, vocab] logits (256,000 columns for Gemma) to read two of them; this kernel reads
each hidden row once and does, in fp32 registers:

    final RMSNorm (x * rsqrt(mean(x^2) + eps) * w, or Gemma's * (1 + w))
    -> two dot products with the LM-head rows of Yes and No
    -> optional logit soft-capping (Gemma 2: cap * tanh(l / cap))
    -> two-way softmax, i.e. sigmoid(l_yes - l_no), in a form that never produces NaN.

The norm is folded into the dot products: dot(x * rstd * w, h) = rstd * dot(x * w, h), so one
pass over H gives the sum of squares and both dots. An optional row index fuses the gather of
scoring positions out of the flat [tokens, H] hidden states.

`yesno_head_reference` is the twin that defines the result (float64 torch math, any device);
`yesno_head` is the Triton launcher (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_BLOCK_H = 1024  # hidden columns per loop step; larger H loops (Gemma-2B: 2 steps)
TILE_ELEMENTS = 8192  # BLOCK_N x BLOCK_H elements per step: enough loads in flight per program


def yesno_head_reference(hidden: torch.Tensor, head_rows: torch.Tensor, norm_weight: torch.Tensor | None = None,
                         *, eps: float = 1e-6, norm_plus_one: bool = False, softcap: float = 0.0,
                         index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The twin: what `yesno_head` computes, in float64.

    hidden: [M, H] final hidden states (before the final norm when norm_weight is given);
    head_rows: [2, H] LM-head rows of (Yes, No); norm_weight: [H] or None (no norm);
    index: int [N] rows of hidden to score, or None for all rows.
    Returns (logits float32 [N, 2], p_yes float32 [N]).
    """
    x = (hidden if index is None else hidden[index.long()]).double()
    if norm_weight is not None:
        w = norm_weight.double() + (1.0 if norm_plus_one else 0.0)
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w
    logits = x @ head_rows.double().t()
    if softcap > 0:
        logits = torch.tanh(logits / softcap) * softcap
    p_yes = torch.sigmoid(logits[:, 0] - logits[:, 1])
    return logits.float(), p_yes.float()


@triton.jit
def _tanh(x):
    # tanh without overflow: exp of a non-positive argument only.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit(do_not_specialize=["N"])
def _yesno_head_kernel(
    # pointers
    hidden_ptr,  # [M, H] fp16/bf16/fp32, row stride stride_hidden, unit column stride
    index_ptr,  # [N] int64 rows of hidden to score (read only when HAS_INDEX)
    norm_ptr,  # [H] final-norm weight (read only when HAS_NORM)
    head_ptr,  # [2, H] LM-head rows (Yes, No), row stride stride_head
    logits_ptr,  # [N, 2] fp32 out
    prob_ptr,  # [N] fp32 out: P(Yes) / (P(Yes) + P(No))
    # dimensions and strides
    N,
    H,
    stride_hidden,
    stride_head,
    # scalars
    eps,
    softcap,
    # meta-parameters
    HAS_INDEX: tl.constexpr,
    HAS_NORM: tl.constexpr,
    NORM_PLUS_ONE: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N]
    row_ok = rows < N
    if HAS_INDEX:
        src = tl.load(index_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    else:
        src = rows.to(tl.int64)
    row_base = hidden_ptr + src * stride_hidden  # [BLOCK_N] pointers to row starts

    sumsq = tl.zeros([BLOCK_N], dtype=tl.float32)
    dot_yes = tl.zeros([BLOCK_N], dtype=tl.float32)
    dot_no = tl.zeros([BLOCK_N], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        cols = h0 + tl.arange(0, BLOCK_H)  # [BLOCK_H]
        col_ok = cols < H
        x = tl.load(row_base[:, None] + cols[None, :], mask=row_ok[:, None] & col_ok[None, :],
                    other=0.0).to(tl.float32)  # [BLOCK_N, BLOCK_H]
        h_yes = tl.load(head_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        h_no = tl.load(head_ptr + stride_head + cols, mask=col_ok, other=0.0).to(tl.float32)
        if HAS_NORM:
            w = tl.load(norm_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
            if NORM_PLUS_ONE:
                w = w + 1.0
            sumsq += tl.sum(x * x, axis=1)
            xw = x * w[None, :]
        else:
            xw = x
        dot_yes += tl.sum(xw * h_yes[None, :], axis=1)
        dot_no += tl.sum(xw * h_no[None, :], axis=1)

    if HAS_NORM:
        rstd = 1.0 / tl.sqrt(sumsq / H + eps)
        l_yes = dot_yes * rstd
        l_no = dot_no * rstd
    else:
        l_yes = dot_yes
        l_no = dot_no
    if HAS_SOFTCAP:
        l_yes = _tanh(l_yes / softcap) * softcap
        l_no = _tanh(l_no / softcap) * softcap
    # sigmoid(d) with exp of a non-positive argument only: no overflow, no NaN.
    d = l_yes - l_no
    e = tl.exp(-tl.abs(d))
    p = tl.where(d >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    tl.store(logits_ptr + rows * 2, l_yes, mask=row_ok)
    tl.store(logits_ptr + rows * 2 + 1, l_no, mask=row_ok)
    tl.store(prob_ptr + rows, p, mask=row_ok)


def _check_float(name: str, t: torch.Tensor, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")


def block_sizes(hidden_size: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_H, num_warps) for a hidden size: fixed per model, so N never recompiles."""
    block_h = min(triton.next_power_of_2(max(hidden_size, 16)), MAX_BLOCK_H)
    block_n = max(1, min(64, TILE_ELEMENTS // block_h))
    num_warps = 4 if block_n * block_h <= 4096 else 8
    return block_n, block_h, num_warps


def yesno_head(hidden: torch.Tensor, head_rows: torch.Tensor, norm_weight: torch.Tensor | None = None, *,
               eps: float = 1e-6, norm_plus_one: bool = False, softcap: float = 0.0,
               index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """P(Yes) / (P(Yes) + P(No)) from final hidden states, in one kernel.

    Args:
        hidden: [M, H] fp16/bf16/fp32, final hidden states; rows may be strided, columns must be
            contiguous. Pre-norm states when `norm_weight` is given (the norm is fused).
        head_rows: [2, H] the LM-head rows of the Yes and No tokens (tied embedding rows for Gemma).
        norm_weight: [H] the final RMSNorm weight, or None when `hidden` is already normalised.
        eps: the RMSNorm epsilon (config.rms_norm_eps).
        norm_plus_one: Gemma's RMSNorm scales by (1 + w) instead of w.
        softcap: final logit soft-capping (Gemma 2's final_logit_softcapping); 0 = off.
        index: int32/int64 [N] rows of `hidden` to score (scoring positions of a flattened packed
            batch); None scores every row.

    Returns:
        (logits float32 [N, 2], p_yes float32 [N]) on hidden's device. Equals
        `yesno_head_reference` within fp32 accumulation error.
    """
    _check_float("hidden", hidden, 2)
    _check_float("head_rows", head_rows, 2)
    m, h = hidden.shape
    if head_rows.shape != (2, h):
        raise ValueError(f"head_rows must have shape (2, {h}) to match hidden, got {tuple(head_rows.shape)}")
    if h == 0:
        raise ValueError("hidden has 0 columns")
    if hidden.stride(1) != 1 or head_rows.stride(1) != 1:
        raise ValueError("hidden and head_rows need contiguous columns (stride 1 along H); call .contiguous()")
    if norm_weight is not None:
        _check_float("norm_weight", norm_weight, 1)
        if norm_weight.shape[0] != h or not norm_weight.is_contiguous():
            raise ValueError(f"norm_weight must be contiguous with shape ({h},), got {tuple(norm_weight.shape)}")
    if softcap < 0:
        raise ValueError(f"softcap must be >= 0 (0 = off), got {softcap}")
    if eps <= 0 and norm_weight is not None:
        raise ValueError(f"eps must be > 0, got {eps}")
    if index is not None:
        if index.dtype not in (torch.int32, torch.int64) or index.ndim != 1:
            raise TypeError(f"index must be a 1-D int32/int64 tensor, got {index.dtype} {tuple(index.shape)}")
        if not index.is_contiguous():
            raise ValueError("index must be contiguous")
        n = index.shape[0]
    else:
        n = m
    devices = {t.device for t in (hidden, head_rows, norm_weight, index) if t is not None}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")

    logits = torch.empty((n, 2), dtype=torch.float32, device=hidden.device)
    p_yes = torch.empty((n,), dtype=torch.float32, device=hidden.device)
    if n == 0:
        return logits, p_yes
    block_n, block_h, num_warps = block_sizes(h)
    grid = (triton.cdiv(n, block_n),)
    # Launch on hidden's device, not the current one (else: "an illegal memory access" on multi-GPU).
    with torch.cuda.device(hidden.device) if hidden.is_cuda else nullcontext():
        _yesno_head_kernel[grid](
            hidden, index if index is not None else hidden, norm_weight if norm_weight is not None else hidden,
            head_rows, logits, p_yes,
            n, h, hidden.stride(0), head_rows.stride(0),
            float(eps), float(softcap) if softcap > 0 else 1.0,
            HAS_INDEX=index is not None, HAS_NORM=norm_weight is not None, NORM_PLUS_ONE=bool(norm_plus_one),
            HAS_SOFTCAP=softcap > 0, BLOCK_N=block_n, BLOCK_H=block_h, num_warps=num_warps,
        )
    return logits, p_yes

