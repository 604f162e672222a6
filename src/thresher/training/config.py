"""The training run's settings, importable without torch (the CLI reads their defaults for --help)."""

from __future__ import annotations

from dataclasses import dataclass, field

# Questions per source (None = all); every source fits a full run in well under an hour here.
DEFAULT_CAPS: dict[str, int] = {}
# Multi-hop examples (the target task: supporting sentences among distractor paragraphs) are
# seen this many times per epoch; the rest once.
REPEATS = {"hotpotqa_distractor": 2, "2wikimultihopqa": 2}
SELECTION_SOURCE = "hotpotqa_distractor"
SELECTION_REMOVED = 0.60


@dataclass
class TrainConfig:
    data_dir: str
    epochs: int = 2
    rank: int = 32
    alpha: float = 32.0
    lr: float = 5e-4
    warmup: float = 0.05
    batch_tokens: int = 4096
    max_length: int = 256
    rank_weight: float = 0.5
    seed: int = 0
    max_questions: dict = field(default_factory=lambda: dict(DEFAULT_CAPS))
    repeats: dict = field(default_factory=lambda: dict(REPEATS))
