"""End-to-end checks of the GPU check (gpu_check.py), through the public path.

Random checkpoints in the published folder layouts are written to disk (an EXIT-size Gemma-2B
config; a Provence-size DeBERTa-v3-large config, `tests/checkpoints.py`), each with a word-level
tokenizer built from the HotpotQA records (no tokenizer files exist offline; latency depends on
token counts, not on token identities). thresher loads them as a user would,
`Compressor.load(folder, device=..., backend="torch")`, and answers `compress(question, passages)`.
The reference procedure runs in the same process on its own copy of the network: EXIT's one whole
prompt per sentence with full-vocabulary logits; Provence's one (question, passage) pair at a time
with per-sentence means in Python. Both score the sentences thresher segmented, so segmentation is
not what is compared.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import torch
from gpu_kernels import pct, wall_ms

ROOT = Path(__file__).resolve().parents[1]
CAUSAL_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]  # Gemma's ids 0-3
ENCODER_SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]  # DeBERTa-v3's ids 0-3


def word_tokenizer(texts: list[str], folder: Path, vocab_size: int, specials: list[str]) -> None:
    """A word-level fast tokenizer (words and punctuation runs) saved into `folder` with the files
    transformers' AutoTokenizer reads; with Gemma's specials it adds <bos> first, as Gemma's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = Counter(w for t in texts for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(t))
    vocab = {w: i for i, w in enumerate([*specials, "Yes", "No"])}
    for w, _count in words.most_common(vocab_size):
        if len(vocab) >= vocab_size:
            break
        vocab.setdefault(w, len(vocab))
    unk = next(t for t in specials if "unk" in t.lower())
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    if "<bos>" in specials:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 8192}), encoding="utf-8")


def texts_of(records: list[dict]) -> list[str]:
    return [r["question"] for r in records] + ["".join(s) for r in records for _, s in r["context"]]


def request_of(record: dict, n: int) -> tuple[str, list[dict]]:
    return record["question"], [{"title": t, "text": "".join(s)} for t, s in record["context"][:n]]


# ---------------------------------------------------------------- EXIT-size


def exit_checkpoint(folder: Path, records: list[dict], tiny: bool) -> Path:
    import transformers

    cfg = dict(vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
               num_attention_heads=8, num_key_value_heads=1, head_dim=256, max_position_embeddings=8192,
               rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")  # google/gemma-2b
    if tiny:
        cfg.update(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, head_dim=16)
    config = transformers.GemmaConfig(**cfg, architectures=["GemmaForCausalLM"], bos_token_id=2, eos_token_id=1,
                                      pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.GemmaForCausalLM(config).to(torch.bfloat16 if not tiny else torch.float32)
    model.save_pretrained(folder)
    word_tokenizer(texts_of(records), folder, min(cfg["vocab_size"], 60000), CAUSAL_SPECIALS)
    return folder


def run_exit(folder: Path, device: torch.device, records: list[dict], timed: int, ref_timed: int) -> dict:
    """Compressor.load(EXIT-size checkpoint, backend="torch") vs one whole prompt per sentence."""
    import transformers

    import thresher

    c = thresher.Compressor.load(folder, device=str(device), backend="torch")
    scorer = c.scorer
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    yes, no = tok.convert_tokens_to_ids("Yes"), tok.convert_tokens_to_ids("No")
    requests = [request_of(r, 5) for r in records]

    @torch.inference_mode()
    def reference(request, result):
        question, passages = request
        whole = " ".join(f"{p['title']}\n{p['text'].strip()}" for p in passages)
        probs = []
        for p, pr in zip(passages, result.passages):
            context = whole if scorer.context == "all" else f"{p['title']}\n{p['text'].strip()}"
            for s in pr.sentences:
                prompt = scorer.template.prefix(question, context) + scorer.template.branch(p["text"][s.start:s.end])
                ids = torch.tensor([tok(prompt).input_ids], device=device)
                logits = ref_model(input_ids=ids).logits[0, -1].float()
                probs.append(float(torch.softmax(logits[[yes, no]], 0)[0]))
        return np.array(probs, np.float32)

    return compare(c, requests, reference, device, timed, ref_timed, threshold=0.5, strict=False,
                   extra={"context": scorer.context,
                          # a tree row vs full prompts: catches a 4D mask the model ignores
                          "tree_self_check_rel_err": scorer._runner.model.self_check()})


# ---------------------------------------------------------------- Provence-size


def provence_checkpoint(folder: Path, records: list[dict], tiny: bool) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.checkpoints import deberta_v3_backbone, write_random_checkpoint

    hidden, layers, heads, inter = (64, 2, 4, 128) if tiny else (1024, 24, 16, 4096)  # deberta-v3-large
    backbone = {**deberta_v3_backbone(128100, hidden, layers, heads, inter),
                **({"position_buckets": 32, "vocab_size": 4096} if tiny else {})}
    tok_dir = folder.parent / f"{folder.name}-tokenizer"
    word_tokenizer(texts_of(records), tok_dir, backbone["vocab_size"], ENCODER_SPECIALS)
    return write_random_checkpoint(folder, backbone, tok_dir / "tokenizer.json", seed=0, keep_bias=-3.0)


def run_provence(folder: Path, device: torch.device, records: list[dict], timed: int, ref_timed: int) -> dict:
    """Compressor.load(Provence-size checkpoint, backend="torch") vs one pair at a time."""
    from tokenizers import Tokenizer

    import thresher
    from thresher.export.provence import load_provence
    from thresher.scorers.encoder_pruner import normalize_question

    c = thresher.Compressor.load(folder, device=str(device), backend="torch")
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    cls, sep, window = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"), c.scorer.max_length
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ref_net = load_provence(folder)[0].to(device, dtype)
    requests = [(records[i]["question"], request_of(records[i], 10)[1] + request_of(records[i + 1], 10)[1])
                for i in range(0, len(records) - 1, 2)]  # 20 passages each

    @torch.inference_mode()
    def reference(request, result):
        question, passages = request
        q = tok.encode(normalize_question(question), add_special_tokens=False).ids
        scores = []
        for p, pr in zip(passages, result.passages):
            units = [tok.encode(p["text"][s.start:s.end], add_special_tokens=False).ids for s in pr.sentences]
            body, bounds = [], [0]
            for u in units:
                body += u
                bounds.append(len(body))
            body = body[: window - 3 - len(q)]  # HotpotQA paragraphs fit one block
            x = torch.tensor([[cls, *q, sep, *body, sep]], device=device)
            keep, _ = ref_net(x, torch.ones_like(x))
            probs = keep[0, len(q) + 2 : len(q) + 2 + len(body)].float().cpu().numpy()
            scores += [float(probs[a:b].mean()) if b <= len(body) and b > a else 0.0
                       for a, b in zip(bounds[:-1], bounds[1:])]
        return np.array(scores, np.float32)

    return compare(c, requests, reference, device, timed, ref_timed, threshold=c.threshold, strict=True,
                   extra={"passages_per_request": float(np.mean([len(p) for _, p in requests]))})


# ---------------------------------------------------------------- both


def compare(c, requests, reference, device, timed: int, ref_timed: int, *, threshold: float, strict: bool,
            extra: dict) -> dict:
    """p50/p99 of compress() and of the reference, max |probability difference|, keep agreement."""
    for question, passages in requests:  # warm-up: Triton JIT, one CUDA graph per bucket
        c.compress(question, passages)
    ours_ms = [wall_ms(partial(c.compress, *requests[k % len(requests)]), device) for k in range(timed)]
    ref_ms, max_dp, agree, total = [], 0.0, 0, 0
    for request in requests[:ref_timed]:
        result = c.compress(*request)
        holder: dict = {}
        ref_ms.append(wall_ms(partial(lambda req, res, out: out.update(p=reference(req, res)), request, result,
                                      holder), device))
        ours = np.array([s.score for p in result.passages for s in p.sentences], np.float32)
        ref = holder["p"]
        max_dp = max(max_dp, float(np.abs(ours - ref).max()) if ref.size else 0.0)
        keep_ref = ref > threshold if strict else ref >= threshold
        agree += int((np.array([s.kept for p in result.passages for s in p.sentences]) == keep_ref).sum())
        total += ref.size
    o, r = pct(ours_ms), pct(ref_ms)
    runner = c.scorer._runner
    graphs = getattr(getattr(runner, "model", runner), "graphs", None)
    return {"thresher_ms": o, "reference_ms": r, "speedup_p50": r["p50"] / o["p50"], "max_abs_prob_diff": max_dp,
            "keep_agreement": agree / max(total, 1), "sentences_compared": total, "requests": len(requests),
            "graphs_captured": graphs.captured if graphs else 0,
            "graphs_disabled": graphs.disabled_reason if graphs else "no graphs", **extra}
