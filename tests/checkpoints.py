"""Random checkpoints in Provence's published folder layout, for tests and benchmarks (no machine
here can download the real weights). Test fixtures: not part of the installed package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn

from thresher.export.provence import WINDOW, ProvenceNet


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
