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

from thresher.engine.batch import pack, split_runs
from thresher.engine.onnx_backend import SessionConfig, open_session
from thresher.engine.reduce import segment_mean
from thresher.engine.timing import timed
from thresher.engine.tokenize import encode_flat, load_tokenizer
from thresher.scorers.base import ScoreInput, Scores

MAX_BATCH_TOKENS = 16_384  # padded tokens per ONNX call: bounds activation memory (~0.5 GB)


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

    def __init__(self, model_dir: str | Path, manifest: dict, session_config: SessionConfig):
        model_dir = Path(model_dir)
        self.name = manifest["name"]
        self.threshold = float(manifest["threshold"])
        self.segmenter = manifest["segmenter"]
        self.max_length = int(manifest["max_length"])
        ids = manifest["special_ids"]
        self._cls, self._sep, self._pad = ids["cls"], ids["sep"], ids["pad"]
        self._tok = load_tokenizer(model_dir / "tokenizer.json")
        self._session = open_session(model_dir / "model.onnx", session_config)

    def embed(self, texts: list[str], timings: dict[str, float]) -> np.ndarray:
        """L2-normalised mean-pooled embeddings [len(texts), H], float32."""
        with timed(timings, "tokenize"):
            ids, cu = encode_flat(self._tok, texts)
            ids, cu, labels = wrap_windows(ids, cu, self.max_length - 2, self._cls, self._sep)
        with timed(timings, "pack"):
            packed = pack(ids, cu, labels, row_len=self.max_length, pad_id=self._pad)
        states, token_labels = [], []
        with timed(timings, "run"):
            for run in split_runs(packed, MAX_BATCH_TOKENS):
                (hidden,) = self._session.run(None, {
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
        texts: list[str] = []
        counts = []  # sentences per passage, all requests in order
        for item in items:
            for passage, spans in zip(item.passages, item.spans):
                texts.extend(passage.text[a:b] for a, b in spans.tolist())
                counts.append(spans.shape[0])
        n_sent = len(texts)
        texts.extend(item.question for item in items)
        emb = self.embed(texts, timings)
        with timed(timings, "reduce"):
            per_request = [len(item.passages) for item in items]
            sent_request = np.repeat(np.repeat(np.arange(len(items)), per_request), counts)
            cos = np.einsum("ij,ij->i", emb[:n_sent], emb[n_sent + sent_request]).astype(np.float32)
            by_passage = np.split(cos, np.cumsum(counts)[:-1]) if counts else []
            out, p = [], 0
            for n in per_request:
                sentences = tuple(by_passage[p : p + n])
                rerank = np.array([s.max() if s.size else -1.0 for s in sentences], np.float32)
                out.append(Scores(sentences, rerank))
                p += n
        return out
