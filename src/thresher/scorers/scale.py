"""What a model's passage rerank score means, per model kind.

Front doors that promise scores in 0..1 (TEI's `/rerank`, Cohere's `relevance_score`,
CrossEncoder.predict's default) apply a sigmoid only where the score is a raw logit: squashing
a probability or a cosine a second time would compress it into a narrow, misleading band.
"""

from __future__ import annotations

import numpy as np

LOGIT = "logit"  # encoder-pruner rank head (thresher's default model, Provence)
PROBABILITY = "probability"  # OpenProvence's sigmoid-scaled rank head; causal-yesno's P(Yes)
COSINE = "cosine"  # embed-sim: the best sentence's cosine, -1..1


def rerank_scale(scorer) -> str | None:
    """LOGIT, PROBABILITY, COSINE, or None for a model without a rerank score."""
    if scorer.kind == "encoder-pruner":
        return PROBABILITY if getattr(scorer, "rerank_activation", "identity") == "sigmoid" else LOGIT
    return {"causal-yesno": PROBABILITY, "embed-sim": COSINE}.get(scorer.kind)


def sigmoid(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, np.float64)
    return (1.0 / (1.0 + np.exp(-scores))).astype(np.float32)


def unit_scores(scores: np.ndarray, scale: str | None) -> np.ndarray:
    """Scores as a 0..1 relevance where the model's scale allows: sigmoid of a logit, anything
    else unchanged (a cosine stays in -1..1)."""
    return sigmoid(scores) if scale == LOGIT else np.asarray(scores, np.float32)
