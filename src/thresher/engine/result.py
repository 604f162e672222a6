"""Result types and their assembly from sentence spans, scores and keep flags.

Pruned text is built only from original substrings: a run of consecutive kept sentences is
copied from the passage as one slice (so the text between them is preserved byte for byte),
and separate runs are joined by RUN_SEPARATOR. A scorer that reproduces a reference system may
instead name a `sentence_joiner` (Provence joins kept sentences with one space).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from thresher.engine.request import Request

RUN_SEPARATOR = " "
STAGES = ("segment", "tokenize", "pack", "run", "reduce", "assemble")


@dataclass(frozen=True)
class Sentence:
    start: int  # character offset into the passage text
    end: int
    score: float
    kept: bool


@dataclass(frozen=True)
class PassageResult:
    index: int  # position in the request's passages
    title: str | None
    text: str
    pruned_text: str
    sentences: tuple[Sentence, ...]
    rerank_score: float | None
    id: str | int | None = None  # the passage's id and metadata as given, echoed unchanged
    metadata: Mapping[str, Any] | None = None

    def sentence_text(self, i: int) -> str:
        s = self.sentences[i]
        return self.text[s.start : s.end]

    @property
    def compression_rate(self) -> float:
        """Fraction of this passage's characters removed (0 for an empty passage)."""
        return 1.0 - len(self.pruned_text) / len(self.text) if self.text else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form; "id" and "metadata" appear only when the passage had them."""
        given = {k: v for k, v in (("id", self.id), ("metadata", self.metadata)) if v is not None}
        return {
            "index": self.index,
            **given,
            "title": self.title,
            "pruned_text": self.pruned_text,
            "compression_rate": self.compression_rate,
            "rerank_score": self.rerank_score,
            "sentences": [
                {"start": s.start, "end": s.end, "text": self.text[s.start : s.end], "score": s.score,
                 "kept": s.kept}
                for s in self.sentences
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], text: str | None = None) -> PassageResult:
        """Inverse of to_dict. to_dict omits the passage text: pass it as `text` for an exact
        result; otherwise it is rebuilt from the sentences at their offsets, with single spaces
        where the original had whitespace between them."""
        sentences = tuple(Sentence(int(s["start"]), int(s["end"]), float(s["score"]), bool(s["kept"]))
                          for s in data["sentences"])
        if text is None:
            chars = [" "] * max((s.end for s in sentences), default=0)
            for s, d in zip(sentences, data["sentences"]):
                chars[s.start : s.end] = d["text"]
            text = "".join(chars)
        score = data.get("rerank_score")
        return cls(index=int(data["index"]), title=data.get("title"), text=text, pruned_text=data["pruned_text"],
                   sentences=sentences, rerank_score=None if score is None else float(score),
                   id=data.get("id"), metadata=data.get("metadata"))


@dataclass(frozen=True)
class CompressionResult:
    question: str
    passages: tuple[PassageResult, ...]  # input order, or best first when reorder=True
    compression_rate: float  # fraction of passage characters removed (dropped passages count)
    timings_ms: dict[str, float] = field(default_factory=dict)
    model: str = ""

    @property
    def pruned_passages(self) -> list[str]:
        return [p.pruned_text for p in self.passages]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "model": self.model,
            "compression_rate": self.compression_rate,
            "timings_ms": self.timings_ms,
            "passages": [p.to_dict() for p in self.passages],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], texts: Sequence[str] | None = None) -> CompressionResult:
        """Inverse of to_dict (e.g. of a server's answer). `texts`: the request's passage texts in
        input order, which to_dict does not carry (see PassageResult.from_dict)."""
        passages = tuple(PassageResult.from_dict(p, None if texts is None else texts[p["index"]])
                         for p in data["passages"])
        timings = {k: float(v) for k, v in data.get("timings_ms", {}).items()}
        return cls(data["question"], passages, float(data["compression_rate"]), timings, data.get("model", ""))


def pruned_text(text: str, spans: np.ndarray, keep: np.ndarray, joiner: str | None = None) -> str:
    """Join runs of consecutive kept sentences, each run an exact slice of `text`; with a
    joiner, join every kept sentence by it instead."""
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        return ""
    if joiner is not None:
        return joiner.join(text[a:b] for a, b in spans[idx].tolist())
    breaks = np.flatnonzero(np.diff(idx) != 1)
    firsts = np.concatenate(([idx[0]], idx[breaks + 1]))
    lasts = np.concatenate((idx[breaks], [idx[-1]]))
    return RUN_SEPARATOR.join(text[spans[a, 0] : spans[b, 1]] for a, b in zip(firsts, lasts))


def assemble(
    request: Request,
    spans: list[np.ndarray],
    scores: list[np.ndarray],
    keep: list[np.ndarray],
    rerank: np.ndarray | None,
    timings_ms: dict[str, float],
    model: str,
    joiner: str | None = None,
) -> CompressionResult:
    """Build the result; applies top_k and reorder by rerank score."""
    order = np.arange(len(request.passages))
    opts = request.options
    if rerank is not None and (opts.reorder or opts.top_k is not None):
        best_first = np.argsort(-rerank, kind="stable")
        chosen = best_first[: opts.top_k] if opts.top_k is not None else best_first
        order = chosen if opts.reorder else np.sort(chosen)
    elif opts.top_k is not None or opts.reorder:
        raise ValueError("top_k and reorder need a model with a rerank score")
    passages = []
    for i in order:
        p = request.passages[i]
        sp, sc, kp = spans[i], scores[i], keep[i]
        sentences = tuple(
            Sentence(int(a), int(b), float(s), bool(k)) for (a, b), s, k in zip(sp.tolist(), sc, kp)
        )
        passages.append(
            PassageResult(
                index=int(i), title=p.title, text=p.text, pruned_text=pruned_text(p.text, sp, kp, joiner),
                sentences=sentences, rerank_score=None if rerank is None else float(rerank[i]),
                id=p.id, metadata=p.metadata,
            )
        )
    total = sum(len(p.text) for p in request.passages)
    kept = sum(len(p.pruned_text) for p in passages)
    rate = 0.0 if total == 0 else 1.0 - kept / total
    return CompressionResult(request.question, tuple(passages), rate, timings_ms, model)
