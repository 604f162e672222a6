"""The GPU path: Hugging Face models in torch on CUDA, packed inputs, Triton kernels, CUDA graphs.

- Causal yes/no scorers (EXIT): tree-packed rows from thresher._native.pack_tree run through the
  model body in bf16/fp16 with SDPA attention and a tree mask built on the device from branch
  ids; the final norm, the two LM-head rows and the yes/no softmax run as one Triton kernel
  (kernels/yesno_head.py) at the scoring positions only.
- Encoder pruners (Provence): rows from thresher._native.Packer (one passage per row) through the
  encoder in a few length groups (padding < 2x); the per-token keep logits go straight into the sentence-keep
  kernel (kernels/sentence_keep.py): per-sentence scores, keep flags and passage aggregates
  without a Python loop.
- Each forward is captured as a CUDA graph per input bucket (rows, width, scoring positions
  rounded up), so a request pays for a handful of launches instead of thousands.

Each model is offered behind the runner contract of engine/runner.py (YesNoTorchRunner,
ModuleRunner), so the scorers run it exactly like an ONNX Runtime session; thresher.backends
builds them for `Compressor.load(..., backend="torch")`. It imports without CUDA (CPU tensors
work, the kernels then need TRITON_INTERPRET=1, and CUDA graphs are off); asking for a CUDA
device without one raises a RuntimeError saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from thresher.engine.batch import cut_runs
from thresher.engine.runner import check_call_tokens
from thresher.engine.tree_mask import sliding_window_of, tree_masks
from thresher.kernels.sentence_keep import SentenceKeep, sentence_keep
from thresher.kernels.yesno_head import yesno_head

log = logging.getLogger(__name__)

GPU_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def resolve_device(device: str | torch.device) -> torch.device:
    """torch.device for `device`, with a clear error when CUDA is asked for but absent."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {str(device)!r} was requested but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); use device='cpu' "
            "or the ONNX Runtime CPU backend")
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda[:N]' or 'cpu', got {str(device)!r}")
    return dev


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in GPU_DTYPES.values():
            raise ValueError(f"dtype must be one of {sorted(GPU_DTYPES)}, got {dtype}")
        return dtype
    if dtype not in GPU_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(GPU_DTYPES)}, got {dtype!r}")
    return GPU_DTYPES[dtype]


def _round_up(x: int, step: int) -> int:
    return max(step, -(-x // step) * step)


def _pow2(x: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, int(x) - 1).bit_length())


def _row_bucket(rows: int) -> int:
    """Rows rounded up: powers of two to 8, then multiples of 8 (20 rows run as 24, not 32)."""
    return _pow2(rows) if rows <= 8 else _round_up(rows, 8)


class GraphRunner:
    """Runs fn(*tensors) -> tensors, captured once per input signature as a CUDA graph.

    Inputs must already have bucketed shapes (few distinct signatures). Outputs are the graph's
    static buffers: consume them before the next call. Capture failures (a model that syncs
    with the host, an op that cannot be captured) switch graphs off with a logged warning and
    the reason in `disabled_reason`; results are the same either way.
    """

    def __init__(self, fn: Callable[..., tuple[torch.Tensor, ...]], enabled: bool):
        self.fn = fn
        self.enabled = enabled and torch.cuda.is_available()
        self.disabled_reason: str | None = None if self.enabled else "off (CPU or not requested)"
        self._graphs: dict[tuple, tuple] = {}
        self._pool = None

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.enabled or not inputs[0].is_cuda:
            return self.fn(*inputs)
        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                entry = self._capture(inputs)
            except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager
                self.enabled = False
                self.disabled_reason = f"capture failed: {type(exc).__name__}: {exc}"[:500]
                log.warning("CUDA graphs disabled, running eagerly: %s", self.disabled_reason)
                torch.cuda.synchronize()
                return self.fn(*inputs)
            self._graphs[key] = entry
        static_in, static_out, graph = entry
        for dst, src in zip(static_in, inputs):
            dst.copy_(src, non_blocking=True)
        graph.replay()
        return static_out

    def _capture(self, inputs):
        static_in = [t.clone() for t in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture: Triton JIT, cuBLAS workspaces
            for _ in range(2):
                self.fn(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()  # one pool: graphs replay one at a time
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            static_out = self.fn(*static_in)
        return static_in, static_out, graph


# ---------------------------------------------------------------- causal yes/no (EXIT)


@contextmanager
def _final_norm_bypassed(body: torch.nn.Module):
    """The body returns pre-norm hidden states while inside (the kernel applies the norm)."""
    norm = body.norm
    body.norm = torch.nn.Identity()
    try:
        yield
    finally:
        body.norm = norm


class CausalYesNoTorch:
    """P(Yes)/(P(Yes)+P(No)) per tree branch from a transformers causal LM on a device.

    Args:
        causal_lm: a *ForCausalLM (Llama, Gemma, Gemma 2, Gemma 3 text...) already on `device`
            in its serving dtype, loaded with attn_implementation="sdpa".
        yes_id, no_id: token ids of "Yes" and "No".
        cuda_graphs: capture one graph per (rows, width, branches) bucket.
        width_step: widths are rounded up to a multiple of this (bounds the number of graphs).
    """

    def __init__(self, causal_lm: torch.nn.Module, yes_id: int, no_id: int, *, cuda_graphs: bool = True,
                 width_step: int = 256):
        config = causal_lm.config
        self.lm = causal_lm
        self.yes_id, self.no_id = int(yes_id), int(no_id)
        self.body = causal_lm.model
        self.device = next(causal_lm.parameters()).device
        head = causal_lm.get_output_embeddings()
        self.rows = head.weight[[yes_id, no_id]].detach().contiguous()  # [2, H]
        bias = getattr(head, "bias", None)
        self.bias = None if bias is None else bias[[yes_id, no_id]].detach().float()
        norm = getattr(self.body, "norm", None)
        self.norm_weight = None if norm is None else norm.weight.detach().contiguous()
        self.norm_eps = 1e-6 if norm is None else float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6)))
        # Gemma's RMSNorm scales by (1 + w); Llama's by w.
        self.norm_plus_one = norm is not None and type(norm).__name__.startswith("Gemma")
        self.softcap = float(getattr(config, "final_logit_softcapping", None) or 0.0)
        self.sliding_window = sliding_window_of(config)
        self.width_step = width_step
        self.graphs = GraphRunner(self._forward, cuda_graphs)

    def _forward(self, input_ids, position_ids, branch_ids, score_index):
        dtype = self.rows.dtype
        mask = tree_masks(branch_ids, position_ids, self.sliding_window, dtype)
        if self.norm_weight is not None:
            with _final_norm_bypassed(self.body):
                hidden = self.body(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                                   use_cache=False).last_hidden_state  # [R, W, H], pre-norm
        else:
            hidden = self.body(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                               use_cache=False).last_hidden_state
        flat = hidden.reshape(-1, hidden.shape[-1])  # [R * W, H]
        return yesno_head(flat, self.rows, self.norm_weight, eps=self.norm_eps, norm_plus_one=self.norm_plus_one,
                          softcap=self.softcap, index=score_index)

    @torch.inference_mode()
    def logits(self, input_ids, position_ids, branch_ids, score_index) -> tuple[torch.Tensor, torch.Tensor]:
        """Yes/no logits float32 [N, 2] and P(Yes) float32 [N] on the device.

        input_ids, position_ids: int64 [R, W]; branch_ids: int32 [R, W]; score_index: int64 [N]
        flat positions r * W + t (pack_tree's output). Arrays or tensors.
        """
        ids, pos, br, idx = (torch.as_tensor(a) for a in (input_ids, position_ids, branch_ids, score_index))
        r, w = ids.shape
        n = idx.shape[0]
        if n == 0:
            empty = torch.zeros(0, device=self.device)
            return empty.reshape(0, 2), empty
        rb, wb, nb = _row_bucket(r), _round_up(w, self.width_step), _pow2(n, 8)
        pad_ids = torch.zeros((rb, wb), dtype=torch.int64)
        pad_pos = torch.zeros((rb, wb), dtype=torch.int64)
        pad_br = torch.full((rb, wb), -1, dtype=torch.int32)
        pad_idx = torch.zeros(nb, dtype=torch.int64)
        pad_ids[:r, :w], pad_pos[:r, :w], pad_br[:r, :w] = ids, pos, br.to(torch.int32)
        pad_idx[:n] = (idx // w) * wb + idx % w  # re-address rows for the padded width
        args = [t.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else t
                for t in (pad_ids, pad_pos, pad_br, pad_idx)]
        logits, p_yes = self.graphs(*args)
        logits, p_yes = logits[:n].clone(), p_yes[:n].clone()
        if self.bias is not None:
            logits = logits + self.bias
            p_yes = torch.sigmoid(logits[:, 0] - logits[:, 1])
        return logits, p_yes

    @torch.inference_mode()
    def self_check(self, seed: int = 0) -> float:
        """Largest |logit difference| between a small tree row and one full prompt per branch
        (the model's own forward and LM head): a transformers version that ignored or
        re-interpreted the 4D tree mask would show up here as an O(1) difference, not as
        rounding (bf16: ~1e-2 of the logit scale). Returns the difference relative to the
        largest reference logit."""
        g = torch.Generator().manual_seed(seed)
        vocab = self.lm.config.vocab_size
        prefix = torch.randint(3, vocab, (7,), generator=g)
        branches = [torch.randint(3, vocab, (n,), generator=g) for n in (4, 2, 5)]
        ids = torch.cat([prefix, *branches])[None]
        lens = torch.tensor([len(b) for b in branches])
        branch_ids = torch.cat([torch.zeros(7, dtype=torch.int32),
                                torch.repeat_interleave(torch.arange(1, 4, dtype=torch.int32), lens)])[None]
        pos = torch.cat([torch.arange(7)] + [7 + torch.arange(int(n)) for n in lens])[None]
        score_index = 7 + torch.cumsum(lens, 0) - 1
        mine, _ = self.logits(ids, pos, branch_ids, score_index)
        ref = torch.stack([self.lm(input_ids=torch.cat([prefix, b])[None].to(self.device)).logits[0, -1].float()
                           for b in branches])  # [3, vocab]: full prompts, full LM head
        two = ref[:, [self.yes_id, self.no_id]]
        return float((mine - two).abs().max() / ref.abs().max().clamp(min=1e-6))



class YesNoTorchRunner:
    """CausalYesNoTorch behind the runner contract: feeds {input_ids, position_ids, branch_ids,
    score_index} -> [yes/no logits float32 [N, 2]], as the exported causal-yesno graph answers."""

    padded = True

    def __init__(self, model: CausalYesNoTorch, call_tokens: int):
        self.model, self.call_tokens = model, check_call_tokens(call_tokens)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        logits, _ = self.model.logits(feeds["input_ids"], feeds["position_ids"], feeds["branch_ids"],
                                      feeds["score_index"])
        return [logits.cpu().numpy()]


class EncoderTorchRunner:
    """A pruner network (input_ids, attention_mask [R, W] -> keep probabilities [R, W], rank [R]:
    the exported encoder-pruner graph's contract) behind the runner contract, each call padded to
    a (rows, width) bucket and captured as a CUDA graph per bucket on a GPU."""

    padded = True

    def __init__(self, net: torch.nn.Module, call_tokens: int, *, cuda_graphs: bool = True, width_step: int = 64):
        self.net, self.call_tokens = net.eval(), check_call_tokens(call_tokens)
        self.device = next(net.parameters()).device
        self.width_step = width_step
        self.graphs = GraphRunner(lambda ids, mask: self.net(ids, mask), cuda_graphs)

    @torch.inference_mode()
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids, mask = (torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
        r, w = ids.shape
        rb, wb = _row_bucket(r), _round_up(w, self.width_step)
        pad_ids = torch.zeros((rb, wb), dtype=torch.int64)
        pad_mask = torch.zeros((rb, wb), dtype=torch.int64)
        pad_ids[:r, :w], pad_mask[:r, :w] = ids, mask
        pad_mask[r:, 0] = 1  # padding rows attend to one token: no fully masked softmax row
        args = [t.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else t
                for t in (pad_ids, pad_mask)]
        keep, rank = self.graphs(*args)
        return [keep[:r, :w].float().cpu().numpy(), rank[:r].float().cpu().numpy()]


class ModuleRunner:
    """A torch module that takes the graph's inputs in `input_names` order and returns its outputs
    (the very module an exporter turned into ONNX), behind the runner contract."""

    padded = True

    def __init__(self, module: torch.nn.Module, input_names: tuple[str, ...], call_tokens: int):
        self.module, self.input_names = module.eval(), input_names
        self.call_tokens = check_call_tokens(call_tokens)
        self.device = next(module.parameters()).device

    @torch.inference_mode()
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = self.module(*(torch.from_numpy(feeds[k]).to(self.device) for k in self.input_names))
        return [t.float().cpu().numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


# ---------------------------------------------------------------- encoder pruner (Provence)


@dataclass(frozen=True)
class PrunerOutput:
    keep: SentenceKeep  # per-sentence scores / flags, per-passage aggregates (device tensors)
    rank: torch.Tensor  # float32 [P] rank logit of each passage (its row's first token)


class EncoderPrunerTorch:
    """Keep probabilities and rank logits from an encoder with a token head and a rank head.

    Args:
        backbone: a transformers encoder (DebertaV2Model, BertModel, ...) taking input_ids and a
            [B, W] attention_mask, returning last_hidden_state; on `device` in its serving dtype.
        token_head: module [B, W, H] -> [B, W, 2] keep logits (index 1 = keep).
        rank_head: module [B, H] (first-token state) -> [B, 1] or [B] rank logit.
        cuda_graphs: capture one graph per (rows, width) bucket.
        width_step: widths are rounded up to a multiple of this.
    """

    def __init__(self, backbone: torch.nn.Module, token_head: torch.nn.Module, rank_head: torch.nn.Module, *,
                 cuda_graphs: bool = True, width_step: int = 64):
        self.backbone, self.token_head, self.rank_head = backbone, token_head, rank_head
        self.device = next(backbone.parameters()).device
        self.width_step = width_step
        self.graphs = GraphRunner(self._forward, cuda_graphs)

    def _forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        keep_logits = self.token_head(hidden)  # [B, W, 2]
        rank = self.rank_head(hidden[:, 0]).reshape(-1).float()  # [B]
        return keep_logits, rank

    @torch.inference_mode()
    def run(self, input_ids, segment_ids, labels, row_of_passage, sentence_passage, threshold: float, *,
            mode: str = "mean", strict: bool = True, sentence_lengths=None) -> PrunerOutput:
        """Batched forwards of packed rows (grouped by length) + one keep kernel, on the device.

        input_ids: int64 [R, W]; segment_ids: int32 [R, W] (> 0 = real token; one sequence per
        row, i.e. Packer(max_seqs_per_row=1)); labels: int32 [R, W] global sentence id per token,
        -1 for question, special tokens and padding; row_of_passage: int64 [P] row holding each
        passage; sentence_passage: int32 [S] passage of each sentence; mode/strict/threshold as
        in kernels.sentence_keep (Provence: mean, strictly above the threshold).
        """
        ids, seg, lab = (torch.as_tensor(a) for a in (input_ids, segment_ids, labels))
        lengths = (seg > 0).sum(dim=1)  # [R]
        values, token_labels, rank = [], [], torch.empty(ids.shape[0], dtype=torch.float32, device=self.device)
        for run in self._runs(lengths):
            r, w = run.shape[0], int(lengths[run[0]])
            rb, wb = _row_bucket(r), _round_up(w, self.width_step)
            pad_ids = torch.zeros((rb, wb), dtype=torch.int64)
            pad_mask = torch.zeros((rb, wb), dtype=torch.int64)
            pad_lab = torch.full((rb, wb), -1, dtype=torch.int32)
            cw = min(wb, ids.shape[1])  # columns to copy: the bucket may be wider than the input
            pad_ids[:r, :cw], pad_mask[:r, :cw] = ids[run, :cw], (seg[run, :cw] > 0).to(torch.int64)
            pad_lab[:r, :cw] = lab[run, :cw].to(torch.int32)
            pad_mask[:, 0] = 1  # padded rows attend to one token: no fully masked softmax row
            on = [t.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else t
                  for t in (pad_ids, pad_mask, pad_lab)]
            keep_logits, run_rank = self.graphs(on[0], on[1])
            # Copies: a later run with the same bucket replays the same graph into the same buffers.
            values.append(keep_logits.reshape(-1, 2).clone())
            token_labels.append(on[2].reshape(-1))
            rank[run.to(self.device)] = run_rank[:r]
        sp = torch.as_tensor(sentence_passage, dtype=torch.int32).to(self.device, non_blocking=True)
        lens = None
        if sentence_lengths is not None:
            lens = torch.as_tensor(sentence_lengths, dtype=torch.int32).to(self.device, non_blocking=True)
        rows = torch.as_tensor(row_of_passage, dtype=torch.int64).to(self.device, non_blocking=True)
        keep = sentence_keep(torch.cat(values)[None], torch.cat(token_labels)[None], sp, int(rows.shape[0]), threshold,
                             mode=mode, strict=strict, sentence_lengths=lens)
        return PrunerOutput(keep=keep, rank=rank.index_select(0, rows))

    def _runs(self, lengths: torch.Tensor) -> list[torch.Tensor]:
        """Row groups, longest first, each padded to its own width: a new group starts when a row
        needs less than half the group's width (so padding stays under 2x, in <= log2 groups)."""
        order = torch.argsort(-lengths, stable=True)
        widths = [_round_up(int(n), self.width_step) for n in lengths[order]]
        return [order[part] for part in cut_runs(widths, float("inf"), min_fill=0.5)]


def load_causal_lm_on_device(path: str, *, device: str | torch.device = "cuda", dtype: str | torch.dtype = "bf16"):
    """AutoModelForCausalLM from a local folder, on `device` in `dtype`, SDPA attention, eval mode.

    Works on transformers 4.57 and 5.x (the dtype keyword changed name; both are tried).
    """
    from transformers import AutoModelForCausalLM

    dev, dt = resolve_device(device), resolve_dtype(dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation="sdpa")
    except TypeError:  # transformers < 4.56 only knows torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dt, attn_implementation="sdpa")
    return model.to(dev).eval()
