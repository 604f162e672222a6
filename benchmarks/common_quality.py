"""Shared parts of the quality benchmark (quality.py): per-passage evaluation of a pruning model
(gold sentences as character spans, recall under the COVER rule, removal, the selection rules
applied offline exactly as the engine applies them) and the single-passage sets (ClapNQ, SQuAD v2)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from common import hotpot_passages, load_records

COVER = 0.5  # a gold sentence is recalled when >= 50% of its non-space characters are kept


@dataclass
class PassageEval:
    text: str
    spans: np.ndarray  # int64 [S, 2], thresher's sentences
    scores: np.ndarray  # float32 [S]
    gold: np.ndarray  # int64 [G, 2], character spans of gold sentences in text
    cum_nonspace: np.ndarray  # int64 [len(text) + 1], prefix count of non-space characters
    rerank: float | None = None  # the passage's rerank score, where the model has one


def passage_eval(text: str, spans, scores, gold: np.ndarray, rerank: float | None = None) -> PassageEval:
    ns = np.fromiter((not c.isspace() for c in text), dtype=np.int64, count=len(text))
    cum = np.zeros(len(text) + 1, np.int64)
    np.cumsum(ns, out=cum[1:])
    return PassageEval(text, np.asarray(spans, np.int64).reshape(-1, 2), np.asarray(scores, np.float32),
                       gold, cum, rerank)


def gold_spans(sentences: list[str], gold_ids: list[int]) -> np.ndarray:
    ends = np.cumsum([len(s) for s in sentences])
    starts = ends - np.array([len(s) for s in sentences])
    ids = [i for i in gold_ids if 0 <= i < len(sentences)]
    return np.stack([starts[ids], ends[ids]], axis=1).astype(np.int64) if ids else np.zeros((0, 2), np.int64)


def score_records(compressor, records: list[dict], batch_size: int) -> list[list[PassageEval]]:
    items = [(r["question"], hotpot_passages(r)) for r in records]
    results = compressor.compress_batch(items, progress=sys.stderr.isatty(), batch_size=batch_size)
    out = []
    for rec, res in zip(records, results):
        gold_by_title: dict[str, list[int]] = {}
        for title, idx in rec["supporting_facts"]:
            gold_by_title.setdefault(title, []).append(int(idx))
        out.append([passage_eval(p.text, [(s.start, s.end) for s in p.sentences],
                                 [s.score for s in p.sentences],
                                 gold_spans(sentences, gold_by_title.get(title, [])), p.rerank_score)
                    for (title, sentences), p in zip(rec["context"], res.passages)])
    return out


def recalled(p: PassageEval, keep: np.ndarray) -> np.ndarray:
    """Per gold sentence of p: is >= COVER of its non-space characters inside kept sentences?"""
    if p.gold.shape[0] == 0:
        return np.zeros(0, bool)
    kept_ns = np.zeros(len(p.text) + 1, np.int64)
    for a, b in p.spans[keep].tolist():
        kept_ns[a + 1 : b + 1] = 1
    kept_ns[1:] *= np.diff(p.cum_nonspace)  # kept AND non-space, per character
    cum_kept = np.cumsum(kept_ns)
    a, b = p.gold[:, 0], p.gold[:, 1]
    total = p.cum_nonspace[b] - p.cum_nonspace[a]
    return (cum_kept[b] - cum_kept[a]) >= COVER * np.maximum(total, 1)


def evaluate(data: list[list[PassageEval]], keep_fn) -> dict:
    """keep_fn(list[PassageEval]) -> list of keep flags per passage, for one question."""
    from thresher.engine.result import pruned_text

    hits = golds = full = 0
    removed = []
    for passages in data:
        keeps = keep_fn(passages)
        total = kept_chars = 0
        q_hits = q_golds = 0
        for p, k in zip(passages, keeps):
            r = recalled(p, k)
            q_hits += int(r.sum())
            q_golds += r.size
            total += len(p.text)
            kept_chars += len(pruned_text(p.text, p.spans, k))
        hits, golds = hits + q_hits, golds + q_golds
        full += int(q_hits == q_golds)
        removed.append(0.0 if total == 0 else 1.0 - kept_chars / total)
    return {"recall": hits / max(golds, 1), "all_gold_recalled": full / max(len(data), 1),
            "removed": float(np.mean(removed))}


def by_threshold(t: float):
    from thresher.engine.reduce import keep_by_threshold

    return lambda passages: [keep_by_threshold(p.scores, t) for p in passages]


def by_ratio(ratio: float):
    from thresher.engine.reduce import keep_by_ratio

    def keep(passages):
        counts = [p.scores.shape[0] for p in passages]
        if not sum(counts):
            return [np.zeros(0, bool) for _ in passages]
        flat = np.concatenate([p.scores for p in passages])
        lengths = np.concatenate([p.spans[:, 1] - p.spans[:, 0] for p in passages])
        return np.split(keep_by_ratio(flat, lengths, ratio), np.cumsum(counts)[:-1])

    return keep


def lead(k: int):
    return lambda passages: [np.arange(p.scores.shape[0]) < k for p in passages]


def in_fold(question_id: str, fold: str) -> bool:
    if fold == "dev":
        return True
    from thresher.training.data import fold_of

    return fold_of(question_id) == fold


def locate_sentences(text: str, sentences: list[str], ids: set[int]) -> np.ndarray:
    spans, pos = [], 0
    for i, sent in enumerate(sentences):
        at = text.find(sent.strip(), pos)
        if at < 0:
            continue
        pos = at + len(sent.strip())
        if i in ids:
            spans.append((at, pos))
    return np.array(spans, np.int64).reshape(-1, 2)


def clapnq_quality(compressor, threshold: float, fold: str, batch_size: int, limit: int | None) -> dict:
    """ClapNQ: recall (the COVER rule) and character precision of kept text against the human
    sentences on answerable questions; unanswerable questions pruned to nothing."""
    from thresher.engine.reduce import keep_by_threshold

    recs = [r for r in load_records("clapnq") if in_fold(r["id"], fold)][:limit]
    results = compressor.compress_batch([(r["question"], [{"title": p["title"], "text": p["text"]}
                                                          for p in r["passages"]]) for r in recs],
                                        progress=False, batch_size=batch_size)
    hits = golds = kept_in_gold = kept_total = 0
    empty = unanswerable = 0
    for r, res in zip(recs, results):
        answerable = r["answerable"] in (True, "True")
        ids = {int(i) for i in r["gold_sentence_ids"]} if answerable else set()
        for raw, p in zip(r["passages"], res.passages):
            pe = passage_eval(p.text, [(s.start, s.end) for s in p.sentences], [s.score for s in p.sentences],
                              locate_sentences(p.text, raw["sentences"], ids))
            keep = keep_by_threshold(pe.scores, threshold)
            if not answerable:
                unanswerable += 1
                empty += int(not keep.any())
                continue
            got = recalled(pe, keep)
            hits, golds = hits + int(got.sum()), golds + got.size
            in_gold = np.zeros(len(p.text) + 1, np.int64)
            for a, b in pe.gold.tolist():
                in_gold[a + 1:b + 1] = 1
            ns = np.diff(pe.cum_nonspace)
            for a, b in pe.spans[keep].tolist():
                kept_total += int(ns[a:b].sum())
                kept_in_gold += int((ns[a:b] * in_gold[a + 1:b + 1]).sum())
    return {"questions": len(recs), "recall": hits / max(golds, 1),
            "precision": kept_in_gold / max(kept_total, 1),
            "unanswerable_pruned_to_nothing": empty / max(unanswerable, 1), "unanswerable": unanswerable}


def squad_v2_quality(compressor, threshold: float, fold: str, batch_size: int, limit: int | None) -> dict:
    """SQuAD v2: unanswerable questions whose paragraph is pruned to nothing, and answerable ones
    whose pruned text still contains an answer string."""
    recs = [r for r in load_records("squad_v2.0_dev") if in_fold(r["id"], fold)][:limit]
    results = compressor.compress_batch([(r["question"], [r["context"]]) for r in recs], progress=False,
                                        batch_size=batch_size, threshold=threshold)
    empty = unans = kept_answer = ans = 0
    for r, res in zip(recs, results):
        text = res.passages[0].pruned_text
        if r["is_impossible"] in (True, "True"):
            unans += 1
            empty += int(not text.strip())
        else:
            ans += 1
            kept_answer += int(any(a in text for a in r["answers"]))
    return {"questions": len(recs), "unanswerable_pruned_to_nothing": empty / max(unans, 1),
            "unanswerable": unans, "answer_kept": kept_answer / max(ans, 1), "answerable": ans}
