"""Every dev set as one kind of evaluation question, scored once and judged offline.

A question is a question string, its passages and what counts as success on it:
- "recall" sets (HotpotQA distractor and fullwiki, 2WikiMultihopQA, ClapNQ): gold sentences as
  character spans; a gold sentence is recalled when the kept sentences cover >= COVER of its
  non-space characters (common_quality.recalled).
- "answer" sets (SQuAD v1.1, SQuAD v2, NQ-open oracle): the pruned text still contains one of
  the answer strings (case-sensitive for SQuAD, as its answers are spans; case-insensitive for NQ).
  Questions whose full passages do not contain an answer are left out (nothing to keep).
- unanswerable questions (SQuAD v2, ClapNQ): success is an empty result.

Scoring runs the model once per question (`score`); every selection rule is then applied to the
returned sentence and rerank scores offline (`judge`), exactly as the engine applies it, so a
sweep over thresholds costs no model time.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from common import load_records
from common_quality import gold_spans, locate_sentences, recalled

SETS = ("hotpotqa_distractor", "2wikimultihopqa", "hotpotqa_fullwiki_dev", "clapnq", "squad_v1.1_dev",
        "squad_v2.0_dev", "nq_open_oracle")
SHORT = {"hotpotqa_distractor": "HotpotQA", "2wikimultihopqa": "2Wiki", "hotpotqa_fullwiki_dev": "HotpotQA fullwiki",
         "clapnq": "ClapNQ", "squad_v1.1_dev": "SQuAD v1.1", "squad_v2.0_dev": "SQuAD v2",
         "nq_open_oracle": "NQ oracle"}


@dataclass
class Question:
    source: str
    qid: str
    question: str
    passages: list[dict]  # {"title", "text"}
    gold: list[np.ndarray] | None  # recall sets: int64 [G, 2] character spans per passage
    answers: list[str] | None  # answer sets
    case_sensitive: bool = True
    answerable: bool = True


@dataclass
class Scored:
    """One passage as the model returned it."""
    text: str
    spans: np.ndarray  # int64 [S, 2]
    scores: np.ndarray  # float64 [S]
    rerank: float | None
    cum_nonspace: np.ndarray  # prefix count of non-space characters (for the COVER rule)


def _multihop(name: str) -> list[Question]:
    out = []
    for r in load_records(name):
        by_title: dict[str, list[int]] = {}
        for title, idx in r["supporting_facts"]:
            by_title.setdefault(title, []).append(int(idx))
        if name == "hotpotqa_fullwiki_dev" and r.get("sf_in_context") not in (True, "True"):
            continue  # the retriever missed the gold paragraphs: nothing to recall
        out.append(Question(name, r["id"], r["question"],
                            [{"title": t, "text": "".join(s)} for t, s in r["context"]],
                            [gold_spans(s, by_title.get(t, [])) for t, s in r["context"]], None))
    return out


def _clapnq() -> list[Question]:
    out = []
    for r in load_records("clapnq"):
        answerable = r["answerable"] in (True, "True")
        ids = {int(i) for i in r["gold_sentence_ids"]} if answerable else set()
        out.append(Question("clapnq", r["id"], r["question"],
                            [{"title": p["title"], "text": p["text"]} for p in r["passages"]],
                            [locate_sentences(p["text"], p["sentences"], ids) for p in r["passages"]], None,
                            answerable=answerable))
    return out


def _squad(name: str) -> list[Question]:
    out = []
    for r in load_records(name):
        answerable = r.get("is_impossible") not in (True, "True")
        answers = [a for a in r["answers"] if a.strip()] if answerable else []
        passages = [{"title": r["title"].replace("_", " "), "text": r["context"]}]
        if answerable and not any(a in r["context"] for a in answers):
            continue
        out.append(Question(name, r["id"], r["question"].strip(), passages, None, answers,
                            answerable=answerable))
    return out


def _nq() -> list[Question]:
    out = []
    for r in load_records("nq_open_oracle"):
        answers = [a.lower() for a in r["answers"] if a.strip()]
        passages = [{"title": p["title"], "text": p["text"]} for p in r["passages"]]
        if not any(a in p["text"].lower() for a in answers for p in passages):
            continue
        out.append(Question("nq_open_oracle", r["id"], r["question"], passages, None, answers,
                            case_sensitive=False))
    return out


def load_set(name: str, fold: str = "validation", limit: int | None = None) -> list[Question]:
    """The questions of one dev set in a fold ("validation": the pruner never trained on them)."""
    from thresher.training.data import fold_of

    loaders = {"clapnq": _clapnq, "nq_open_oracle": _nq}
    qs = loaders[name]() if name in loaders else (_squad(name) if name.startswith("squad") else _multihop(name))
    qs = [q for q in qs if fold == "dev" or fold_of(q.qid) == fold]
    return qs[:limit]


def score(compressor, questions: list[Question], batch_size: int = 8) -> list[list[Scored]]:
    results = compressor.compress_batch([(q.question, q.passages) for q in questions],
                                        progress=sys.stderr.isatty(), batch_size=batch_size)
    out = []
    for res in results:
        row = []
        for p in res.passages:
            ns = np.fromiter((not c.isspace() for c in p.text), dtype=np.int64, count=len(p.text))
            cum = np.zeros(len(p.text) + 1, np.int64)
            np.cumsum(ns, out=cum[1:])
            row.append(Scored(p.text, np.array([(s.start, s.end) for s in p.sentences], np.int64).reshape(-1, 2),
                              np.array([s.score for s in p.sentences], np.float64), p.rerank_score, cum))
        out.append(row)
    return out


def judge(questions: list[Question], scored: list[list[Scored]], keep_fn) -> dict:
    """One set's figures under a selection rule keep_fn(list[Scored]) -> keep flags per passage.

    removed: mean fraction of characters removed over answerable questions; recall (micro over
    gold sentences) or answer_kept (share of answerable questions); emptied: share of
    unanswerable questions whose result is empty.
    """
    from thresher.engine.result import pruned_text

    hits = golds = answered = n_ans = emptied = n_unans = 0
    removed = []
    for q, passages in zip(questions, scored):
        keeps = keep_fn(passages)
        texts = [pruned_text(p.text, p.spans, k) for p, k in zip(passages, keeps)]
        if not q.answerable:
            n_unans += 1
            emptied += int(not any(t.strip() for t in texts))
            continue
        n_ans += 1
        total = sum(len(p.text) for p in passages)
        removed.append(1.0 - sum(len(t) for t in texts) / total if total else 0.0)
        if q.gold is not None:
            for p, k, g in zip(passages, keeps, q.gold):
                r = recalled(_as_eval(p, g), k)
                hits, golds = hits + int(r.sum()), golds + r.size
        else:
            fold = (lambda s: s) if q.case_sensitive else str.lower
            answered += int(any(a in fold(t) for a in q.answers for t in texts))
    out = {"questions": n_ans, "removed": float(np.mean(removed)) if removed else 0.0}
    if questions and questions[0].gold is not None:
        out["recall"] = hits / max(golds, 1)
    else:
        out["answer_kept"] = answered / max(n_ans, 1)
    if n_unans:
        out["unanswerable"] = n_unans
        out["emptied"] = emptied / n_unans
    return out


def _as_eval(p: Scored, gold: np.ndarray):
    from common_quality import PassageEval

    return PassageEval(p.text, p.spans, p.scores, gold, p.cum_nonspace)


def quality_of(figures: dict) -> float:
    """The set's headline quality: gold-sentence recall or answer kept."""
    return figures["recall"] if "recall" in figures else figures["answer_kept"]
