"""Fuzz targets: each takes fuzzer bytes and raises only on a real bug.

segmenters: every registered segmenter on arbitrary text keeps the span invariants
    (int64 [S, 2], sorted, non-overlapping, trimmed, covering every non-whitespace character).
validator: engine.request.validate and Options on arbitrary JSON-like values raise nothing but
    TypeError/ValueError, and accepted requests hold only valid, bounded text.
packers: thresher._native.Packer.pack and pack_tree on arbitrary arrays (any int64 offsets,
    lengths, groups, budgets) raise nothing but ValueError, and a result places every token in
    bounds. Under `make asan` the same inputs run against the ASan/UBSan build.
"""

from __future__ import annotations

import math

import atheris
import numpy as np

from thresher import _native
from thresher.engine.request import Limits, Options, validate
from thresher.engine.segment import SEGMENTERS

# Characters that exercise the segmenters' rules: terminals, closers, openers, spaces.
_ALPHABET = ".!?…\"'”’)]([“‘ \n\t\u00a0\u2003aAzZ1,;:Dr.U.S.I東😀"


def _text(fdp: atheris.FuzzedDataProvider, max_len: int) -> str:
    if fdp.ConsumeBool():
        return fdp.ConsumeUnicodeNoSurrogates(max_len)
    picks = fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, max_len), 0, len(_ALPHABET) - 1)
    return "".join(_ALPHABET[i] for i in picks)


def segmenters(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    name = sorted(SEGMENTERS)[fdp.ConsumeIntInRange(0, len(SEGMENTERS) - 1)]
    text = _text(fdp, 400)
    spans = SEGMENTERS[name](text)
    assert spans.dtype == np.int64 and spans.ndim == 2 and spans.shape[1] == 2, name
    covered = np.zeros(len(text), bool)
    prev_end = 0
    for a, b in spans.tolist():
        assert prev_end <= a < b <= len(text), (name, text, spans)
        assert not text[a].isspace() and not text[b - 1].isspace(), (name, text, a, b)
        covered[a:b] = True
        prev_end = b
    lost = [c for c, cov in zip(text, covered) if not cov and not c.isspace()]
    assert not lost, (name, text, lost)


def _value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    """An arbitrary JSON-like value (what a decoded request body can hold), plus huge ints."""
    kind = fdp.ConsumeIntInRange(0, 8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 200))  # up to 1,600 bits: 10**400 and more
    if kind == 3:
        return fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else fdp.PickValueInList([math.nan, math.inf, -math.inf])
    if kind in (4, 5):
        return fdp.ConsumeUnicode(40)  # may hold lone surrogates
    if kind == 6:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    keys = ["text", "title", "question", "x"]
    return {fdp.PickValueInList(keys): _value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}


_LIMITS = Limits(max_question_chars=30, max_passages=3, max_passage_chars=30, max_request_chars=60)


def validator(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    question, passages = _value(fdp), _value(fdp)
    names = ("threshold", "keep_ratio", "top_k", "reorder")
    options = {n: _value(fdp) for n in names if fdp.ConsumeBool()}
    try:
        request = validate(question, passages, Options(**options), _LIMITS)
    except (TypeError, ValueError):
        return
    texts = [request.question] + [p.text for p in request.passages] + [p.title or "" for p in request.passages]
    for text in texts:
        text.encode("utf-8")  # no lone surrogate got through
    assert len(request.question) <= _LIMITS.max_question_chars and request.question.strip()
    assert sum(len(p.text) for p in request.passages) <= _LIMITS.max_request_chars


def _int64s(fdp: atheris.FuzzedDataProvider, n: int, wild: bool) -> np.ndarray:
    if wild:
        return np.array([fdp.ConsumeIntInRange(-(2**63), 2**63 - 1) for _ in range(n)], np.int64)
    return np.array(fdp.ConsumeIntListInRange(n, 0, 40), np.int64)


def _offsets(fdp: atheris.FuzzedDataProvider, n: int) -> np.ndarray:
    """Mostly valid cumulative offsets, sometimes arbitrary int64s (overflow, decreasing)."""
    if fdp.ConsumeIntInRange(0, 3) == 0:
        return _int64s(fdp, n, wild=True)
    return np.concatenate([[0], np.cumsum(_int64s(fdp, max(n - 1, 0), wild=False))]).astype(np.int64)[:n]


def packers(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cu = _offsets(fdp, fdp.ConsumeIntInRange(0, 12))
    n_tokens = fdp.ConsumeIntInRange(0, 300)
    ids = _int64s(fdp, n_tokens, wild=fdp.ConsumeBool())
    labels = np.array(fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 300), -5, 5), np.int32)
    if fdp.ConsumeBool():
        labels = labels[: len(ids)] if len(labels) >= len(ids) else np.resize(labels, len(ids))
    try:
        packer = _native.Packer(fdp.ConsumeIntInRange(-2, 64), fdp.ConsumeIntInRange(-1, 4), 0)
        out = packer.pack(ids, cu, labels)
    except ValueError:
        pass
    else:
        rows, width = out["input_ids"].shape
        for r, start, length in out["placement"].tolist():
            assert 0 <= r < rows and start >= 0 and start + length <= width <= packer.row_len
        assert int((out["segment_ids"] > 0).sum()) == len(ids)

    groups = fdp.ConsumeIntInRange(0, 4)
    prefix_cu = _offsets(fdp, groups + 1 if fdp.ConsumeIntInRange(0, 5) else fdp.ConsumeIntInRange(0, 6))
    prefix_ids = _int64s(fdp, fdp.ConsumeIntInRange(0, 200), wild=False)
    branch_cu = _offsets(fdp, fdp.ConsumeIntInRange(0, 10))
    branch_ids = _int64s(fdp, fdp.ConsumeIntInRange(0, 200), wild=False)
    group = np.array(fdp.ConsumeIntListInRange(max(len(branch_cu) - 1, 0), -1, groups), np.int64)
    budget = fdp.ConsumeIntInRange(-1, 300)
    try:
        tree = _native.pack_tree(prefix_ids, prefix_cu, branch_ids, branch_cu, group, budget, 0)
    except ValueError:
        return
    size = tree["input_ids"].size
    assert all(0 <= i < size for i in tree["score_index"].tolist())


TARGETS = {"segmenters": segmenters, "validator": validator, "packers": packers}
