"""thresher: fast RAG context compression. This module is the public API.

    import thresher
    c = thresher.Compressor.load("default")
    result = c.compress(question, passages)
"""

__version__ = "0.1.0"

from thresher.catalogue import list_models  # noqa: E402
from thresher.compressor import Compressor  # noqa: E402
from thresher.engine.request import Limits, Options  # noqa: E402
from thresher.engine.result import CompressionResult, PassageResult, Sentence  # noqa: E402

load = Compressor.load

__all__ = [
    "CompressionResult", "Compressor", "Limits", "Options", "PassageResult", "Sentence", "__version__",
    "list_models", "load",
]
