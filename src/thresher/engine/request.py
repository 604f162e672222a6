"""Request validation: one validator that every entry point (API, CLI, server) calls.

Bad input raises ValueError/TypeError whose message names the field, the limit and the value,
before any tokenization happens. Nothing is silently dropped or truncated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PASSAGE_KEYS = ("text", "title", "id", "metadata")

# Lone UTF-16 surrogates ("\ud800") are valid in a Python str but in no UTF-8 text: tokenizers
# raise on them deep inside a batch, naming no field.
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Limits:
    """Explicit request limits. Each trades memory/latency against what a caller may send.

    max_question_chars: a question is a query, not a document.
    max_passages: passages per request; compress_batch() is the path for more work.
    max_passage_chars: characters per passage; longer passages are processed in blocks, so
        this bounds memory and latency (about 1 s per 100k characters on 2 CPU cores), not
        correctness.
    max_request_chars: all passages of one request together.
    """

    max_question_chars: int = 4_096
    max_passages: int = 1_000
    max_passage_chars: int = 2_000_000
    max_request_chars: int = 8_000_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Passage:
    text: str
    title: str | None = None
    # What a retriever attached; never read by the engine, echoed unchanged in the result.
    id: str | int | None = None
    metadata: Mapping[str, Any] | None = None


def _finite_number(name: str, value: object) -> None:
    """An int or float that is a finite float: huge ints (10**400) overflow float conversion."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        # str() of a huge int is itself refused past 4,300 digits: describe it by its size.
        shown = value if isinstance(value, float) else f"an integer of {value.bit_length():,} bits"
        raise ValueError(f"{name} must be a finite number, got {shown}")


def check_text(where: str, text: str) -> None:
    """Refuse text that no tokenizer can read: lone surrogates (not encodable as UTF-8)."""
    if not text.isascii():
        bad = _SURROGATE.search(text)
        if bad:
            raise ValueError(f"{where} has a lone surrogate {bad.group()!r} at character {bad.start()}; "
                             "text must be valid Unicode (encodable as UTF-8)")


@dataclass(frozen=True)
class Options:
    """Per-call selection options; they never change the Compressor.

    threshold: keep a sentence whose score is >= threshold (model default when None).
    keep_ratio: budget mode instead of a threshold: keep the best-scoring sentences until this
        fraction of the request's passage characters is kept (0 < keep_ratio <= 1).
    relative_threshold: threshold mode also drops a sentence scoring below this fraction of the
        best score in its passage.
    passage_threshold: a passage whose rerank score is below it keeps no sentence.
    Without threshold and keep_ratio a request gets the model's whole default operating point
    (its threshold and cuts; an option set here replaces the model's); with either, only the cuts
    given here apply (engine.pipeline.select).
    top_k: with reorder, keep only the k passages with the highest rerank score.
    reorder: return passages sorted by rerank score (best first) instead of input order.
    """

    threshold: float | None = None
    keep_ratio: float | None = None
    relative_threshold: float | None = None
    passage_threshold: float | None = None
    top_k: int | None = None
    reorder: bool = False

    def __post_init__(self) -> None:
        if self.threshold is not None:
            _finite_number("threshold", self.threshold)
        if self.keep_ratio is not None:
            _finite_number("keep_ratio", self.keep_ratio)
            if not 0.0 < self.keep_ratio <= 1.0:
                raise ValueError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")
            if self.threshold is not None:
                raise ValueError("give either threshold or keep_ratio, not both")
        if self.relative_threshold is not None:
            _finite_number("relative_threshold", self.relative_threshold)
            if not 0.0 <= self.relative_threshold <= 1.0:
                raise ValueError(f"relative_threshold must be in [0, 1], got {self.relative_threshold}")
            # with keep_ratio it has no effect (budget mode ranks the whole request), so a batch
            # job's default relative_threshold merges with an item's keep_ratio without an error
        if self.passage_threshold is not None:
            _finite_number("passage_threshold", self.passage_threshold)
        if self.top_k is not None:
            if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
                raise TypeError(f"top_k must be an int, got {type(self.top_k).__name__}")
            if self.top_k < 1:
                raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not isinstance(self.reorder, bool):
            raise TypeError(f"reorder must be a bool, got {type(self.reorder).__name__}")


@dataclass(frozen=True)
class Request:
    question: str
    passages: tuple[Passage, ...]
    options: Options = field(default_factory=Options)


def _passage(i: int, item: object, limits: Limits) -> Passage:
    where = f"passages[{i}]"
    if isinstance(item, str):
        text, title = item, None
    elif isinstance(item, Mapping):
        unknown = set(item) - set(PASSAGE_KEYS)
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}; allowed: "
                             f"{', '.join(map(repr, PASSAGE_KEYS))}")
        if "text" not in item:
            raise ValueError(f"{where} is a mapping without 'text'")
        text, title = item["text"], item.get("title")
        if not isinstance(text, str):
            raise TypeError(f"{where}.text must be a string, got {type(text).__name__}")
        if title is not None and not isinstance(title, str):
            raise TypeError(f"{where}.title must be a string or null, got {type(title).__name__}")
        pid, metadata = item.get("id"), item.get("metadata")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, (str, int))):
            raise TypeError(f"{where}.id must be a string or an integer, got {type(pid).__name__}")
        if metadata is not None and not (isinstance(metadata, Mapping) and all(isinstance(k, str) for k in metadata)):
            raise TypeError(f"{where}.metadata must be a JSON object (a mapping with string keys), "
                            f"got {type(metadata).__name__}")
    else:
        raise TypeError(
            f"{where} must be a string or a {{'text', 'title', 'id', 'metadata'}} mapping, got {type(item).__name__}"
        )
    if len(text) > limits.max_passage_chars:
        raise ValueError(
            f"{where} has {len(text):,} characters; the limit is {limits.max_passage_chars:,} "
            "(raise Limits.max_passage_chars)"
        )
    check_text(where if isinstance(item, str) else f"{where}.text", text)
    if isinstance(item, str):
        return Passage(text=text)
    if title is not None:
        check_text(f"{where}.title", title)
    return Passage(text=text, title=title, id=item.get("id"), metadata=item.get("metadata"))


def validate(question: object, passages: object, options: Options, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Check one request and return it in normal form. Raises TypeError/ValueError naming the field."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question is empty")
    if len(question) > limits.max_question_chars:
        raise ValueError(
            f"question has {len(question):,} characters; the limit is {limits.max_question_chars:,}"
        )
    check_text("question", question)
    if isinstance(passages, (str, bytes, Mapping)) or not isinstance(passages, Sequence):
        raise TypeError(f"passages must be a list of strings or mappings, got {type(passages).__name__}")
    if len(passages) > limits.max_passages:
        raise ValueError(f"passages has {len(passages):,} items; the limit is {limits.max_passages:,}")
    normal = tuple(_passage(i, p, limits) for i, p in enumerate(passages))
    total = sum(len(p.text) for p in normal)
    if total > limits.max_request_chars:
        raise ValueError(
            f"passages hold {total:,} characters together; the limit is {limits.max_request_chars:,}"
        )
    return Request(question=question, passages=normal, options=options)
