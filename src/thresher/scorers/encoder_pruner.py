"""`encoder-pruner`: Provence-style cross-encoder with a per-token keep head and a rerank head.

What one passage goes through (the semantics of Provence's `process()`):
1. The question is normalised: lower-cased, ASCII punctuation removed, whitespace collapsed.
2. The passage is cut into sentences (Punkt boundaries, manifest segmenter "punkt"); each sentence
   is tokenized on its own (no special tokens), so every context token belongs to exactly one
   sentence by construction. All sentences of a batch of requests go through one tokenizer call.
3. Sentences are laid into blocks `[CLS] question [SEP] block [SEP]` of at most max_length (512)
   tokens, cut at sentence boundaries; each block repeats the question. A single sentence longer
   than a block is cut into block-sized pieces.
4. Blocks are packed one per row, rows sorted by length (thresher._native packer), run through the
   ONNX graph in runs under a token budget; the graph returns keep probabilities and rank logits.
5. Per sentence: the mean of its tokens' keep probabilities ("mean", the published ports), or the
   majority vote of binarised tokens ("vote", the authors' blog). A sentence is kept when its
   score is STRICTLY above the threshold (default 0.1). The engine keeps `score >= threshold`, so
   this scorer reports each score lowered by one float64 ulp: `s' >= t` holds exactly when
   `s > t`, and the shown score differs from the model's by about 1e-17.
   "vote" is reported as the (n//2 + 1)-th largest token probability of an n-token sentence:
   more than half of the tokens are above t exactly when that order statistic is above t, so the
   vote works with any per-call threshold.
6. Titles: title="first_sentence" treats each passage's first sentence as its title; with
   always_select_title it is kept whenever any other sentence of the passage is kept (reported
   as the passage's best sentence score, which makes the threshold rule do exactly that).
   title="given" feeds each passage's own title (Passage.title) to the model before its first
   sentence (its tokens are context, never scored; the title is returned as PassageResult.title).
   title=None: no title rule.
7. Rerank score per passage: the first block's rank logit (the reference), or the maximum over
   blocks (rerank_blocks="max"); sigmoid-scaled for OpenProvence checkpoints (manifest
   rerank_activation).
8. Calibration (thresher's own models, manifest "calibration"): sentence scores and rank logits
   are mapped through sigmoid(scale * logit + shift), fitted on validation data pooled over
   single- and multi-passage sets, so a score is the probability that the sentence (passage) is
   needed, and one threshold means the same whatever the retriever returned. The manifest's
   "passage_threshold" is then a probability too; it and "relative_threshold" (a sentence must
   also reach this fraction of its passage's best score) are the model's default operating
   point, applied by pipeline.select.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from thresher.engine.batch import cut_runs, pack, split_runs
from thresher.engine.runner import Runner
from thresher.engine.scorer import ScoreInput, Scores
from thresher.engine.timing import timed
from thresher.engine.tokenize import encode_flat, load_tokenizer

MIN_FILL = 0.8  # a run's rows are >= 80% of its widest row: padding costs at most ~25% extra work
AGGREGATIONS = ("mean", "vote")
TITLE_MODES = ("first_sentence", "given", None)
RERANK_BLOCKS = ("first", "max")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_question(question: str) -> str:
    """Provence's question normalisation: lower-case, ASCII punctuation removed, spaces collapsed."""
    return " ".join(question.lower().translate(_PUNCTUATION).split())


def plan_blocks(unit_lengths: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Token ranges [start, end) of a passage's blocks, cut at unit (sentence) boundaries.

    Units are laid greedily into blocks of at most `budget` tokens; a unit longer than the
    budget is cut into budget-sized pieces and its remainder opens the next block. A passage
    without tokens still forms one (empty) block, so every passage gets a rerank score.
    """
    blocks: list[tuple[int, int]] = []
    start = pos = 0
    for n in unit_lengths.tolist():
        if pos + n - start > budget:
            if pos > start:
                blocks.append((start, pos))
                start = pos
            while n > budget:
                blocks.append((pos, pos + budget))
                pos += budget
                n -= budget
                start = pos
        pos += n
    if pos > start or not blocks:
        blocks.append((start, pos))
    return blocks


def logit(p: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """log(p / (1 - p)) in float64, p clipped to [eps, 1 - eps] (a probability of 0 or 1 stays finite)."""
    p = np.clip(np.asarray(p, np.float64), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def platt(logits: np.ndarray, scale_shift) -> np.ndarray:
    """sigmoid(scale * logit + shift) in float64: a calibrated probability from a logit."""
    scale, shift = scale_shift
    return 1.0 / (1.0 + np.exp(-(scale * np.asarray(logits, np.float64) + shift)))


def sentence_scores(probs: np.ndarray, labels: np.ndarray, n: int, aggregation: str) -> np.ndarray:
    """Per-sentence float64 score from token keep probabilities (labels in [0, n)); 0 without tokens."""
    counts = np.bincount(labels, minlength=n)
    if aggregation == "mean":
        sums = np.bincount(labels, weights=probs.astype(np.float64), minlength=n)
        return sums / np.maximum(counts, 1)
    order = np.lexsort((-probs, labels))  # by sentence, then probability descending
    starts = np.cumsum(counts) - counts
    out = np.zeros(n, np.float64)
    has = counts > 0
    out[has] = probs[order][starts[has] + counts[has] // 2]
    return out


class EncoderPrunerScorer:
    kind = "encoder-pruner"

    def __init__(self, model_dir: str | Path, manifest: dict, runner: Runner, *,
                 threshold: float | None = None, aggregation: str | None = None,
                 title: str | None = "manifest", always_select_title: bool | None = None,
                 rerank_blocks: str | None = None):
        """Options default to the manifest's "options"; unknown keywords raise TypeError.

        threshold: default keep threshold (sentence kept when its score is strictly above it).
        aggregation: "mean" | "vote". title: "first_sentence" | "given" | None.
        always_select_title: keep the title sentence whenever another sentence is kept.
        rerank_blocks: "first" (reference) | "max" over a long passage's blocks.
        The runner's call_tokens bounds each model call (a single row always forms a call).
        """
        model_dir = Path(model_dir)
        defaults = manifest.get("options", {})
        self.name = manifest["name"]
        self.threshold = float(manifest["threshold"] if threshold is None else threshold)
        self.segmenter = manifest["segmenter"]
        self.max_length = int(manifest["max_length"])
        self.aggregation = aggregation or defaults.get("aggregation", "mean")
        self.title = defaults.get("title", "first_sentence") if title == "manifest" else title
        self.always_select_title = (defaults.get("always_select_title", False)
                                    if always_select_title is None else always_select_title)
        if not isinstance(self.always_select_title, bool):
            raise TypeError(f"always_select_title must be a bool, got {type(always_select_title).__name__}")
        self.rerank_blocks = rerank_blocks or defaults.get("rerank_blocks", "first")
        self.rerank_activation = manifest.get("rerank_activation", "identity")
        calibration = manifest.get("calibration") or {}
        self._sentence_calibration = calibration.get("sentence")
        self._rerank_calibration = calibration.get("rerank")
        if self._rerank_calibration:
            self.rerank_activation = "sigmoid"  # a calibrated probability
        pt, rt = manifest.get("passage_threshold"), manifest.get("relative_threshold")
        self.passage_threshold = None if pt is None else float(pt)
        self.relative_threshold = None if rt is None else float(rt)
        # Provence's process() joins kept sentences with one space; thresher's own trained pruner
        # sets null in its manifest: the engine's byte-exact runs of original text.
        self.sentence_joiner = defaults.get("sentence_joiner", " ")
        for option, value, allowed in (("aggregation", self.aggregation, AGGREGATIONS),
                                       ("title", self.title, TITLE_MODES),
                                       ("rerank_blocks", self.rerank_blocks, RERANK_BLOCKS),
                                       ("rerank_activation", self.rerank_activation, ("identity", "sigmoid"))):
            if value not in allowed:
                raise ValueError(f"{option} must be one of {list(allowed)}, got {value!r}")
        ids = manifest["special_ids"]
        self._cls, self._sep, self._pad = int(ids["cls"]), int(ids["sep"]), int(ids["pad"])
        self._tok = load_tokenizer(model_dir / "tokenizer.json")
        self._runner = runner

    def check_question(self, question: str) -> None:
        """Refuse, before any model work, a question that leaves no room for passage text."""
        n = len(self._tok.encode(normalize_question(question), add_special_tokens=False).ids)
        if n > self.max_length - 4:
            raise ValueError(f"question has {n} tokens; this model takes at most {self.max_length - 4} "
                             f"(its {self.max_length}-token window also holds [CLS], [SEP] and passage text)")

    # -- inputs ---------------------------------------------------------------------------------

    def _units(self, items: list[ScoreInput]):
        """Texts to tokenize (titles + sentences), the scored-sentence label of each (-1 = title),
        and the unit count of every passage, in request/passage order."""
        texts, labels, per_passage = [], [], []
        label = 0
        for item in items:
            for passage, spans in zip(item.passages, item.spans):
                n = 0
                if self.title == "given" and passage.title:
                    texts.append(passage.title)
                    labels.append(-1)
                    n += 1
                for a, b in spans.tolist():
                    texts.append(passage.text[a:b])
                    labels.append(label)
                    label += 1
                    n += 1
                per_passage.append(n)
        return texts, np.asarray(labels, np.int64), per_passage, label

    def _sequences(self, items, timings):
        """Flat ids + cu_seqlens of all blocks, their token labels and each block's passage."""
        with timed(timings, "tokenize"):
            texts, unit_labels, per_passage, n_sent = self._units(items)
            q_ids, q_cu = encode_flat(self._tok, [normalize_question(i.question) for i in items])
            u_ids, u_cu = encode_flat(self._tok, texts)
        with timed(timings, "pack"):
            unit_len = np.diff(u_cu)
            token_label = np.repeat(unit_labels, unit_len)
            cls, sep = np.array([self._cls]), np.array([self._sep])
            pieces, label_pieces, block_passage, block_len = [], [], [], [0]
            unit0, p = 0, 0
            for r, item in enumerate(items):
                q = q_ids[q_cu[r]:q_cu[r + 1]]
                budget = self.max_length - 3 - q.shape[0]
                if budget < 1:
                    raise ValueError(f"question has {q.shape[0]} tokens; with [CLS]/[SEP] it leaves no "
                                     f"room for passage text in the {self.max_length}-token window")
                head_labels = np.full(q.shape[0] + 2, -1, np.int64)
                for _ in item.passages:
                    base, n_units = u_cu[unit0], per_passage[p]
                    for a, b in plan_blocks(unit_len[unit0:unit0 + n_units], budget):
                        pieces += [cls, q, sep, u_ids[base + a:base + b], sep]
                        label_pieces += [head_labels, token_label[base + a:base + b], [-1]]
                        block_passage.append(p)
                        block_len.append(q.shape[0] + 3 + b - a)
                    unit0 += n_units
                    p += 1
            ids = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
            labels = np.concatenate(label_pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
            cu = np.cumsum(np.asarray(block_len, np.int64))
        return ids, cu, labels, np.asarray(block_passage, np.int64), n_sent, p

    # -- scoring --------------------------------------------------------------------------------

    def _runs(self, packed):
        """Consecutive row slices (rows come longest first) under the token budget, cut further
        wherever a row is shorter than MIN_FILL of its run's first row, so little padding is
        computed: DeBERTa spends width^2 per row on its disentangled attention."""
        fill = (packed.segment_ids > 0).sum(axis=1)
        for group in cut_runs(fill, np.inf, MIN_FILL):
            yield from split_runs(packed.rows(group), self._runner.call_tokens)

    def run_blocks(self, ids, cu, labels, timings):
        """Run every block; returns token keep-probs and labels (real context tokens only) and the
        rank logit of each block (float32)."""
        with timed(timings, "pack"):
            packed = pack(ids, cu, labels, row_len=self.max_length, max_seqs_per_row=1, pad_id=self._pad)
        n_rows = packed.input_ids.shape[0]
        rank_rows = np.zeros(n_rows, np.float32)
        probs, token_labels = [], []
        row0 = 0
        with timed(timings, "run"):
            for run in self._runs(packed):
                keep, rank = self._runner.run({
                    "input_ids": run.input_ids,
                    "attention_mask": (run.segment_ids > 0).astype(np.int64),
                })
                rank_rows[row0:row0 + rank.shape[0]] = rank
                row0 += rank.shape[0]
                scored = run.labels >= 0
                probs.append(keep[scored])
                token_labels.append(run.labels[scored])
        block_rank = rank_rows[packed.placement[:, 0]] if n_rows else np.zeros(0, np.float32)
        if not probs:
            return np.zeros(0, np.float32), np.zeros(0, np.int32), block_rank
        return np.concatenate(probs), np.concatenate(token_labels), block_rank

    def score(self, items: list[ScoreInput], timings: dict[str, float]) -> list[Scores]:
        ids, cu, labels, block_passage, n_sent, n_passages = self._sequences(items, timings)
        probs, token_labels, block_rank = self.run_blocks(ids, cu, labels, timings)
        with timed(timings, "reduce"):
            scores = sentence_scores(probs, token_labels, n_sent, self.aggregation)
            if self.rerank_blocks == "first":
                first = np.unique(block_passage, return_index=True)[1]
                rerank = block_rank[first].astype(np.float64)
            else:
                rerank = np.full(n_passages, -np.inf)
                np.maximum.at(rerank, block_passage, block_rank.astype(np.float64))
            if self._sentence_calibration:
                scores = platt(logit(scores), self._sentence_calibration)
            if self._rerank_calibration:
                rerank = platt(rerank, self._rerank_calibration)
            elif self.rerank_activation == "sigmoid":
                rerank = 1.0 / (1.0 + np.exp(-rerank))
            counts = [s.shape[0] for item in items for s in item.spans]
            per_passage = np.split(scores, np.cumsum(counts)[:-1]) if counts else []
            if self.title == "first_sentence" and self.always_select_title:
                for s in per_passage:
                    if s.shape[0] > 1:
                        s[0] = max(s[0], s[1:].max())
            out, p = [], 0
            for item in items:
                n = len(item.passages)
                sentences = tuple(np.nextafter(s, -np.inf) for s in per_passage[p:p + n])
                out.append(Scores(sentences, rerank[p:p + n].astype(np.float32)))
                p += n
        return out
