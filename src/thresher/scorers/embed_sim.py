"""`embed-sim`: RECOMP-extractive style scoring, cosine(question, sentence) with a bi-encoder.

All sentences and questions of a batch of requests are tokenized in one call, wrapped as
[CLS] tokens [SEP] (sentences longer than the model window are split into several windows and
pooled together, never truncated), packed into dense rows, encoded, mean-pooled per sentence
with one segmented reduction and compared to their question. The passage rerank score is its
best sentence's cosine (-1 for a passage without sentences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from thresher.engine.batch import pack_groups, split_runs
from thresher.engine.reduce import segment_mean
from thresher.engine.runner import Runner
from thresher.engine.scorer import ScoreInput, Scores
from thresher.engine.timing import timed
from thresher.engine.tokenize import encode_flat, load_tokenizer

# Rows are only as wide as the longest sequence (at least MIN_ROW_LEN), not max_length: the
# block-diagonal attention is computed densely per row, so each token costs row-width work.
# On hotpotqa requests (sentences of ~30 tokens) this cut ONNX run time by ~23% vs 256-wide rows.
MIN_ROW_LEN = 64


def wrap_windows(ids: np.ndarray, cu: np.ndarray, window: int, cls: int, sep: int):
    """Split each text's tokens into windows of <= window tokens, each as [CLS] w [SEP].

    Returns flat ids, cu_seqlens and the text index of every token (its pooling label).
    An empty text becomes [CLS][SEP].
    """
    n = np.diff(cu)
    per_text = np.maximum(1, -(-n // window))
    seq_text = np.repeat(np.arange(n.shape[0]), per_text)
    k = np.arange(seq_text.shape[0]) - np.repeat(np.cumsum(per_text) - per_text, per_text)
    chunk_start = cu[seq_text] + k * window
    chunk_len = np.minimum(chunk_start + window, cu[seq_text + 1]) - chunk_start
    seq_len = chunk_len + 2
    seq_cu = np.zeros(seq_len.shape[0] + 1, np.int64)
    np.cumsum(seq_len, out=seq_cu[1:])
    out = np.empty(int(seq_cu[-1]), np.int64)
    out[seq_cu[:-1]] = cls
    out[seq_cu[1:] - 1] = sep
    seq_of_token = np.repeat(np.arange(seq_len.shape[0]), chunk_len)
    out[np.arange(ids.shape[0]) + 2 * seq_of_token + 1] = ids
    labels = np.repeat(seq_text, seq_len).astype(np.int32)
    return out, seq_cu, labels


class EmbedSimScorer:
    kind = "embed-sim"

    def __init__(self, model_dir: str | Path, manifest: dict, runner: Runner):
        model_dir = Path(model_dir)
        self.name = manifest["name"]
        self.threshold = float(manifest["threshold"])
        self.segmenter = manifest["segmenter"]
        self.max_length = int(manifest["max_length"])
        ids = manifest["special_ids"]
        self._cls, self._sep, self._pad = ids["cls"], ids["sep"], ids["pad"]
        self._tok = load_tokenizer(model_dir / "tokenizer.json")
        self._runner = runner

    def embed(self, texts: list[str], timings: dict[str, float], groups: list[int] | None = None) -> np.ndarray:
        """L2-normalised mean-pooled embeddings [len(texts), H], float32.

        groups: sizes of consecutive groups of texts packed into rows of their own (one group per
        request), so a group's embeddings are bit-identical whatever else is in the call.
        """
        with timed(timings, "tokenize"):
            ids, cu = encode_flat(self._tok, texts)
            ids, cu, labels = wrap_windows(ids, cu, self.max_length - 2, self._cls, self._sep)
        with timed(timings, "pack"):
            text_bounds = np.cumsum([0, *(groups or [len(texts)])])
            seq_text = labels[cu[:-1]]
            packed = pack_groups(ids, cu, labels, np.searchsorted(seq_text, text_bounds),
                                 row_len=self.max_length, min_row_len=MIN_ROW_LEN, pad_id=self._pad)
        states, token_labels = [], []
        with timed(timings, "run"):
            for run in split_runs(packed, self._runner.call_tokens):
                (hidden,) = self._runner.run({
                    "input_ids": run.input_ids, "position_ids": run.position_ids,
                    "segment_ids": run.segment_ids,
                })
                real = run.labels >= 0
                states.append(hidden[real])
                token_labels.append(run.labels[real])
        with timed(timings, "reduce"):
            if not states:
                return np.zeros((0, 0), np.float32)
            emb = segment_mean(np.concatenate(states), np.concatenate(token_labels), len(texts))
            emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        return emb

    def score(self, items: list[ScoreInput], timings: dict[str, float]) -> list[Scores]:
        # Texts per request: its sentences, then its question; one packing group per request.
        texts: list[str] = []
        counts: list[int] = []  # sentences per passage, all requests in order
        sent_index, question_index, groups = [], [], []
        for item in items:
            start = len(texts)
            for passage, spans in zip(item.passages, item.spans):
                texts.extend(passage.text[a:b] for a, b in spans.tolist())
                counts.append(spans.shape[0])
            sent_index.append(np.arange(start, len(texts)))
            question_index.append(np.full(len(texts) - start, len(texts)))
            texts.append(item.question)
            groups.append(len(texts) - start)
        emb = self.embed(texts, timings, groups)
        with timed(timings, "reduce"):
            sents, questions = np.concatenate(sent_index), np.concatenate(question_index)
            cos = np.einsum("ij,ij->i", emb[sents], emb[questions]).astype(np.float32)
            by_passage = np.split(cos, np.cumsum(counts)[:-1]) if counts else []
            out, p = [], 0
            for item in items:
                n = len(item.passages)
                sentences = tuple(by_passage[p : p + n])
                rerank = np.array([s.max() if s.size else -1.0 for s in sentences], np.float32)
                out.append(Scores(sentences, rerank))
                p += n
        return out
