"""Export a causal LM as a `causal-eos` model: P(EOS) after chosen positions, for chunk boundaries.

The graph takes `input_ids [B, T]`, `attention_mask [B, T]` (1 = token, 0 = right padding) and
`positions [B, N]` (token indices to read, e.g. the last token of every sentence of a window).
It runs the decoder body WITHOUT its final norm, gathers the N hidden states first, and only
then applies the final norm, the LM head and the log-softmax: the full-vocabulary normalisation
that P(EOS) needs is paid for N positions, never for [B, T, vocab]. Output: `log_p_eos [B, N]`.

Which token is EOS: the checkpoint's `eos_token_id` (config or generation config). For
SmolLM2-135M-Instruct that is id 2, `<|im_end|>`, the token that closes every chat turn; the
pretraining separator `<|endoftext|>` (id 0) never ends an assistant turn, so its probability
after a sentence says little about whether the answer is complete.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from thresher import __version__
from thresher.export.onnx_io import export_onnx, quantize_int8, verify
from thresher.manifest import write_manifest

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8")
# The instruction in front of every window (LGMGC's prompt rho): the model is asked for one
# self-contained passage, so ending the turn after sentence k means "s1..sk is complete".
INSTRUCTION = ("Write one self-contained passage of a document. It must cover a single topic "
               "and stop where that topic ends.")
PLAIN_PREFIX = INSTRUCTION + "\n\nPassage:\n"


class EosHead(torch.nn.Module):
    """Decoder body -> gather positions -> final norm -> LM head -> log-softmax -> EOS column."""

    def __init__(self, causal_lm: torch.nn.Module, eos_id: int):
        super().__init__()
        body = causal_lm.get_decoder()
        self.norm = body.norm
        body.norm = torch.nn.Identity()  # applied below, after the gather
        self.body = body
        self.lm_head = causal_lm.get_output_embeddings()
        self.eos_id = int(eos_id)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask,
                           use_cache=False).last_hidden_state  # [B, T, H] before the final norm
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # [B, N, H]
        picked = self.norm(torch.gather(hidden, 1, index))  # [B, N, H]
        logits = self.lm_head(picked).float()  # [B, N, V]: N positions only
        return torch.log_softmax(logits, dim=-1)[..., self.eos_id]  # [B, N]


def _feeds(vocab: int, seed: int, pad_id: int) -> dict[str, np.ndarray]:
    """3 right-padded rows of different lengths with 1..5 read positions each."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(6, 40, size=3)
    lengths[0] = lengths.max() + int(rng.integers(0, 5))  # one row without padding
    width = int(lengths.max())
    ids = np.full((3, width), pad_id, np.int64)
    mask = np.zeros((3, width), np.int64)
    n = int(rng.integers(1, 6))
    pos = np.zeros((3, n), np.int64)
    for r, length in enumerate(lengths.tolist()):
        ids[r, :length] = rng.integers(3, vocab, length)
        mask[r, :length] = 1
        pos[r] = np.sort(rng.integers(0, length, n))
    return {"input_ids": ids, "attention_mask": mask, "positions": pos}


def _eos_id(model, tokenizer_json: dict, eos_token: str | None) -> tuple[int, str]:
    vocab = tokenizer_json["model"]["vocab"]
    specials = {t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", [])}
    if eos_token is not None:
        tid = specials.get(eos_token, vocab.get(eos_token))
        if tid is None:
            raise ValueError(f"eos_token {eos_token!r} is not in the tokenizer's vocabulary")
        return int(tid), eos_token
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = model.config.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    if eos is None:
        raise ValueError("the checkpoint names no eos_token_id; pass eos_token=...")
    names = {v: k for k, v in {**vocab, **specials}.items()}
    return int(eos), names.get(int(eos), "")


def _prompt_prefix(tokenizer_config: dict) -> str:
    """The chat-template rendering of system + user instruction + assistant header when the
    checkpoint has a ChatML template (<|im_start|>); otherwise a plain-text prefix."""
    template = tokenizer_config.get("chat_template") or ""
    if "<|im_start|>" in template:
        return (f"<|im_start|>system\nYou are a careful editor.<|im_end|>\n"
                f"<|im_start|>user\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
    return PLAIN_PREFIX


def _load_with_tokenizer_dir(checkpoint_dir: Path, gguf_file: str | None):
    """A causal LM (fp32) and a folder holding its tokenizer.json + tokenizer_config.json."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32, **kwargs)
    model.eval()
    if not gguf_file and (checkpoint_dir / "tokenizer.json").is_file():
        return model, checkpoint_dir
    tok_dir = Path(tempfile.mkdtemp(prefix="thresher-tok-"))
    AutoTokenizer.from_pretrained(checkpoint_dir, **kwargs).save_pretrained(tok_dir)
    return model, tok_dir


def export_causal_eos(checkpoint_dir: str | Path, out_dir: str | Path, *, gguf_file: str | None = None,
                      eos_token: str | None = None, precision: str = "fp32", max_length: int | None = None,
                      name: str = "", source: dict | None = None, segmenter: str = "rules") -> Path:
    """Write out_dir/{model.onnx, tokenizer.json, thresher.json}; returns out_dir."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    model, tok_dir = _load_with_tokenizer_dir(checkpoint_dir, gguf_file)
    try:
        tokenizer_json = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
        cfg_path = tok_dir / "tokenizer_config.json"
        tok_config = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        if not tok_config.get("chat_template") and (tok_dir / "chat_template.jinja").is_file():
            tok_config["chat_template"] = (tok_dir / "chat_template.jinja").read_text(encoding="utf-8")
        eos_id, eos_name = _eos_id(model, tokenizer_json, eos_token)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tok_dir / "tokenizer.json", out_dir / "tokenizer.json")
    finally:
        if tok_dir != checkpoint_dir:
            shutil.rmtree(tok_dir, ignore_errors=True)
    config = model.config
    pad_id = config.pad_token_id if config.pad_token_id is not None else eos_id
    head = EosHead(model, eos_id).eval()
    fp32 = out_dir / ("model.onnx" if precision == "fp32" else "model.fp32.onnx")
    example = {k: torch.from_numpy(v) for k, v in _feeds(config.vocab_size, 0, pad_id).items()}
    export_onnx(head, tuple(example.values()), fp32, list(example), ["log_p_eos"],
                {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                 "positions": {0: "batch", 1: "reads"}})
    verify(fp32, head, [_feeds(config.vocab_size, s, pad_id) for s in (1, 2)], tolerance=1e-3)
    if precision == "int8":
        quantize_int8(fp32, out_dir / "model.onnx")
        fp32.unlink()
    write_manifest(out_dir, {
        "kind": "causal-eos",
        "name": name or checkpoint_dir.name,
        "source": source or {"path": str(checkpoint_dir), **({"gguf_file": gguf_file} if gguf_file else {})},
        "precision": precision,
        "max_length": int(min(max_length or 1 << 30, getattr(config, "max_position_embeddings", 2048))),
        "eos_id": eos_id,
        "eos_token": eos_name,
        "pad_id": int(pad_id),
        "prompt_prefix": _prompt_prefix(tok_config),
        "segmenter": segmenter,
        "threshold": 0.0,
        "exporter_version": __version__,
        "files": ["model.onnx", "tokenizer.json"],
    })
    return out_dir
