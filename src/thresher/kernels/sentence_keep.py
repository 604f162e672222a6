"""Token-mask thresholding: per-token keep probabilities -> per-sentence scores, keep flags and
per-passage aggregates, in one kernel.

An encoder pruner (Provence) emits a keep probability per token; the engine needs, per
sentence, the mean probability (or the majority vote of binarised tokens), a keep flag at a
threshold, and per passage the kept count and kept length. The packer gives every token a
global sentence id (-1 = padding/question/special), so this is a segmented reduction over the
flat [B * T] token axis:

1. each program takes BLOCK_T consecutive tokens, runs a segmented scan (reset where the
   sentence id changes) and adds each run's (sum, count, passing) to its sentence with one
   atomic per run, not per token (tokens of a sentence are contiguous in the packed rows);
2. the last program to finish (an atomic ticket; fused) or a second launch (many sentences)
   turns the sums into scores, flags and passage aggregates.

`sentence_keep_reference` is the twin that defines the result (float64 torch math, any device);
`engine/reduce.py` (segment_mean + keep_by_threshold) is the NumPy CPU path it agrees with.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MODES = ("mean", "vote")
MIN_BLOCK_T, BLOCK_T, BIG_BLOCK_T = 128, 1024, 4096  # tokens per program: a power of two, so at
# most five compiled variants exist whatever the token count; small batches get more programs,
# very large ones (> BIG_BATCH tokens) fewer, so the one ticket atomic per program stays cheap.
BIG_BATCH = 1 << 22
BLOCK_S = 1024  # sentences per finalize step
# Up to this many sentences the last program finalizes them all (one launch); beyond, a second
# launch with one program per BLOCK_S sentences is faster than one program looping.
FUSED_MAX_SENTENCES = 8192


@dataclass(frozen=True)
class SentenceKeep:
    """Per-sentence and per-passage results (all on the input's device).

    score: float32 [S], mean keep probability ("mean") or fraction of tokens passing the
        threshold ("vote"); 0 for a sentence without tokens.
    keep: bool [S]. "mean": score >= threshold (> when strict). "vote": more than half of the
        sentence's tokens pass the threshold (a token passes when p >= threshold, > when strict).
    tokens: int32 [S], tokens per sentence.
    passage_kept: int32 [P], kept sentences per passage.
    passage_kept_length: int32 [P], summed lengths of kept sentences (lengths = the given
        sentence_lengths, e.g. characters, else token counts).
    passage_length: int32 [P], summed lengths of all sentences.
    passage_max_score: float32 [P], best sentence score (0 for a passage without sentences).
    """

    score: torch.Tensor
    keep: torch.Tensor
    tokens: torch.Tensor
    passage_kept: torch.Tensor
    passage_kept_length: torch.Tensor
    passage_length: torch.Tensor
    passage_max_score: torch.Tensor


def sentence_keep_reference(values: torch.Tensor, labels: torch.Tensor, sentence_passage: torch.Tensor,
                            n_passages: int, threshold: float, *, mode: str = "mean", strict: bool = False,
                            sentence_lengths: torch.Tensor | None = None) -> SentenceKeep:
    """The twin: what `sentence_keep` computes, in float64 torch ops (no loops).

    values: [B, T] keep probabilities or [B, T, 2] two-class logits (index 1 = keep);
    labels: int [B, T] global sentence id, -1 = ignored; sentence_passage: int [S] passage of
    each sentence in [0, n_passages); sentence_lengths: int [S] or None (token counts).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    v = values.double()
    p = torch.sigmoid(v[..., 1] - v[..., 0]) if values.ndim == 3 else v
    lab = labels.reshape(-1).long()
    p = p.reshape(-1)
    ok = lab >= 0
    lab, p = lab[ok], p[ok]
    n_sent = sentence_passage.shape[0]
    device = values.device
    count = torch.zeros(n_sent, dtype=torch.float64, device=device).index_add_(0, lab, torch.ones_like(p))
    passing = (p > threshold) if strict else (p >= threshold)
    n_pass = torch.zeros(n_sent, dtype=torch.float64, device=device).index_add_(0, lab, passing.double())
    sums = torch.zeros(n_sent, dtype=torch.float64, device=device).index_add_(0, lab, p)
    if mode == "vote":
        score = n_pass / count.clamp(min=1)
        keep = 2 * n_pass > count
    else:
        score = sums / count.clamp(min=1)
        keep = (score > threshold) if strict else (score >= threshold)
    tokens = count.to(torch.int32)
    length = tokens if sentence_lengths is None else sentence_lengths.to(torch.int32)
    pid = sentence_passage.long()
    zeros = torch.zeros(n_passages, dtype=torch.int32, device=device)
    max_score = torch.zeros(n_passages, dtype=torch.float64, device=device).scatter_reduce(
        0, pid, score, reduce="amax", include_self=True)
    return SentenceKeep(
        score=score.float(), keep=keep, tokens=tokens,
        passage_kept=zeros.clone().index_add_(0, pid, keep.to(torch.int32)),
        passage_kept_length=zeros.clone().index_add_(0, pid, length * keep.to(torch.int32)),
        passage_length=zeros.clone().index_add_(0, pid, length),
        passage_max_score=max_score.float(),
    )


@triton.jit
def _segmented_sum(first_a, sum_a, count_a, pass_a, first_b, sum_b, count_b, pass_b):
    # Combine of a segmented scan: a run restarts where b starts a new sentence.
    return (first_a | first_b, tl.where(first_b != 0, sum_b, sum_a + sum_b),
            tl.where(first_b != 0, count_b, count_a + count_b), tl.where(first_b != 0, pass_b, pass_a + pass_b))


@triton.jit
def _finalize(
    sum_ptr,  # [S] fp32 summed keep probabilities
    count_ptr,  # [S] int32 tokens per sentence
    pass_ptr,  # [S] int32 tokens passing the threshold
    sent_passage_ptr,  # [S] int32 passage of each sentence
    sent_length_ptr,  # [S] int32 sentence lengths (read only when HAS_LENGTHS)
    score_ptr,  # [S] fp32 out
    keep_ptr,  # [S] int8 out
    p_kept_ptr,  # [P] int32 out (zero-initialised)
    p_kept_len_ptr,  # [P] int32 out (zero-initialised)
    p_len_ptr,  # [P] int32 out (zero-initialised)
    p_max_ptr,  # [P] fp32 out (zero-initialised)
    s0,
    S,
    threshold,
    VOTE: tl.constexpr,
    STRICT: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Sentences [s0, s0 + BLOCK): scores, flags, and their share of the passage aggregates.
    s = s0 + tl.arange(0, BLOCK)
    ok = s < S
    # .cg: read the other programs' atomics from L2, never a stale L1 line.
    sums = tl.load(sum_ptr + s, mask=ok, other=0.0, cache_modifier=".cg")
    count = tl.load(count_ptr + s, mask=ok, other=0, cache_modifier=".cg")
    passing = tl.load(pass_ptr + s, mask=ok, other=0, cache_modifier=".cg")
    denom = tl.maximum(count, 1).to(tl.float32)
    if VOTE:
        score = passing.to(tl.float32) / denom
        keep = 2 * passing > count
    else:
        score = sums / denom
        if STRICT:
            keep = score > threshold
        else:
            keep = score >= threshold
    tl.store(score_ptr + s, score, mask=ok)
    tl.store(keep_ptr + s, keep.to(tl.int8), mask=ok)
    if HAS_LENGTHS:
        length = tl.load(sent_length_ptr + s, mask=ok, other=0)
    else:
        length = count
    pid = tl.load(sent_passage_ptr + s, mask=ok, other=0)
    kept = keep.to(tl.int32)
    tl.atomic_add(p_kept_ptr + pid, kept, mask=ok)
    tl.atomic_add(p_kept_len_ptr + pid, kept * length, mask=ok)
    tl.atomic_add(p_len_ptr + pid, length, mask=ok)
    tl.atomic_max(p_max_ptr + pid, score, mask=ok)


@triton.jit(do_not_specialize=["M", "T", "S", "stride_b", "stride_t"])
def _sentence_keep_kernel(
    # pointers
    values_ptr,  # [B, T] probabilities or [B, T, 2] logits; strides stride_b, stride_t, stride_c
    labels_ptr,  # [B * T] int32 contiguous, sentence id or -1
    sum_ptr,  # [S] fp32 workspace (zero-initialised)
    count_ptr,  # [S] int32 workspace (zero-initialised)
    pass_ptr,  # [S] int32 workspace (zero-initialised)
    ticket_ptr,  # [1] int32 workspace (zero-initialised): programs done
    sent_passage_ptr, sent_length_ptr, score_ptr, keep_ptr, p_kept_ptr, p_kept_len_ptr, p_len_ptr, p_max_ptr,
    # dimensions and strides
    M,  # B * T
    T,
    S,
    stride_b,
    stride_t,
    stride_c,
    # scalars
    threshold,
    # meta-parameters
    TWO_CLASS: tl.constexpr,
    VOTE: tl.constexpr,
    STRICT: tl.constexpr,
    HAS_LENGTHS: tl.constexpr,
    FUSED: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_FIN: tl.constexpr,
):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    m = pid * BLOCK + lane  # [BLOCK] flat token index
    in_range = m < M
    lab = tl.load(labels_ptr + m, mask=in_range, other=-1)
    prev = tl.load(labels_ptr + m - 1, mask=in_range & (m > 0), other=-1)
    nxt = tl.load(labels_ptr + m + 1, mask=(m + 1) < M, other=-1)
    valid = lab >= 0
    b = (m // T).to(tl.int64)
    t = (m % T).to(tl.int64)
    ptr = values_ptr + b * stride_b + t * stride_t
    if TWO_CLASS:
        l0 = tl.load(ptr, mask=valid, other=0.0).to(tl.float32)
        l1 = tl.load(ptr + stride_c, mask=valid, other=0.0).to(tl.float32)
        d = l1 - l0
        e = tl.exp(-tl.abs(d))
        p = tl.where(d >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    else:
        p = tl.load(ptr, mask=valid, other=0.0).to(tl.float32)
    p = tl.where(valid, p, 0.0)
    if STRICT:
        passes = p > threshold
    else:
        passes = p >= threshold
    one = valid.to(tl.int32)
    passing = (passes & valid).to(tl.int32)
    first = ((lab != prev) | (lane == 0)).to(tl.int32)
    _, run_sum, run_count, run_pass = tl.associative_scan((first, p, one, passing), 0, _segmented_sum)
    run_end = valid & ((lab != nxt) | (lane == BLOCK - 1))
    target = tl.where(run_end, lab, 0)
    tl.atomic_add(sum_ptr + target, run_sum, mask=run_end)
    tl.atomic_add(count_ptr + target, run_count, mask=run_end)
    tl.atomic_add(pass_ptr + target, run_pass, mask=run_end)
    if FUSED:
        # Every thread's atomics are issued before the ticket (barrier); acq_rel on the ticket
        # publishes them to the last program, which then reads the sums with .cg loads.
        tl.debug_barrier()
        ticket = tl.atomic_add(ticket_ptr, 1, sem="acq_rel")
        if ticket == tl.num_programs(0) - 1:
            for s0 in range(0, S, BLOCK_FIN):
                _finalize(sum_ptr, count_ptr, pass_ptr, sent_passage_ptr, sent_length_ptr, score_ptr, keep_ptr,
                          p_kept_ptr, p_kept_len_ptr, p_len_ptr, p_max_ptr, s0, S, threshold,
                          VOTE, STRICT, HAS_LENGTHS, BLOCK_FIN)


@triton.jit(do_not_specialize=["S"])
def _finalize_kernel(sum_ptr, count_ptr, pass_ptr, sent_passage_ptr, sent_length_ptr, score_ptr, keep_ptr,
                     p_kept_ptr, p_kept_len_ptr, p_len_ptr, p_max_ptr, S, threshold,
                     VOTE: tl.constexpr, STRICT: tl.constexpr, HAS_LENGTHS: tl.constexpr, BLOCK: tl.constexpr):
    _finalize(sum_ptr, count_ptr, pass_ptr, sent_passage_ptr, sent_length_ptr, score_ptr, keep_ptr,
              p_kept_ptr, p_kept_len_ptr, p_len_ptr, p_max_ptr, tl.program_id(0) * BLOCK, S, threshold,
              VOTE, STRICT, HAS_LENGTHS, BLOCK)


def _check_int(name: str, t: torch.Tensor, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be int32 (the packer's label dtype), got {t.dtype}")
    if t.ndim != ndim or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous {ndim}-D tensor, got shape {tuple(t.shape)}")


def sentence_keep(values: torch.Tensor, labels: torch.Tensor, sentence_passage: torch.Tensor, n_passages: int,
                  threshold: float, *, mode: str = "mean", strict: bool = False,
                  sentence_lengths: torch.Tensor | None = None, fused: bool | None = None,
                  check_labels: bool = False) -> SentenceKeep:
    """Per-sentence scores, keep flags and per-passage aggregates from token keep values.

    Args:
        values: [B, T] keep probabilities, or [B, T, 2] two-class logits (index 1 = keep; the
            probability is softmax over the pair); fp16/bf16/fp32, any strides.
        labels: int32 [B, T] contiguous, the global sentence id of each token in [0, S) or -1
            (padding, question, special tokens): PackedRows.labels from the packer.
        sentence_passage: int32 [S] passage index of each sentence in [0, n_passages).
        n_passages: P, the size of the per-passage outputs.
        threshold: keep threshold on probabilities (tokens in "vote" mode, sentences in "mean").
        mode: "mean" (mean token probability) or "vote" (majority of binarised tokens).
        strict: compare with > instead of >= (Provence keeps strictly above its threshold).
        sentence_lengths: int32 [S] lengths summed into the passage aggregates (characters for
            compression rates); None = token counts.
        fused: finalize in the last program of the same launch (one kernel); False = a second
            launch, one program per 1024 sentences; None = fused up to FUSED_MAX_SENTENCES.
        check_labels: verify every label is < S and every passage id < P (synchronises the
            device; out-of-range ids would otherwise write out of bounds).

    Returns:
        SentenceKeep (see its docstring); equals `sentence_keep_reference` up to fp32 sums.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(values, torch.Tensor) or values.dtype not in FLOAT_DTYPES:
        raise TypeError(f"values must be a float16/bfloat16/float32 tensor, got {getattr(values, 'dtype', type(values))}")
    if values.ndim not in (2, 3) or (values.ndim == 3 and values.shape[2] != 2):
        raise ValueError(f"values must be [B, T] probabilities or [B, T, 2] logits, got {tuple(values.shape)}")
    _check_int("labels", labels, 2)
    if tuple(labels.shape) != tuple(values.shape[:2]):
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal values' [B, T] {tuple(values.shape[:2])}")
    _check_int("sentence_passage", sentence_passage, 1)
    n_sent = sentence_passage.shape[0]
    if sentence_lengths is not None:
        _check_int("sentence_lengths", sentence_lengths, 1)
        if sentence_lengths.shape[0] != n_sent:
            raise ValueError(f"sentence_lengths has {sentence_lengths.shape[0]} entries, sentence_passage {n_sent}")
    if n_passages < 0:
        raise ValueError(f"n_passages must be >= 0, got {n_passages}")
    if not (threshold == threshold):  # NaN
        raise ValueError("threshold is NaN")
    device = values.device
    devices = {t.device for t in (values, labels, sentence_passage, sentence_lengths) if t is not None}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    if check_labels:
        if labels.numel() and int(labels.max()) >= n_sent:
            raise ValueError(f"labels hold sentence id {int(labels.max())} but only {n_sent} sentences exist")
        if n_sent and (int(sentence_passage.max()) >= n_passages or int(sentence_passage.min()) < 0):
            raise ValueError(f"sentence_passage holds ids outside [0, {n_passages})")

    b, t = labels.shape
    m = b * t
    sums = torch.zeros(n_sent, dtype=torch.float32, device=device)
    counts = torch.zeros((3, n_sent), dtype=torch.int32, device=device)  # rows: count, passing, ticket
    ticket = counts[2, :1] if n_sent else torch.zeros(1, dtype=torch.int32, device=device)
    ints = torch.zeros((3, n_passages), dtype=torch.int32, device=device)
    out = SentenceKeep(
        score=torch.empty(n_sent, dtype=torch.float32, device=device),
        keep=torch.empty(n_sent, dtype=torch.bool, device=device),
        tokens=counts[0],
        passage_kept=ints[0], passage_kept_length=ints[1], passage_length=ints[2],
        passage_max_score=torch.zeros(n_passages, dtype=torch.float32, device=device),
    )
    if n_sent == 0:
        return out
    if fused is None:
        fused = n_sent <= FUSED_MAX_SENTENCES
    keep_i8 = out.keep.view(torch.int8)
    stride_c = values.stride(2) if values.ndim == 3 else 0
    finalize_args = (sentence_passage, sentence_lengths if sentence_lengths is not None else sentence_passage,
                     out.score, keep_i8, ints[0], ints[1], ints[2], out.passage_max_score)
    block_t = BIG_BLOCK_T if m > BIG_BATCH else min(BLOCK_T, max(MIN_BLOCK_T, triton.next_power_of_2(max(m, 1))))
    grid = (max(1, triton.cdiv(m, block_t)),)
    with torch.cuda.device(device) if values.is_cuda else nullcontext():
        _sentence_keep_kernel[grid](
            values, labels, sums, counts[0], counts[1], ticket, *finalize_args,
            m, max(t, 1), n_sent, values.stride(0), values.stride(1), stride_c, float(threshold),
            TWO_CLASS=values.ndim == 3, VOTE=mode == "vote", STRICT=bool(strict),
            HAS_LENGTHS=sentence_lengths is not None, FUSED=bool(fused), BLOCK=block_t, BLOCK_FIN=BLOCK_S,
            num_warps=8 if block_t > BLOCK_T else 4,
        )
        if not fused:
            _finalize_kernel[(triton.cdiv(n_sent, BLOCK_S),)](
                sums, counts[0], counts[1], *finalize_args, n_sent, float(threshold),
                VOTE=mode == "vote", STRICT=bool(strict), HAS_LENGTHS=sentence_lengths is not None,
                BLOCK=BLOCK_S, num_warps=4,
            )
    return out
