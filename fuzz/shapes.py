"""Adversarial text shapes for the segmenters, each n characters long: runs that made a regex
backtrack or a loop rescan (terminal punctuation, closers, whitespace, quotes, ellipses, blank
lines, and mixtures), and the timer both users compare them with. Used by the complexity test
(tests/test_segment_linear.py) and benchmarks/segment_adversarial.py."""

import time

SHAPES = {
    "periods": lambda n: "a" + "." * n + "b",
    "period-space": lambda n: "a" + ". " * (n // 2),
    "question-marks": lambda n: "a " + "?" * n + " b",
    "closers": lambda n: "a." + ")\"'”]" * (n // 5) + "b",
    "blank-lines": lambda n: "a.\n" + "\n" * n + "b",
    "spaces": lambda n: "a." + " " * n,
    "quotes": lambda n: "a. " + '"' * n,
    "ellipses": lambda n: "x" + "…" * n + "y",
    "mixed": lambda n: "A.?!)\"' \n\n”’… " * (n // 15),
    "no-spaces": lambda n: "ab.Cd?)" * (n // 7),
}


def best_seconds(split, text: str, repeat: int) -> float:
    """Fastest of `repeat` calls: the least disturbed by other work on a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        split(text)
        best = min(best, time.perf_counter() - start)
    return best
