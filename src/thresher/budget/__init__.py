"""SAGE retrieval budget: choose how many passages to retrieve per question, from a cheap probe.

Parts: `corpus` (passages + gradable questions from the data), `retriever` (BM25 + dense, RRF),
`features` (probe features), `oracle` (budget sweep and labels), `policy` (RandomForest in ONNX
with a calibrated temperature), `load` (the load-aware cap), `api` (retrieve + compress).
"""

from typing import TYPE_CHECKING

from thresher._lazy import lazy_exports

if TYPE_CHECKING:
    from thresher.budget.api import BudgetedCompressor, BudgetedResult
    from thresher.budget.load import LoadAwarePolicy
    from thresher.budget.policy import BudgetPolicy

# Loaded on first use (they import numpy): `thresher --help` builds the budget parser without them.
__getattr__, __dir__ = lazy_exports(__name__, {
    "BudgetedCompressor": "thresher.budget.api", "BudgetedResult": "thresher.budget.api",
    "LoadAwarePolicy": "thresher.budget.load", "BudgetPolicy": "thresher.budget.policy",
})

__all__ = ["BudgetPolicy", "BudgetedCompressor", "BudgetedResult", "LoadAwarePolicy"]
