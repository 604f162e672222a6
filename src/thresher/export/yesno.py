"""Export a causal LM as a `causal-yesno` model: tree-packed rows in, two logits per branch out.

The graph takes prefix-shared rows from thresher._native.pack_tree and expands the compact
branch ids into the attention mask itself: a token sees the earlier tokens of the prefix and of
its own branch. Architectures with sliding-window layers (Gemma 2, Gemma 3) get a second mask
that also limits the *position* distance, exactly as their own mask would in a one-prompt run.
Only the final hidden state at each scoring position is multiplied by the two LM-head rows of
"Yes" and "No" (tied or not, after the model's final norm, with Gemma 2's logit soft-capping):
no [rows, width, vocab] tensor exists.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import torch

from thresher import __version__
from thresher._native import pack_forest
from thresher.engine.tree_mask import TREE_STRIDE, sliding_window_of, tree_masks
from thresher.export.causal_lm import CausalLM, load_causal_lm, single_token_id, special_ids_added
from thresher.export.onnx_io import quantize_int8, verify
from thresher.manifest import write_manifest
from thresher.scorers.causal_yesno import CONTEXT_MODES, EXIT_TEMPLATE, USER_MESSAGE, PromptTemplate

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "int8")
INPUTS = ["input_ids", "position_ids", "branch_ids", "score_index"]


class YesNoHead(torch.nn.Module):
    """(input_ids, position_ids [R, T] int64, branch_ids [R, T] int32, score_index [N] int64)
    -> yes/no logits [N, 2] float32 at the flat positions score_index (r * T + t)."""

    def __init__(self, causal_lm: torch.nn.Module, yes_id: int, no_id: int):
        super().__init__()
        config = causal_lm.config
        self.body = causal_lm.model
        head = causal_lm.get_output_embeddings()
        self.register_buffer("rows", head.weight[[yes_id, no_id]].detach().clone())  # [2, H]
        bias = getattr(head, "bias", None)
        self.register_buffer("bias", None if bias is None else bias[[yes_id, no_id]].detach().clone())
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self.sliding_window = sliding_window_of(config)

    def forward(self, input_ids, position_ids, branch_ids, score_index):
        dtype = self.rows.dtype
        mask = tree_masks(branch_ids, position_ids, self.sliding_window, dtype)
        hidden = self.body(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                           use_cache=False).last_hidden_state  # [R, T, H]
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, score_index)  # [N, H]
        logits = picked @ self.rows.T  # [N, 2]
        if self.bias is not None:
            logits = logits + self.bias
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def example_tree(vocab: int, seed: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    """A random packed batch as pack_forest emits it: 2-3 contexts, several trees sharing a row
    (block-diagonal), a context overflowing into a second tree, uneven rows with padding."""

    rng = np.random.default_rng(seed)
    groups = int(rng.integers(2, 4))
    plens = rng.integers(3, 12, groups)
    n = int(rng.integers(groups, 3 * groups))
    blens = rng.integers(1, 7, n)
    bgroup = np.sort(np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)]))
    pcu = np.concatenate([[0], np.cumsum(plens)])
    bcu = np.concatenate([[0], np.cumsum(blens)])
    out = pack_forest(rng.integers(1, vocab, int(pcu[-1])), pcu, rng.integers(1, vocab, int(bcu[-1])), bcu,
                      bgroup, int(plens.max() + 2 * blens.max()), pad_id, TREE_STRIDE)
    return {name: out[name] for name in INPUTS}


def _export_graph(module: YesNoHead, path: Path, vocab: int) -> bool:
    """Dynamo export; weights go to model.onnx.data when over the 2 GB protobuf limit.
    Returns whether external data was written."""
    module.eval()  # torch.onnx.export restores the training flag afterwards; keep dropout off
    example = {k: torch.from_numpy(v) for k, v in example_tree(vocab, 0).items()}
    dims = {"input_ids": {0: "rows", 1: "width"}, "position_ids": {0: "rows", 1: "width"},
            "branch_ids": {0: "rows", 1: "width"}, "score_index": {0: "branches"}}
    dynamic = {k: {a: torch.export.Dim.AUTO for a in axes} for k, axes in dims.items()}
    with torch.no_grad():
        program = torch.onnx.export(module, tuple(example.values()), dynamo=True, input_names=INPUTS,
                                    output_names=["yes_no_logits"], dynamic_shapes=dynamic,
                                    optimize=True, verbose=False)
    external = sum(p.numel() * p.element_size() for p in module.parameters()) > 1_800_000_000
    program.save(str(path), external_data=external)
    return external


def _template(tokenizer, prompt: str) -> str:
    if prompt == "exit":
        return EXIT_TEMPLATE
    if prompt != "chat":
        raise ValueError(f"prompt must be 'exit' or 'chat', got {prompt!r}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("prompt='chat' needs a tokenizer with a chat template")
    marker = "\x00THRESHER\x00"
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                             add_generation_prompt=True)
    before, after = rendered.split(marker)
    bos = getattr(tokenizer, "bos_token", None)
    if bos and before.startswith(bos) and tokenizer.encode("x")[:1] == [tokenizer.bos_token_id]:
        before = before[len(bos):]  # the tokenizer adds BOS itself
    return before + USER_MESSAGE + after


def junction_safe(tokenizer, template: PromptTemplate, samples: list[tuple[str, str, str]]) -> bool:
    """True when encoding prefix and branch apart gives the ids of the whole prompt.

    A sentence starts with a non-space character (segmenter spans are trimmed) right after the
    prefix's last character c. If no vocabulary entry contains c followed by a non-space
    character, no token can span the junction and BPE merges act on both sides independently.
    Checked on the vocabulary and on sample prompts.
    """
    c = template.pieces[2][-1:]
    if not c:
        return False
    crossing = re.compile(re.escape(c) + r"\S")
    for i in range(len(tokenizer)):
        if crossing.search(tokenizer.decode([i])):
            return False
    for q, ctx, s in samples:
        prefix, branch = template.prefix(q, ctx), template.branch(s)
        whole = tokenizer.encode(prefix + branch, add_special_tokens=False)
        apart = tokenizer.encode(prefix, add_special_tokens=False) + tokenizer.encode(branch, add_special_tokens=False)
        if whole != apart:
            return False
    return True


def describe(lm: CausalLM, *, prompt: str | None = None, context: str = "own", threshold: float = 0.5,
             segmenter: str = "rules", max_length: int | None = None, name: str = "",
             source_info: dict | None = None) -> dict:
    """The manifest of a causal-yesno model for `lm` (without its file hashes)."""
    if context not in CONTEXT_MODES:
        raise ValueError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
    tok, config = lm.tokenizer, lm.model.config
    yes_id, no_id = single_token_id(tok, "Yes"), single_token_id(tok, "No")
    before, after = special_ids_added(tok)
    prompt = prompt or ("exit" if config.model_type.startswith("gemma") else "chat")
    template = PromptTemplate(_template(tok, prompt))
    window = int(getattr(config, "max_position_embeddings", 0) or 0) or 8192
    window = min(window, max_length) if max_length else window
    samples = [("Who?", "Title\nA first sentence. Another one.", "A first sentence."),
               ("Where is it?", "Doc\n(1990) Things: x\ny.", "(1990) Things: x\ny."),
               ("q", "c", '"Quoted" start.')]
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    return {
        "kind": "causal-yesno",
        "name": name or Path(lm.source.get("path", "causal-lm")).name,
        "source": source_info or lm.source,
        "architecture": config.model_type,
        "max_length": window,
        "prompt": {"name": prompt, "template": template.text, "prefix_ids": before, "suffix_ids": after,
                   "junction_safe": junction_safe(tok, template, samples)},
        "yes_id": yes_id,
        "no_id": no_id,
        "pad_id": int(pad_id),
        "context": context,
        "tree_stride": TREE_STRIDE,
        "threshold": threshold,
        "segmenter": segmenter,
        "exporter_version": __version__,
    }


def export_causal_yesno(source: str | Path, out_dir: str | Path, *, adapter: str | Path | None = None,
                        precision: str = "fp32", lm: CausalLM | None = None, **options) -> Path:
    """Write out_dir/{model.onnx, tokenizer.json, thresher.json}; returns out_dir.

    source: checkpoint folder or .gguf file; adapter: optional PEFT LoRA folder, merged.
    `lm` passes an already loaded model (tests, benchmarks) instead of loading `source`.
    options (see describe): prompt "exit" (EXIT's Gemma turn, the default for Gemma models) or
    "chat" (the same user message in the tokenizer's chat template, the default otherwise);
    context "own" (the sentence's passage, as EXIT's paper and training data; the default) or
    "all" (every passage of the request joined, as EXIT's quickstart);
    threshold (0.5); segmenter; max_length caps the model's context window (longer prompts
    are split by documents at run time); name; source_info.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    out_dir = Path(out_dir)
    lm = lm or load_causal_lm(source, adapter)
    options.setdefault("name", Path(source).stem)
    manifest = describe(lm, **options)
    module = YesNoHead(lm.model, manifest["yes_id"], manifest["no_id"]).eval()
    vocab = lm.model.config.vocab_size
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / ("model.onnx" if precision == "fp32" else "model.fp32.onnx")
    external = _export_graph(module, fp32, vocab)
    verify(fp32, module, [example_tree(vocab, s) for s in (1, 2)], tolerance=1e-4)
    files = ["model.onnx", "tokenizer.json"]
    if precision == "int8":
        quantize_int8(fp32, out_dir / "model.onnx")
        fp32.unlink()
        (out_dir / "model.fp32.onnx.data").unlink(missing_ok=True)
    elif external:
        files.append("model.onnx.data")
    lm.tokenizer.backend_tokenizer.save(str(out_dir / "tokenizer.json"))
    write_manifest(out_dir, {**manifest, "precision": precision, "files": files})
    log.info("exported causal-yesno model to %s (junction_safe=%s)", out_dir, manifest["prompt"]["junction_safe"])
    return out_dir
