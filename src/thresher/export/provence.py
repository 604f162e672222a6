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


def is_provence_config(config: dict) -> bool:
    """True for Provence and OpenProvence config.json contents (used by export.detect)."""
    model_type = str(config.get("model_type", "")).lower()
    return model_type in ("provence", "open_provence") or "Provence" in (config.get("architectures") or [])


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
    tok = json.loads((ckpt.path / "tokenizer.json").read_text(encoding="utf-8"))
    added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(ckpt.path / "tokenizer.json"))
    special = {k.strip("[]").lower(): int(added.get(k, t.token_to_id(k))) for k in SPECIAL_TOKENS}
    write_manifest(out_dir, {
        "kind": "encoder-pruner",
        "name": name or ckpt.path.name,
        "source": source or {"path": str(ckpt.path), "layout": ckpt.layout},
        "precision": precision,
        "max_length": min(WINDOW, int(ckpt.backbone.get("max_position_embeddings", WINDOW))),
        "special_ids": special,
        "threshold": ckpt.threshold if threshold is None else float(threshold),
        "threshold_rule": "strictly-above",
        "segmenter": "punkt",
        "rerank_activation": ckpt.rerank_activation,
        "options": {"aggregation": "mean", "title": "first_sentence", "always_select_title": False,
                    "rerank_blocks": "first"},
        "exporter_version": __version__,
        **extra,
        "files": ["model.onnx", "tokenizer.json"],
    })
    log.info("exported %s (%s) to %s", ckpt.path, precision, out_dir)
    return out_dir


def write_random_checkpoint(out_dir: str | Path, backbone: dict, tokenizer_json: str | Path,
                            seed: int = 0, keep_bias: float = -2.0) -> Path:
    """A randomly initialised checkpoint in Provence's published folder layout (for tests and
    benchmarks: no machine here can download the real weights).

    backbone: DeBERTa-v2 config keys (vocab_size, hidden_size, ...). keep_bias shifts the keep
    logit so that random weights give keep probabilities spread around Provence's 0.1 threshold.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    net = ProvenceNet(backbone).eval()
    with torch.no_grad():
        nn.init.normal_(net.token_classifier.weight, std=1.0)
        net.token_classifier.bias.copy_(torch.tensor([0.0, keep_bias]))
        nn.init.normal_(net.classifier.weight, std=1.0)
    state = {k: v.contiguous() for k, v in net.state_dict().items() if not k.endswith("position_ids")}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["Provence"], "model_type": "Provence",
              "auto_map": {"AutoConfig": "modeling_provence.ProvenceConfig",
                           "AutoModel": "modeling_provence.Provence"},
              "torch_dtype": "float32", **backbone}
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DebertaV2Tokenizer", "model_max_length": WINDOW, "do_lower_case": False,
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "mask_token": "[MASK]"}, indent=2), encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps({
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "mask_token": "[MASK]"}, indent=2), encoding="utf-8")
    return out


def train_tokenizer(texts: list[str], vocab_size: int, path: str | Path) -> Path:
    """A small DeBERTa-v3-style SentencePiece-Unigram fast tokenizer (Metaspace, [PAD]=0, [CLS]=1,
    [SEP]=2, [UNK]=3), trained on `texts`; for random test/benchmark checkpoints."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    tok.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                           unk_token="[UNK]"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.save(str(path))
    return Path(path)


def deberta_v3_backbone(vocab_size: int, hidden: int, layers: int, heads: int, intermediate: int) -> dict:
    """DeBERTa-v3 config keys (relative attention, 256 log buckets, p2c+c2p, no absolute positions)."""
    return {"vocab_size": vocab_size, "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": heads, "intermediate_size": intermediate, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 512, "type_vocab_size": 0, "initializer_range": 0.02,
            "layer_norm_eps": 1e-7, "relative_attention": True, "max_relative_positions": -1,
            "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
            "pos_att_type": ["p2c", "c2p"], "position_biased_input": False, "pad_token_id": 0,
            "pooler_hidden_size": hidden, "pooler_hidden_act": "gelu", "pooler_dropout": 0}
