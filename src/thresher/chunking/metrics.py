"""Chunking evaluation metrics on character spans (method-independent labels) and the paper's
max-ROUGE relabelled protocol, for benchmarks/chunking_eval.py.

Fixed labels: the evidence is a set of character spans of the document. Retrieved text is a set
of character spans (the ranked parents, the last one cut to fit a token budget). Recall =
|evidence ∩ retrieved| / |evidence|, precision = |evidence ∩ retrieved| / |retrieved|,
IoU = |evidence ∩ retrieved| / |evidence ∪ retrieved|, all counted in characters.

Relabelled (LGMGC paper): per method, the "gold" chunk of a question is the parent with the
highest ROUGE against the evidence text; DCG@k = 1/log2(1 + rank) if it is within the top k,
recall@k = 1 if it is. The label depends on the method's own chunks.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_TOKEN = re.compile(r"\w+")


def span_mask(length: int, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """bool [length], True inside any of the spans (clipped to the document)."""
    delta = np.zeros(length + 1, np.int32)
    for a, b in spans:
        a, b = max(0, int(a)), min(length, int(b))
        if a < b:
            delta[a] += 1
            delta[b] -= 1
    return np.cumsum(delta[:-1]) > 0


def overlap_scores(evidence: np.ndarray, retrieved: np.ndarray) -> dict[str, float]:
    """recall, precision and IoU of two bool character masks of one document."""
    inter = int(np.count_nonzero(evidence & retrieved))
    n_e, n_r = int(np.count_nonzero(evidence)), int(np.count_nonzero(retrieved))
    union = n_e + n_r - inter
    return {"recall": inter / n_e if n_e else 0.0, "precision": inter / n_r if n_r else 0.0,
            "iou": inter / union if union else 0.0}


def budget_spans(ranked: Sequence[tuple[int, int]], token_ends: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Take ranked spans in order until `budget` tokens of the document have been retrieved.

    token_ends: sorted int64 end offsets of the whole document's tokens; a token belongs to a
    span when its end lies in (start, end]. Text already taken costs nothing again, so
    overlapping spans (sentence windows) pay only for their new part; the last new piece is cut
    after the token that reaches the budget. Returns disjoint spans in the order taken.
    """
    length = int(max([b for _, b in ranked], default=0))
    taken = np.zeros(length + 1, bool)
    taken[-1] = True  # sentinel: every free run ends
    out, left = [], budget
    for a, b in ranked:
        if left <= 0:
            break
        free = ~taken[a:b + 1]
        free[-1] = False
        edges = np.flatnonzero(np.diff(np.concatenate([[False], free]).astype(np.int8)))
        for pa, pb in zip((a + edges[0::2]).tolist(), (a + edges[1::2]).tolist()):
            first, last = np.searchsorted(token_ends, [pa, pb], side="right")
            if last - first > left:
                pb, left = int(token_ends[first + left - 1]), 0
            else:
                left -= int(last - first)
            out.append((pa, pb))
            taken[pa:pb] = True
            if left <= 0:
                break
    return out


def rouge1_f(candidate: str, reference: str) -> float:
    """ROUGE-1 F1 on lower-cased \\w+ tokens."""
    c, r = Counter(_TOKEN.findall(candidate.lower())), Counter(_TOKEN.findall(reference.lower()))
    hit = sum((c & r).values())
    if not hit:
        return 0.0
    p, q = hit / sum(c.values()), hit / sum(r.values())
    return 2 * p * q / (p + q)


def relabelled_gold(parent_texts: Sequence[str], evidence_text: str) -> int:
    """Index of the parent with the highest ROUGE-1 F1 against the evidence (first on ties)."""
    scores = [rouge1_f(t, evidence_text) for t in parent_texts]
    return int(np.argmax(scores)) if scores else -1


def dcg_recall_at(rank_of_gold: int, k: int) -> tuple[float, float]:
    """(DCG@k, recall@k) of one relevant item at 0-based rank (or -1 when absent)."""
    if 0 <= rank_of_gold < k:
        return 1.0 / float(np.log2(rank_of_gold + 2)), 1.0
    return 0.0, 0.0
