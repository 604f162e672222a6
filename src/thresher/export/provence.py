"""Provence (naver) checkpoints -> an `encoder-pruner` model directory.

Provence is a DeBERTa-v3 cross-encoder over `[CLS] question [SEP] context [SEP]` with two heads:
a ranking head (ContextPooler on the first token: dense + gelu, then `classifier`, one raw logit)
and a pruning head (`token_classifier`, two logits per token; softmax index 1 = keep).

thresher builds that module itself on transformers' `DebertaV2Model` (never the checkpoint's
remote code) and loads the published folder as it is: `config.json` (architectures
["Provence"], model_type "Provence", auto_map to the remote code), `model.safetensors` with the
weight names `deberta.*`, `pooler.dense.*`, `classifier.*`, `token_classifier.*`, and the fast
tokenizer `tokenizer.json`. OpenProvence folders (model_type "open_provence") load through the same
module when their backbone is DeBERTa-v2/v3 (weights `ranking_model.deberta.*`,
`ranking_model.pooler.*`, `ranking_model.classifier.*`, `pruning_head.classifier.*`; the rerank
score is sigmoid-scaled there); other OpenProvence backbones (ModernBERT, BERT) are refused.

The graph takes one sequence per row (`input_ids`, `attention_mask` [R, W]) and returns the keep
probability of every token (softmax fused) and the rank logit of every row. One sequence per row,
not several packed into a row: DeBERTa's disentangled attention costs O(W^2) per row, so packing
short sequences together computes more attention than padding rows that are sorted by length.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from thresher import __version__
from thresher.export.configs import is_provence_config
from thresher.export.pruner_graph import export_pruner_graph
from thresher.manifest import write_manifest

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.1  # Provence's process() default; 0.5 prunes more
WINDOW = 512  # Provence's context length: [CLS] question [SEP] block [SEP] fits in it
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")

# Published weight names -> ours, per layout; prefixes are rewritten, the rest stays.
_PREFIXES = {
    "provence": {"deberta.": "deberta.", "pooler.": "pooler.", "classifier.": "classifier.",
                 "token_classifier.": "token_classifier."},
    "open_provence": {"ranking_model.deberta.": "deberta.", "ranking_model.pooler.": "pooler.",
                      "ranking_model.classifier.": "classifier.",
                      "pruning_head.classifier.": "token_classifier."},
}


@dataclass(frozen=True)
class Checkpoint:
    """A validated checkpoint folder: which layout, the backbone config, the rerank scale."""

    path: Path
    layout: str  # "provence" | "open_provence"
    backbone: dict  # DeBERTa-v2 config keys
    rerank_activation: str  # "identity" (raw logit) | "sigmoid"
    threshold: float


class ProvenceNet(nn.Module):
    """DeBERTa-v2 backbone + ranking head + pruning head, Provence's published module layout.

    forward(input_ids [R, W] int64, attention_mask [R, W] int64) ->
        keep_prob [R, W] float (softmax index 1 of token_classifier), rank_logit [R] float.
    """

    def __init__(self, backbone: dict):
        super().__init__()
        from transformers import DebertaV2Config, DebertaV2Model
        from transformers.models.deberta_v2.modeling_deberta_v2 import ContextPooler

        config = DebertaV2Config(**backbone)
        config._attn_implementation = "eager"
        self.deberta = DebertaV2Model(config)
        self.pooler = ContextPooler(config)
        self.classifier = nn.Linear(self.pooler.output_dim, 1)
        self.token_classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        hidden = self.deberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        rank_logit = self.classifier(self.pooler(hidden))[:, 0]  # [R]
        keep_prob = self.token_classifier(hidden).softmax(-1)[..., 1]  # [R, W]
        return keep_prob, rank_logit


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path.parent} is incomplete: {path.name} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} cannot be read as JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def inspect_checkpoint(checkpoint_dir: str | Path) -> Checkpoint:
    """Check config.json, model.safetensors and tokenizer.json; raise ValueError naming the problem."""
    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder")
    config = _read_json(path / "config.json")
    if not is_provence_config(config):
        raise ValueError(f"{path}/config.json describes model_type {config.get('model_type')!r} with "
                         f"architectures {config.get('architectures')}, not a Provence checkpoint "
                         "(architectures ['Provence'] or model_type 'open_provence')")
    if str(config.get("model_type", "")).lower() == "open_provence":
        layout, backbone = "open_provence", dict(config.get("base_model_config") or {})
        if backbone.get("model_type") != "deberta-v2":
            raise ValueError(f"{path}: OpenProvence backbone {backbone.get('model_type')!r} is not "
                             "supported; thresher runs OpenProvence checkpoints with a DeBERTa-v2/v3 "
                             "backbone only (ModernBERT and BERT backbones are not implemented)")
        rerank, threshold = "sigmoid", config.get("default_threadshold") or DEFAULT_THRESHOLD
    else:
        layout, backbone, rerank, threshold = "provence", dict(config), "identity", DEFAULT_THRESHOLD
    for key in ("architectures", "auto_map", "model_type", "transformers_version", "torch_dtype", "dtype"):
        backbone.pop(key, None)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size") if k not in backbone]
    if missing:
        raise ValueError(f"{path}/config.json lacks backbone keys {missing}")
    if backbone.get("position_biased_input", False):
        raise ValueError(f"{path}: position_biased_input=true (absolute positions) is not a DeBERTa-v3 "
                         "backbone; thresher supports relative-position DeBERTa-v3 only")
    for name in ("model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            hint = (" (a fast tokenizer is required: AutoTokenizer.from_pretrained(folder)"
                    ".save_pretrained(folder) writes it)") if name == "tokenizer.json" else ""
            raise ValueError(f"{path} is incomplete: {name} is missing{hint}")
    _check_tokenizer(path, int(backbone["vocab_size"]))
    return Checkpoint(path, layout, backbone, rerank, float(threshold))


def _check_tokenizer(path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as e:  # tokenizers raises its own Exception type on a bad file
        raise ValueError(f"{path}/tokenizer.json cannot be loaded: {e}") from None
    absent = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    if absent:
        raise ValueError(f"{path}/tokenizer.json does not match a DeBERTa-v3 checkpoint: it lacks the "
                         f"special tokens {absent}")
    size = tok.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ValueError(f"{path}/tokenizer.json does not match config.json: the tokenizer has {size} "
                         f"tokens but the model embeds only vocab_size={vocab_size}")


def load_state(ckpt: Checkpoint, module: ProvenceNet) -> None:
    """Load model.safetensors into `module`; every weight must be present with its shape."""
    from safetensors.torch import load_file

    prefixes = _PREFIXES[ckpt.layout]
    try:
        raw = load_file(str(ckpt.path / "model.safetensors"))
    except Exception as e:  # safetensors raises SafetensorError / OSError on truncated files
        raise ValueError(f"{ckpt.path}/model.safetensors cannot be read: {e}") from None
    state = {}
    for name, tensor in raw.items():
        for old, new in prefixes.items():
            if name.startswith(old):
                state[new + name[len(old):]] = tensor
                break
    expected = module.state_dict()
    optional = {"deberta.embeddings.position_ids"}  # a buffer some versions save, some do not
    missing = sorted(set(expected) - set(state) - optional)
    if missing:
        raise ValueError(f"{ckpt.path}/model.safetensors lacks {len(missing)} weights of the "
                         f"{ckpt.layout} layout, e.g. {missing[:4]}")
    wrong = [f"{k}: {tuple(state[k].shape)} vs config {tuple(v.shape)}" for k, v in expected.items()
             if k in state and state[k].shape != v.shape]
    if wrong:
        raise ValueError(f"{ckpt.path}/model.safetensors does not match config.json: {wrong[:3]}")
    module.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)


def load_provence(checkpoint_dir: str | Path) -> tuple[ProvenceNet, Checkpoint]:
    """The checkpoint as an eval-mode ProvenceNet (fp32). Nothing is returned half-loaded."""
    ckpt = inspect_checkpoint(checkpoint_dir)
    module = ProvenceNet(ckpt.backbone)
    load_state(ckpt, module)
    return module.eval(), ckpt


def describe(ckpt: Checkpoint, *, threshold: float | None = None, name: str = "",
             source: dict | None = None) -> dict:
    """The manifest of an encoder-pruner model for `ckpt` (without precision and file hashes)."""
    from tokenizers import Tokenizer

    tok = json.loads((ckpt.path / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    t = Tokenizer.from_file(str(ckpt.path / "tokenizer.json"))
    special = {k.strip("[]").lower(): int(added.get(k, t.token_to_id(k))) for k in SPECIAL_TOKENS}
    return {
        "kind": "encoder-pruner",
        "name": name or ckpt.path.name,
        "source": source or {"path": str(ckpt.path), "layout": ckpt.layout},
        "max_length": min(WINDOW, int(ckpt.backbone.get("max_position_embeddings", WINDOW))),
        "special_ids": special,
        "threshold": ckpt.threshold if threshold is None else float(threshold),
        "threshold_rule": "strictly-above",
        "segmenter": "punkt",
        "rerank_activation": ckpt.rerank_activation,
        "options": {"aggregation": "mean", "title": "first_sentence", "always_select_title": False,
                    "rerank_blocks": "first"},
        "exporter_version": __version__,
    }


def export_provence(checkpoint_dir: str | Path, out_dir: str | Path, *, precision: str = "int8",
                    threshold: float | None = None, name: str = "", source: dict | None = None) -> Path:
    """Write out_dir/{model.onnx, tokenizer.json, thresher.json}; returns out_dir.

    precision: "fp32"; "int8" (dynamic, per-channel, for CPU); "fp16" (for GPU execution
    providers). The fp32 graph must match PyTorch within 1e-4 on random padded batches or
    nothing is written (ValueError); int8's largest difference is recorded in the manifest.
    """
    module, ckpt = load_provence(checkpoint_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = export_pruner_graph(module, int(ckpt.backbone["vocab_size"]), out_dir, precision, cls=1, low=4)
    shutil.copyfile(ckpt.path / "tokenizer.json", out_dir / "tokenizer.json")
    write_manifest(out_dir, {**describe(ckpt, threshold=threshold, name=name, source=source),
                             "precision": precision, **extra, "files": ["model.onnx", "tokenizer.json"]})
    log.info("exported %s (%s) to %s", ckpt.path, precision, out_dir)
    return out_dir
