"""Model classes by kind: one per model kind, each built from (model_dir, manifest, runner).

The first three are scorers (thresher.engine.scorer.Scorer, what Compressor runs); `causal-eos`
scores chunk boundaries for LGMGC (thresher.chunking).
"""

from thresher.scorers.causal_eos import CausalEosModel
from thresher.scorers.causal_yesno import CausalYesNoScorer
from thresher.scorers.embed_sim import EmbedSimScorer
from thresher.scorers.encoder_pruner import EncoderPrunerScorer

MODELS = {cls.kind: cls for cls in (CausalEosModel, CausalYesNoScorer, EmbedSimScorer, EncoderPrunerScorer)}
SCORER_KINDS = ("causal-yesno", "embed-sim", "encoder-pruner")
