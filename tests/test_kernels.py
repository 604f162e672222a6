"""Triton kernels vs their reference twins (TRITON_INTERPRET=1 on CPU tensors; conftest sets it).

Shapes are drawn fresh per case: hidden sizes and token counts that are not multiples of the
block sizes, empty sentences, a single token, tokens spanning several programs. Tolerances
come from fp32's rounding error (both kernel and twin read the same fp16/bf16/fp32 inputs; the
kernel accumulates in fp32, the twin in fp64). GPU-only cases are skipped without CUDA, and
nothing here touches CUDA at collection time.
"""

from __future__ import annotations

import math
import os
import random
import zlib

import numpy as np
import pytest
import torch

from thresher.engine.reduce import keep_by_threshold, segment_mean
from thresher.kernels.sentence_keep import BLOCK_T, sentence_keep, sentence_keep_reference
from thresher.kernels.yesno_head import block_sizes, yesno_head, yesno_head_reference

EPS32 = torch.finfo(torch.float32).eps
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Fresh shapes every run; a failure message names the seed, THRESHER_KERNEL_SEED=<seed> replays it.
BASE_SEED = int(os.environ.get("THRESHER_KERNEL_SEED", random.randrange(2**31)))


def _seed(*key) -> int:
    return (BASE_SEED + zlib.crc32(repr(key).encode())) % 2**31


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- fused yes/no head

HEAD_VARIANTS = {
    "plain": {},
    "llama_norm": {"norm": True, "eps": 1e-5},
    "gemma_norm": {"norm": True, "norm_plus_one": True, "eps": 1e-6},
    "gemma2_softcap_index": {"norm": True, "norm_plus_one": True, "eps": 1e-6, "softcap": 30.0, "index": True},
}


def _head_case(seed: int, dtype: torch.dtype, variant: dict, h: int | None = None, n: int | None = None):
    g = _gen(seed)
    h = h or int(torch.randint(3, 2300, (1,), generator=g))
    m = n if n is not None else int(torch.randint(1, 40, (1,), generator=g))
    hidden = (torch.randn(m, h, generator=g) * 3).to(dtype)
    head = (torch.randn(2, h, generator=g) * 0.05).to(dtype)
    kwargs = {}
    if variant.get("norm"):
        kwargs["norm_weight"] = (torch.randn(h, generator=g) * 0.3).to(dtype)
        kwargs["norm_plus_one"] = variant.get("norm_plus_one", False)
        kwargs["eps"] = variant["eps"]
    if variant.get("softcap"):
        kwargs["softcap"] = variant["softcap"]
    if variant.get("index") and m:
        kwargs["index"] = torch.randint(0, m, (int(torch.randint(1, 2 * m + 1, (1,), generator=g)),), generator=g)
    return hidden, head, kwargs


def _head_tolerance(hidden, head, kwargs):
    """fp32 accumulation error bound per row: ~sqrt(H) rounding steps on the absolute terms."""
    x = hidden.double() if kwargs.get("index") is None else hidden.double()[kwargs["index"]]
    scale = torch.ones(x.shape[0], dtype=torch.float64)
    w = torch.ones(x.shape[1], dtype=torch.float64)
    if "norm_weight" in kwargs:
        w = kwargs["norm_weight"].double() + (1.0 if kwargs.get("norm_plus_one") else 0.0)
        scale = torch.rsqrt(x.pow(2).mean(-1) + kwargs["eps"])
    magnitude = (x.abs() * w.abs()) @ head.double().abs().t() * scale[:, None]  # [N, 2]
    return (8 * math.sqrt(x.shape[1]) * EPS32 * magnitude + 4 * EPS32).float()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", list(HEAD_VARIANTS), ids=str)
def test_yesno_head_matches_twin(dtype, variant):
    for seed in range(3):
        case_seed = _seed(str(dtype), variant, seed)
        hidden, head, kwargs = _head_case(case_seed, dtype, HEAD_VARIANTS[variant])
        logits, p = yesno_head(hidden, head, **kwargs)
        ref_logits, ref_p = yesno_head_reference(hidden, head, **kwargs)
        tol = _head_tolerance(hidden, head, kwargs)
        assert logits.dtype == p.dtype == torch.float32
        assert torch.all((logits - ref_logits).abs() <= tol), f"seed {case_seed}: {(logits - ref_logits).abs().max()}"
        # dP/d(l_yes - l_no) <= 1/4
        assert torch.all((p - ref_p).abs() <= 0.25 * tol.sum(1) + 2 * EPS32), f"seed {case_seed}"
        assert not torch.isnan(p).any()


def test_yesno_head_block_edges_and_single_row():
    block_n, block_h, _ = block_sizes(2048)
    for h in (1, block_h - 1, block_h, block_h + 1, 2 * block_h + 7):
        for n in (1, block_n - 1, block_n + 1):
            hidden, head, kwargs = _head_case(_seed(h, n), torch.float32, HEAD_VARIANTS["gemma_norm"], h=h, n=n)
            logits, p = yesno_head(hidden, head, **kwargs)
            ref_logits, ref_p = yesno_head_reference(hidden, head, **kwargs)
            assert logits.shape == (n, 2) and p.shape == (n,)
            assert torch.all((logits - ref_logits).abs() <= _head_tolerance(hidden, head, kwargs))


def test_yesno_head_zero_rows_and_strided_rows():
    hidden = torch.randn(5, 64)
    head = torch.randn(2, 64)
    logits, p = yesno_head(hidden[:0], head)
    assert logits.shape == (0, 2) and p.shape == (0,)
    # Rows taken from a wider buffer (stride 128): no copy, same answer.
    wide = torch.randn(6, 128)
    view = wide[:, :64]
    _, p_view = yesno_head(view, head)
    _, p_copy = yesno_head(view.contiguous(), head)
    torch.testing.assert_close(p_view, p_copy, rtol=0, atol=0)


def test_yesno_head_never_nan_on_extremes():
    h = 96
    hidden = torch.zeros(4, h, dtype=torch.float16)
    hidden[1] = 6e4  # fp16 max region: squares only exist in fp32
    hidden[2] = -6e4
    hidden[3, ::2] = 1e-7
    head = torch.zeros(2, h, dtype=torch.float16)
    head[0] = 50.0
    head[1] = -50.0
    for kwargs in ({}, {"norm_weight": torch.ones(h, dtype=torch.float16)},
                   {"norm_weight": torch.zeros(h, dtype=torch.float16), "norm_plus_one": True, "softcap": 30.0}):
        logits, p = yesno_head(hidden, head, **kwargs)
        assert not torch.isnan(p).any() and not torch.isnan(logits).any()
        assert torch.all((p >= 0) & (p <= 1))
        assert p[0] == 0.5  # all-zero row: equal logits
    _, p = yesno_head(hidden, head)
    assert p[1] == 1.0 and p[2] == 0.0  # saturates, no overflow


def test_yesno_head_rejects_bad_input():
    hidden = torch.randn(4, 32)
    head = torch.randn(2, 32)
    with pytest.raises(ValueError, match=r"head_rows must have shape \(2, 32\)"):
        yesno_head(hidden, torch.randn(3, 32))
    with pytest.raises(TypeError, match="hidden must be float16"):
        yesno_head(hidden.long(), head)
    with pytest.raises(ValueError, match="contiguous columns"):
        yesno_head(torch.randn(32, 4).t(), head)
    with pytest.raises(ValueError, match="softcap"):
        yesno_head(hidden, head, softcap=-1.0)
    with pytest.raises(ValueError, match="norm_weight"):
        yesno_head(hidden, head, torch.ones(31))
    with pytest.raises(TypeError, match="index"):
        yesno_head(hidden, head, index=torch.zeros(2))


# ---------------------------------------------------------------- sentence keep


def _keep_case(seed: int, dtype: torch.dtype, two_class: bool, b: int | None = None, t: int | None = None):
    """Packed-like rows: runs of sentence ids (some sentences never appear), -1 padding."""
    g = _gen(seed)
    b = b or int(torch.randint(1, 4, (1,), generator=g))
    t = t or int(torch.randint(1, 400, (1,), generator=g))  # the interpreter scans one lane at a time
    n_sent = int(torch.randint(1, 30, (1,), generator=g))
    n_pass = int(torch.randint(1, 6, (1,), generator=g))
    # Runs: random lengths, random sentence per run (a sentence may recur in another row/tile).
    flat = torch.empty(b * t, dtype=torch.int32)
    pos = 0
    while pos < flat.numel():
        run = int(torch.randint(1, 60, (1,), generator=g))
        sid = int(torch.randint(-1, n_sent, (1,), generator=g))
        flat[pos:pos + run] = sid
        pos += run
    labels = flat.reshape(b, t)
    labels[:, -max(1, t // 10):] = -1  # row padding
    if n_sent > 2:
        labels[labels == n_sent - 1] = -1  # an empty sentence for sure
    shape = (b, t, 2) if two_class else (b, t)
    values = torch.randn(shape, generator=g) * 3 if two_class else torch.rand(shape, generator=g)
    sentence_passage = torch.sort(torch.randint(0, n_pass, (n_sent,), generator=g)).values.to(torch.int32)
    lengths = torch.randint(1, 300, (n_sent,), generator=g).to(torch.int32)
    return values.to(dtype), labels, sentence_passage, n_pass, lengths


def _assert_keep_matches(out, ref, threshold, mode, seed=None):
    # fp32 running sums: <= count rounding steps on values in [0, 1], divided by count.
    tol = 8 * EPS32 * out.tokens.clamp(min=1).float() + 4 * EPS32
    assert torch.equal(out.tokens, ref.tokens), f"seed {seed}"
    assert torch.all((out.score - ref.score).abs() <= tol), f"seed {seed}: {(out.score - ref.score).abs().max()}"
    assert not torch.isnan(out.score).any()
    if mode == "vote":
        assert torch.equal(out.keep, ref.keep)
    else:
        decided = (ref.score - threshold).abs() > tol  # away from the threshold, flags must agree
        assert torch.equal(out.keep[decided], ref.keep[decided])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("two_class", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("mode", ["mean", "vote"])
def test_sentence_keep_matches_twin(dtype, two_class, mode):
    seed = _seed(str(dtype), two_class, mode)
    values, labels, sent_passage, n_pass, lengths = _keep_case(seed, dtype, two_class)
    strict = bool(seed % 2)
    use_lengths = lengths if seed % 3 else None
    for fused in (True, False) if dtype == torch.float32 else (True,):
        out = sentence_keep(values, labels, sent_passage, n_pass, 0.5, mode=mode, strict=strict,
                            sentence_lengths=use_lengths, fused=fused, check_labels=True)
        ref = sentence_keep_reference(values, labels, sent_passage, n_pass, 0.5, mode=mode, strict=strict,
                                      sentence_lengths=use_lengths)
        _assert_keep_matches(out, ref, 0.5, mode, seed)
        # Aggregates are exact given the kernel's own flags.
        length = out.tokens if use_lengths is None else use_lengths
        kept = out.keep.to(torch.int32)
        pid = sent_passage.long()
        assert torch.equal(out.passage_kept, torch.zeros(n_pass, dtype=torch.int32).index_add_(0, pid, kept))
        assert torch.equal(out.passage_kept_length,
                           torch.zeros(n_pass, dtype=torch.int32).index_add_(0, pid, kept * length))
        assert torch.equal(out.passage_length, ref.passage_length)
        assert torch.allclose(out.passage_max_score, ref.passage_max_score, rtol=0, atol=1e-5)


def test_sentence_keep_spans_several_programs_and_strided_values():
    # Tokens straddle program boundaries (BLOCK_T) and a sentence's run crosses one.
    b, t = 1, BLOCK_T + 37
    values, labels, sent_passage, n_pass, _ = _keep_case(_seed(7), torch.float32, True, b=b, t=t)
    labels[0, BLOCK_T - 5:BLOCK_T + 5] = 0
    wide = torch.randn(b, t, 3)
    wide[..., :2] = values  # [B, T, 2] view with stride 3 along T: no copy needed
    out = sentence_keep(wide[..., :2], labels, sent_passage, n_pass, 0.3)
    ref = sentence_keep_reference(values, labels, sent_passage, n_pass, 0.3)
    _assert_keep_matches(out, ref, 0.3, "mean")


def test_sentence_keep_single_token_empty_and_no_tokens():
    one = sentence_keep(torch.tensor([[0.7]]), torch.tensor([[0]], dtype=torch.int32),
                        torch.tensor([0], dtype=torch.int32), 1, 0.5)
    assert one.score.tolist() == pytest.approx([0.7]) and one.keep.tolist() == [True]
    assert one.tokens.tolist() == [1] and one.passage_kept.tolist() == [1]
    # No token carries a label: every sentence is empty -> score 0, never NaN.
    none = sentence_keep(torch.rand(2, 5), torch.full((2, 5), -1, dtype=torch.int32),
                         torch.tensor([0, 1, 1], dtype=torch.int32), 3, 0.5)
    assert none.score.tolist() == [0.0, 0.0, 0.0] and none.keep.tolist() == [False] * 3
    assert none.passage_length.tolist() == [0, 0, 0] and none.passage_max_score.tolist() == [0.0] * 3
    # Threshold 0 with >=: an empty sentence scores 0 and is kept, as reduce.keep_by_threshold does.
    zero = sentence_keep(torch.rand(1, 3), torch.tensor([[0, 0, -1]], dtype=torch.int32),
                         torch.tensor([0, 0], dtype=torch.int32), 1, 0.0)
    assert zero.keep.tolist() == [True, True]
    # No sentences at all.
    empty = sentence_keep(torch.rand(1, 4), torch.full((1, 4), -1, dtype=torch.int32),
                          torch.zeros(0, dtype=torch.int32), 2, 0.5)
    assert empty.score.shape == (0,) and empty.passage_kept.tolist() == [0, 0]


def test_sentence_keep_vote_differs_from_mean():
    # One confident token outweighs two just-below tokens in the mean, not in the vote.
    values = torch.tensor([[0.99, 0.4, 0.4]])
    labels = torch.tensor([[0, 0, 0]], dtype=torch.int32)
    sp = torch.tensor([0], dtype=torch.int32)
    assert sentence_keep(values, labels, sp, 1, 0.5, mode="mean").keep.tolist() == [True]
    vote = sentence_keep(values, labels, sp, 1, 0.5, mode="vote")
    assert vote.keep.tolist() == [False] and vote.score.tolist() == pytest.approx([1 / 3])


def test_sentence_keep_strict_threshold():
    values = torch.tensor([[0.5, 0.5]])
    labels = torch.tensor([[0, 1]], dtype=torch.int32)
    sp = torch.tensor([0, 0], dtype=torch.int32)
    assert sentence_keep(values, labels, sp, 1, 0.5).keep.tolist() == [True, True]
    assert sentence_keep(values, labels, sp, 1, 0.5, strict=True).keep.tolist() == [False, False]


def test_sentence_keep_rejects_bad_input():
    v = torch.rand(2, 3)
    lab = torch.zeros(2, 3, dtype=torch.int32)
    sp = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(TypeError, match="labels must be int32"):
        sentence_keep(v, lab.long(), sp, 1, 0.5)
    with pytest.raises(ValueError, match="labels shape"):
        sentence_keep(v, lab[:, :2].contiguous(), sp, 1, 0.5)
    with pytest.raises(ValueError, match=r"\[B, T, 2\]"):
        sentence_keep(torch.rand(2, 3, 3), lab, sp, 1, 0.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        sentence_keep(v, lab, sp, 1, 0.5, mode="median")
    with pytest.raises(ValueError, match="sentence id 4"):
        sentence_keep(v, torch.full((2, 3), 4, dtype=torch.int32), sp, 1, 0.5, check_labels=True)
    with pytest.raises(ValueError, match="outside"):
        sentence_keep(v, lab, torch.tensor([3], dtype=torch.int32), 1, 0.5, check_labels=True)


def test_sentence_keep_twin_agrees_with_numpy_cpu_path():
    """engine/reduce.py (the CPU production path) and the twin compute the same thing."""
    for seed in range(5):
        values, labels, sent_passage, n_pass, _ = _keep_case(_seed(100, seed), torch.float32, False)
        ref = sentence_keep_reference(values, labels, sent_passage, n_pass, 0.5)
        np_scores = segment_mean(values.numpy().reshape(-1), labels.numpy().reshape(-1), sent_passage.shape[0])
        np.testing.assert_allclose(ref.score.numpy(), np_scores, rtol=0, atol=1e-6)
        decided = np.abs(np_scores - 0.5) > 1e-6
        np.testing.assert_array_equal(ref.keep.numpy()[decided], keep_by_threshold(np_scores, 0.5)[decided])


# ---------------------------------------------------------------- on a GPU

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (kernels compile for GPUs only)")


@cuda
def test_kernels_on_cuda_match_twins():
    dev = torch.device("cuda")
    hidden, head, kwargs = _head_case(1, torch.bfloat16, HEAD_VARIANTS["gemma2_softcap_index"], h=2048, n=512)
    kwargs = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    logits, _ = yesno_head(hidden.to(dev), head.to(dev), **kwargs)
    ref_logits, _ = yesno_head_reference(hidden.to(dev), head.to(dev), **kwargs)
    cpu_kwargs = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    assert torch.all((logits - ref_logits).abs().cpu() <= _head_tolerance(hidden, head, cpu_kwargs))
    values, labels, sp, n_pass, lengths = _keep_case(2, torch.float16, True, b=8, t=3000)
    for fused in (True, False):
        out = sentence_keep(values.to(dev), labels.to(dev), sp.to(dev), n_pass, 0.5, fused=fused)
        ref = sentence_keep_reference(values, labels, sp, n_pass, 0.5)
        assert torch.equal(out.tokens.cpu(), ref.tokens)
        assert torch.allclose(out.score.cpu(), ref.score, rtol=0, atol=1e-5)


# ---------------------------------------------------------------- the torch backend on CPU tensors
# The GPU path's code (tree mask, fused head in place of the LM head, keep kernel after an encoder)
# runs here on CPU with the kernels interpreted, against one-prompt-per-sentence references.


def _tiny_causal_lm(kind: str):
    import transformers

    common = dict(vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=512)
    if kind == "llama":
        config = transformers.LlamaConfig(**common)
    elif kind == "gemma":
        config = transformers.GemmaConfig(**common)
    else:  # gemma2: soft-capping and sliding-window layers (window shorter than the prompts)
        config = transformers.Gemma2Config(**common, final_logit_softcapping=30.0, sliding_window=12)
    config._attn_implementation = "sdpa"
    torch.manual_seed(_seed(kind))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger norm weights than the zero init, so (1 + w) vs w matters
        model.model.norm.weight.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("kind", ["llama", "gemma", "gemma2"])
def test_torch_backend_tree_matches_one_prompt_per_sentence(kind):
    from thresher._native import pack_tree
    from thresher.engine.torch_backend import CausalYesNoTorch

    model = _tiny_causal_lm(kind)
    g = _gen(_seed(kind, "tree"))
    prefixes = [torch.randint(1, 96, (int(n),), generator=g).numpy() for n in (9, 14)]
    branches = [torch.randint(1, 96, (int(n),), generator=g).numpy() for n in (3, 5, 1, 7, 4)]
    group = np.array([0, 0, 0, 1, 1], np.int64)
    pcu = np.concatenate([[0], np.cumsum([len(p) for p in prefixes])]).astype(np.int64)
    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    rows = pack_tree(np.concatenate(prefixes), pcu, np.concatenate(branches), bcu, group, 22, 0)
    scorer = CausalYesNoTorch(model, yes_id=5, no_id=7, width_step=8)
    logits, p_yes = scorer.logits(rows["input_ids"], rows["position_ids"], rows["branch_ids"], rows["score_index"])
    with torch.no_grad():
        for k, branch in enumerate(branches):
            prompt = torch.from_numpy(np.concatenate([prefixes[group[k]], branch]))[None]
            full = model(input_ids=prompt).logits[0, -1]  # the reference: full-vocabulary logits
            ref = full[[5, 7]]
            assert torch.allclose(logits[k], ref, rtol=0, atol=1e-4), (k, logits[k], ref)
            assert abs(float(p_yes[k]) - float(torch.softmax(ref, 0)[0])) < 1e-4
    assert scorer.self_check() < 1e-5  # fp32: rounding only
    # The scorer hook returns the same numbers as NumPy.
    feeds = {k: rows[k] for k in ("input_ids", "position_ids", "branch_ids", "score_index")}
    np.testing.assert_allclose(scorer.runner()(feeds), logits.numpy(), rtol=0, atol=1e-6)


def test_torch_backend_encoder_pruner_matches_pair_at_a_time():
    import transformers

    from thresher.engine.batch import pack
    from thresher.engine.torch_backend import EncoderPrunerTorch

    config = transformers.DebertaV2Config(
        vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=512, relative_attention=True, position_buckets=32, norm_rel_ebd="layer_norm",
        pos_att_type=["p2c", "c2p"], position_biased_input=False, share_att_key=True, type_vocab_size=0)
    torch.manual_seed(_seed("deberta"))
    backbone = transformers.DebertaV2Model(config).eval()
    token_head = torch.nn.Linear(32, 2)
    rank_head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    g = _gen(_seed("pairs"))
    question = torch.randint(3, 120, (6,), generator=g)
    sentence_lens = [[5, 9, 3], [12], [30, 25], [4, 4, 4, 2], [1]]  # rows of 3 length groups
    seqs, labels, sentence_passage, sid = [], [], [], 0
    for p, lens in enumerate(sentence_lens):
        body = torch.randint(3, 120, (sum(lens),), generator=g)
        seqs.append(torch.cat([torch.tensor([1]), question, torch.tensor([2]), body, torch.tensor([2])]))
        lab = [-1] * (len(question) + 2)
        for n in lens:
            lab += [sid] * n
            sentence_passage.append(p)
            sid += 1
        labels.append(torch.tensor(lab + [-1], dtype=torch.int32))
    cu = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    packed = pack(torch.cat(seqs).numpy(), cu, torch.cat(labels).numpy(), row_len=128, max_seqs_per_row=1)
    pruner = EncoderPrunerTorch(backbone, token_head, rank_head, width_step=24)  # buckets wider than rows
    out = pruner.run(packed.input_ids, packed.segment_ids, packed.labels, packed.placement[:, 0],
                     np.array(sentence_passage, np.int32), 0.5, strict=True)
    with torch.no_grad():
        for p, seq in enumerate(seqs):  # the reference: one pair at a time, no padding
            hidden = backbone(input_ids=seq[None]).last_hidden_state
            probs = torch.softmax(token_head(hidden)[0], -1)[:, 1]
            ref = sentence_keep_reference(probs[None], labels[p][None], torch.tensor(sentence_passage, dtype=torch.int32),
                                          len(seqs), 0.5, strict=True)
            mine = torch.tensor(sentence_passage) == p
            torch.testing.assert_close(out.keep.score[mine], ref.score[mine], rtol=0, atol=1e-5)
            assert torch.allclose(out.rank[p], rank_head(hidden[:, 0]).reshape(()), atol=1e-5)
    assert out.keep.passage_length.tolist() == [sum(x) for x in sentence_lens]


def test_torch_backend_cuda_request_without_cuda_is_a_clear_error():
    from thresher.engine.torch_backend import resolve_device, resolve_dtype

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("int8")
    assert resolve_device("cpu").type == "cpu"


AOT_SCRIPT = r'''
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from thresher.kernels.sentence_keep import _finalize_kernel, _sentence_keep_kernel
from thresher.kernels.yesno_head import _yesno_head_kernel

arch = int(sys.argv[1])
head_sig = {"hidden_ptr": "*bf16", "index_ptr": "*i64", "norm_ptr": "*bf16", "head_ptr": "*bf16",
            "logits_ptr": "*fp32", "prob_ptr": "*fp32", "N": "i32", "H": "i32", "stride_hidden": "i32",
            "stride_head": "i32", "eps": "fp32", "softcap": "fp32"}
fin_sig = {"sum_ptr": "*fp32", "count_ptr": "*i32", "pass_ptr": "*i32", "sent_passage_ptr": "*i32",
           "sent_length_ptr": "*i32", "score_ptr": "*fp32", "keep_ptr": "*i8", "p_kept_ptr": "*i32",
           "p_kept_len_ptr": "*i32", "p_len_ptr": "*i32", "p_max_ptr": "*fp32", "S": "i32", "threshold": "fp32"}
keep_sig = {"values_ptr": "*bf16", "labels_ptr": "*i32", "sum_ptr": "*fp32", "count_ptr": "*i32",
            "pass_ptr": "*i32", "ticket_ptr": "*i32", **{k: v for k, v in fin_sig.items() if k not in
            ("sum_ptr", "count_ptr", "pass_ptr", "S", "threshold")},
            "M": "i32", "T": "i32", "S": "i32", "stride_b": "i32", "stride_t": "i32", "stride_c": "i32",
            "threshold": "fp32"}
cases = [
    (_yesno_head_kernel, head_sig, dict(HAS_INDEX=True, HAS_NORM=True, NORM_PLUS_ONE=True, HAS_SOFTCAP=True,
                                        BLOCK_N=8, BLOCK_H=1024)),
    (_sentence_keep_kernel, keep_sig, dict(TWO_CLASS=True, VOTE=False, STRICT=True, HAS_LENGTHS=True, FUSED=True,
                                           BLOCK=1024, BLOCK_FIN=1024)),
    (_finalize_kernel, fin_sig, dict(VOTE=True, STRICT=False, HAS_LENGTHS=False, BLOCK=1024)),
]
for fn, sig, consts in cases:
    sig = {**sig, **{k: "constexpr" for k in consts}}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", arch, 32),
                       options={"num_warps": 4})
    assert k.asm["cubin"], fn
print("ok")
'''


@pytest.mark.parametrize("arch", [90])  # H100/H200, the GPU machines here
def test_kernels_compile_for_gpus_ahead_of_time(arch):
    """The interpreter does not compile; this lowers every kernel to a cubin for sm_90 (H100/H200)
    with Triton's bundled ptxas: no GPU or driver needed."""
    import subprocess
    import sys
    from pathlib import Path

    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.is_file():
        pytest.skip(f"Triton's bundled ptxas is absent ({ptxas})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", AOT_SCRIPT, str(arch)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# ---------------------------------------------------------------- agreement with the scorers' CPU paths


def test_keep_twin_agrees_with_encoder_pruner_cpu_aggregation():
    """scorers.encoder_pruner reduces on CPU: same means; its "vote" score (the (n//2+1)-th largest
    token probability) is above t exactly when the kernel's strict majority vote keeps."""
    from thresher.scorers.encoder_pruner import sentence_scores

    values, labels, sent_passage, n_pass, _ = _keep_case(_seed("pruner"), torch.float32, False)
    flat_p, flat_l = values.reshape(-1).numpy(), labels.reshape(-1).numpy()
    ok = flat_l >= 0
    n_sent = sent_passage.shape[0]
    for t in (0.1, 0.5, 0.8):
        mean = sentence_keep_reference(values, labels, sent_passage, n_pass, t, strict=True)
        np.testing.assert_allclose(mean.score.numpy(), sentence_scores(flat_p[ok], flat_l[ok], n_sent, "mean"),
                                   rtol=0, atol=1e-6)
        vote = sentence_keep(values, labels, sent_passage, n_pass, t, mode="vote", strict=True)
        theirs = sentence_scores(flat_p[ok], flat_l[ok], n_sent, "vote") > t
        np.testing.assert_array_equal(vote.keep.numpy(), theirs)


def test_torch_backend_agrees_with_exported_yesno_head():
    """CausalYesNoTorch (fused kernel) and export.yesno.YesNoHead (the ONNX graph's module) give the
    same logits on the same tree rows."""
    from thresher._native import pack_tree
    from thresher.engine.torch_backend import CausalYesNoTorch
    from thresher.export.yesno import YesNoHead

    model = _tiny_causal_lm("gemma2")
    g = _gen(_seed("yesnohead"))
    prefix = torch.randint(1, 96, (11,), generator=g).numpy()
    branches = [torch.randint(1, 96, (n,), generator=g).numpy() for n in (4, 2, 6)]
    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    rows = pack_tree(prefix, np.array([0, 11], np.int64), np.concatenate(branches), bcu, np.zeros(3, np.int64), 64, 0)
    args = [torch.from_numpy(rows[k]) for k in ("input_ids", "position_ids", "branch_ids", "score_index")]
    with torch.no_grad():
        theirs = YesNoHead(model, 5, 7).eval()(*args)
    mine, _ = CausalYesNoTorch(model, 5, 7, width_step=8).logits(*args)
    torch.testing.assert_close(mine, theirs.float(), rtol=0, atol=1e-4)


def test_ort_gpu_session_config_prefers_gpu_providers_and_falls_back():
    """onnxruntime-gpu is not installed here: the config names TensorRT/CUDA first, and
    open_session keeps only the available ones (CPU)."""
    import onnxruntime as ort

    from thresher.engine.torch_backend import ort_gpu_session_config

    config = ort_gpu_session_config(intra_op_threads=1)
    assert config.providers == ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
    assert config.intra_op_threads == 1
    available = set(ort.get_available_providers())
    assert [p for p in config.providers if p in available][-1] == "CPUExecutionProvider"
