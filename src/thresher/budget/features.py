"""Query-difficulty features from a cheap k=2 probe retrieval (SAGE's feature families).

Everything comes from one search's ranked lists and the two passages a probe would fetch: no
model call beyond the question embedding the search already made. Families:
score statistics and drops of each retriever (a steep drop after rank 1 = one clear answer
passage), rank gaps of the fused list, sparse-dense agreement (both retrievers pointing at the
same passages = an easy, unambiguous question), lexical overlap between the question and the
probe passages, and the question's own shape (length, capitalised words as an entity proxy).
"""

from __future__ import annotations

import re

import numpy as np

from thresher.budget.retriever import Retrieval

FEATURE_NAMES = (
    "dense_top1", "dense_gap12", "dense_drop10", "dense_std10",
    "bm25_top1", "bm25_gap12_rel", "bm25_drop10_rel", "bm25_nonzero_frac",
    "fused_gap12", "fused_gap2_10",
    "agree_top1", "agree_jaccard5", "agree_probe_in_both10",
    "lex_overlap_top1", "lex_overlap_probe",
    "q_tokens", "q_content_tokens", "q_capitalised",
)
PROBE_K = 2
PROBE_DEPTH = 30  # ranks the score statistics may look at: searches for features go this deep
_WORD = re.compile(r"\w\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def probe_features(retrieval: Retrieval, passages) -> np.ndarray:
    """float32 [len(FEATURE_NAMES)] for one retrieval; `passages` is the retriever's corpus list."""
    if retrieval.indices.shape[0] < min(PROBE_DEPTH, len(passages)) or retrieval.indices.shape[0] < PROBE_K:
        raise ValueError(f"probe features need a search of depth >= {PROBE_DEPTH} (or the whole corpus), "
                         f"got {retrieval.indices.shape[0]}")
    d, b, f = (a[:PROBE_DEPTH] for a in (retrieval.dense_scores, retrieval.bm25_scores, retrieval.fused))
    top10 = slice(0, min(10, d.shape[0]))
    b1 = float(b[0]) if b[0] > 0 else 1.0  # relative BM25 drops; 0 when nothing matched
    probe = retrieval.indices[:PROBE_K]
    d10, b10 = set(retrieval.dense_indices[top10].tolist()), set(retrieval.bm25_indices[top10].tolist())
    d5, b5 = set(retrieval.dense_indices[:5].tolist()), set(retrieval.bm25_indices[:5].tolist())
    content = set(retrieval.question_tokens)
    top1_words = _words(_text(passages[int(probe[0])]))
    probe_words = top1_words | _words(_text(passages[int(probe[1])]))
    n_content = max(len(content), 1)
    question = retrieval.question
    return np.array([
        d[0], d[0] - d[1], d[0] - d[top10].mean(), d[top10].std(),
        b[0], (b[0] - b[1]) / b1, (b[0] - b[top10].mean()) / b1, float((b > 0).mean()),
        f[0] - f[1], f[1] - f[min(9, f.shape[0] - 1)],
        float(retrieval.dense_indices[0] == retrieval.bm25_indices[0]),
        len(d5 & b5) / max(len(d5 | b5), 1),
        sum(int(i in d10 and i in b10) for i in probe.tolist()),
        len(content & top1_words) / n_content, len(content & probe_words) / n_content,
        len(_WORD.findall(question)), len(content),
        sum(1 for w in question.split()[1:] if w[:1].isupper()),
    ], dtype=np.float32)


def _text(p) -> str:
    return f"{p.title} {p.text}" if p.title else p.text
