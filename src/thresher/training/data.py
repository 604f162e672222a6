"""Training examples for the pruner from ../shared/data/*/dev.jsonl, with sentence keep labels.

One example = one (question, passage) pair: the passage's title, its sentences and a 0/1 label
per sentence; the passage is relevant when any sentence is positive. Labels per source:
- hotpotqa_distractor, 2wikimultihopqa: the supporting sentences; every other sentence of the
  question's 10 paragraphs is negative (whole distractor paragraphs included).
- hotpotqa_fullwiki_dev: the same HotpotQA questions with the 10 paragraphs of a TF-IDF
  retriever instead (hard negatives; the gold paragraphs are often missing, and then every
  retrieved sentence is negative). A question id shared with hotpotqa_distractor falls in the
  same fold in both, so no validation question is trained on.
- clapnq: the human-selected sentences; unanswerable questions have none.
- squad_v2.0_dev (+ the squad_v1.1_dev questions it lacks): sentences (thresher's own
  segmentation) that contain an answer string; unanswerable questions have none.
- nq_open_oracle: sentences of the gold passage that contain an answer string (case-insensitive).

Questions are split by id into folds (`fold_of`): about a quarter is "validation" (model
selection, threshold and every reported figure), the rest "train". Only dev.jsonl files are read;
the sealed hold-out is never touched.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("hotpotqa_distractor", "2wikimultihopqa", "hotpotqa_fullwiki_dev", "clapnq", "squad",
           "nq_open_oracle")
VALIDATION_SHARE = 4  # 1 question in 4 goes to validation


def fold_of(question_id: str) -> str:
    """"validation" or "train", from a hash of the question id (stable across runs and machines)."""
    h = int(hashlib.sha1(f"thresher-fold:{question_id}".encode()).hexdigest()[:8], 16)
    return "validation" if h % VALIDATION_SHARE == 0 else "train"


@dataclass(frozen=True)
class Example:
    source: str
    qid: str
    question: str
    title: str
    sentences: tuple[str, ...]
    labels: tuple[int, ...]

    @property
    def relevant(self) -> bool:
        return any(self.labels)


def _records(data_dir: Path, name: str) -> Iterator[dict]:
    path = data_dir / name / "dev.jsonl"
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _multihop(data_dir: Path, name: str) -> Iterator[Example]:
    for r in _records(data_dir, name):
        gold: dict[str, set[int]] = {}
        for title, idx in r["supporting_facts"]:
            gold.setdefault(title, set()).add(int(idx))
        for title, sentences in r["context"]:
            g = gold.get(title, set())
            yield Example(name, r["id"], r["question"], title, tuple(sentences),
                          tuple(int(i in g) for i in range(len(sentences))))


def _clapnq(data_dir: Path) -> Iterator[Example]:
    for r in _records(data_dir, "clapnq"):
        gold = {int(i) for i in r["gold_sentence_ids"]} if r["answerable"] in (True, "True") else set()
        for p in r["passages"]:
            yield Example("clapnq", r["id"], r["question"], p["title"], tuple(p["sentences"]),
                          tuple(int(i in gold) for i in range(len(p["sentences"]))))


def _answer_sentences(source: str, qid: str, question: str, title: str, text: str,
                      answers: list[str], case_sensitive: bool) -> Example:
    from thresher.engine.segment import split_rules

    sentences = [text[a:b] for a, b in split_rules(text).tolist()]
    fold = (lambda s: s) if case_sensitive else str.lower
    answers = [fold(a) for a in answers if a.strip()]
    labels = tuple(int(any(a in fold(s) for a in answers)) for s in sentences)
    return Example(source, qid, question, title, tuple(sentences), labels)


def _squad(data_dir: Path) -> Iterator[Example]:
    seen = set()
    for name in ("squad_v2.0_dev", "squad_v1.1_dev"):  # v2 holds most v1 questions: each id once
        for r in _records(data_dir, name):
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            impossible = r.get("is_impossible") in (True, "True")
            yield _answer_sentences("squad", r["id"], r["question"].strip(), r["title"].replace("_", " "),
                                    r["context"], [] if impossible else list(r["answers"]), True)


def _nq(data_dir: Path) -> Iterator[Example]:
    for r in _records(data_dir, "nq_open_oracle"):
        for p in r["passages"]:
            yield _answer_sentences("nq_open_oracle", r["id"], r["question"], p["title"], p["text"],
                                    list(r["answers"]), False)


def load_examples(data_dir: str | Path, *, max_questions: dict[str, int] | None = None,
                  seed: int = 0) -> dict[str, list[Example]]:
    """{"train": [...], "validation": [...]} from every source present under data_dir.

    max_questions caps the questions taken per source (a seeded sample, the same for both
    folds), so a full run fits the time budget; None = all.
    """
    data_dir = Path(data_dir)
    readers = {"hotpotqa_distractor": lambda: _multihop(data_dir, "hotpotqa_distractor"),
               "2wikimultihopqa": lambda: _multihop(data_dir, "2wikimultihopqa"),
               "hotpotqa_fullwiki_dev": lambda: _multihop(data_dir, "hotpotqa_fullwiki_dev"),
               "clapnq": lambda: _clapnq(data_dir), "squad": lambda: _squad(data_dir),
               "nq_open_oracle": lambda: _nq(data_dir)}
    out: dict[str, list[Example]] = {"train": [], "validation": []}
    for source in SOURCES:
        examples = [e for e in readers[source]() if e.sentences]
        qids = sorted({e.qid for e in examples})
        cap = (max_questions or {}).get(source)
        if cap is not None and cap < len(qids):
            qids = random.Random(f"{seed}:{source}").sample(qids, cap)
        keep = set(qids)
        for e in examples:
            if e.qid in keep:
                out[fold_of(e.qid)].append(e)
    return out
