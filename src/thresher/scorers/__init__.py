"""Scorers by model kind (see thresher.scorers.base.Scorer)."""

from thresher.scorers.causal_yesno import CausalYesNoScorer
from thresher.scorers.embed_sim import EmbedSimScorer
from thresher.scorers.encoder_pruner import EncoderPrunerScorer

SCORERS = {
    CausalYesNoScorer.kind: CausalYesNoScorer,
    EmbedSimScorer.kind: EmbedSimScorer,
    EncoderPrunerScorer.kind: EncoderPrunerScorer,
}
