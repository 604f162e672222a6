"""Scorers by model kind (see thresher.scorers.base.Scorer)."""

from thresher.scorers.embed_sim import EmbedSimScorer

SCORERS = {
    EmbedSimScorer.kind: EmbedSimScorer,
}
