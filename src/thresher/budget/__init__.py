"""SAGE retrieval budget: choose how many passages to retrieve per question, from a cheap probe.

Parts: `corpus` (passages + gradable questions from the data), `retriever` (BM25 + dense, RRF),
`features` (probe features), `oracle` (budget sweep and labels), `policy` (RandomForest in ONNX
with a calibrated temperature), `load` (the load-aware cap), `api` (retrieve + compress).
"""

from thresher.budget.api import BudgetedCompressor, BudgetedResult
from thresher.budget.load import LoadAwarePolicy
from thresher.budget.policy import BudgetPolicy

__all__ = ["BudgetPolicy", "BudgetedCompressor", "BudgetedResult", "LoadAwarePolicy"]
