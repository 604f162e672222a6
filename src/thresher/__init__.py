"""thresher: fast RAG context compression. This module is the public API.

    import thresher
    c = thresher.Compressor.load("default")
    result = c.compress(question, passages)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from thresher._lazy import lazy_exports

__version__ = "0.1.0"

# Imported on first access: `thresher --help` and other light entry points must not pay for
# onnxruntime and numpy (~0.3 s) just because they live in this package.
__getattr__, __dir__ = lazy_exports(__name__, {
    "Compressor": "thresher.compressor", "Limits": "thresher.engine.request", "Options": "thresher.engine.request",
    "CompressionResult": "thresher.engine.result", "PassageResult": "thresher.engine.result",
    "Sentence": "thresher.engine.result", "list_models": "thresher.catalogue", "load": "thresher.compressor:Compressor.load",
})

if TYPE_CHECKING:
    from thresher.catalogue import list_models
    from thresher.compressor import Compressor
    from thresher.engine.request import Limits, Options
    from thresher.engine.result import CompressionResult, PassageResult, Sentence

    load = Compressor.load


__all__ = [
    "CompressionResult", "Compressor", "Limits", "Options", "PassageResult", "Sentence", "__version__",
    "list_models", "load",
]
