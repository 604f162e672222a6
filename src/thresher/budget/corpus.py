"""The retrieval corpus and the evaluation questions, built from ../shared/data dev files.

Passages: HotpotQA paragraphs (distractor setting: gold + distractors), NQ-open gold passages
and SQuAD contexts (v1.1 and v2.0 overlap), deduplicated by exact (title, text). Questions keep
what their source can grade: gold supporting-sentence character spans (HotpotQA) or answer
strings (NQ, SQuAD). Everything is ordered deterministically, so the same arguments always give
the same corpus and question list.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("hotpotqa", "nq", "squad")
_FILES = {  # source -> data folders (dev.jsonl each)
    "hotpotqa": ("hotpotqa_distractor",),
    "nq": ("nq_open_oracle",),
    "squad": ("squad_v1.1_dev", "squad_v2.0_dev"),
}
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class CorpusPassage:
    pid: str  # sha1 of title + text, first 16 hex digits
    title: str
    text: str
    source: str

    def as_input(self) -> dict[str, str]:
        """The passage as a Compressor input."""
        return {"title": self.title, "text": self.text}


@dataclass(frozen=True)
class Question:
    qid: str
    source: str
    question: str
    answers: tuple[str, ...]  # graded by answer-string recall when `gold` is empty
    gold: tuple[tuple[str, int, int], ...]  # (pid, start, end) of each gold supporting sentence

    @property
    def split(self) -> str:
        return split_of(self.qid)


def passage_id(title: str, text: str) -> str:
    return hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]


def split_of(qid: str) -> str:
    """train / val / test by a hash of the question id (60/20/20), stable across runs."""
    bucket = int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 6 else "val" if bucket < 8 else "test"


def _records(data_dir: Path, folder: str) -> Iterator[dict]:
    path = data_dir / folder / "dev.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is absent: the budget corpus needs ../shared/data/{folder}")
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _hotpot(record: dict, add) -> Question:
    pids = {}
    offsets = {}
    for title, sentences in record["context"]:
        pids[title] = add(title, "".join(sentences), "hotpotqa")
        starts = [0]
        for s in sentences:
            starts.append(starts[-1] + len(s))
        offsets[title] = (starts, sentences)
    gold = []
    for title, sent_id in record["supporting_facts"]:
        starts, sentences = offsets[title]
        lead = len(sentences[sent_id]) - len(sentences[sent_id].lstrip())
        gold.append((pids[title], starts[sent_id] + lead, starts[sent_id + 1]))
    return Question(record["id"], "hotpotqa", record["question"], (record["answer"],), tuple(gold))


def build(data_dir: str | Path, sources: tuple[str, ...] = SOURCES
          ) -> tuple[list[CorpusPassage], list[Question]]:
    """Passages (deduplicated, first-seen order) and gradable questions from the dev files.

    Questions without anything to grade (SQuAD v2 unanswerable, HotpotQA records whose
    supporting facts are not all present) are left out of the question list; their passages
    stay in the corpus as distractors.
    """
    unknown = set(sources) - set(SOURCES)
    if unknown:
        raise ValueError(f"sources has unknown names {sorted(unknown)}; known: {list(SOURCES)}")
    data_dir = Path(data_dir)
    passages: dict[str, CorpusPassage] = {}

    def add(title: str, text: str, source: str) -> str:
        pid = passage_id(title, text)
        passages.setdefault(pid, CorpusPassage(pid, title, text, source))
        return pid

    questions: dict[str, Question] = {}
    for source in sources:
        for folder in _FILES[source]:
            for r in _records(data_dir, folder):
                if source == "hotpotqa":
                    titles = {t for t, _ in r["context"]}
                    if not all(t in titles for t, _ in r["supporting_facts"]):
                        for title, sentences in r["context"]:
                            add(title, "".join(sentences), source)
                        continue
                    q = _hotpot(r, add)
                elif source == "nq":
                    p = r["passages"][0]
                    add(p["title"], p["text"], source)
                    q = Question(r["id"], source, r["question"], tuple(r["answers"]), ())
                else:
                    add(r["title"].replace("_", " "), r["context"], source)
                    q = Question(r["id"], source, r["question"], tuple(a for a in r["answers"] if a), ())
                if (q.gold or q.answers) and q.qid not in questions:
                    questions[q.qid] = q
    return list(passages.values()), list(questions.values())


def select_questions(questions: list[Question], per_source: int, splits: tuple[str, ...] = SPLITS
                     ) -> list[Question]:
    """`per_source` questions of each source in the given splits, in a hashed (not file) order,
    so a smaller selection is always a prefix of a larger one."""
    if per_source < 1:
        raise ValueError(f"per_source must be >= 1, got {per_source}")
    out = []
    for source in SOURCES:
        pool = [q for q in questions if q.source == source and q.split in splits]
        pool.sort(key=lambda q: hashlib.sha256(q.qid.encode()).hexdigest())
        out.extend(pool[:per_source])
    return out
