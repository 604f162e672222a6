"""A small in-memory corpus for the framework examples: the paragraphs of the first HotpotQA
dev questions (../shared/data, or $THRESHER_DATA) and a BM25 search over them (bm25s)."""

from __future__ import annotations

import json
import os
from pathlib import Path

DATA = Path(os.environ.get("THRESHER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def load(n_questions: int = 20) -> tuple[list[str], list[dict]]:
    """Questions and their paragraphs: [{"id", "title", "text"}], deduplicated by title."""
    path = DATA / "hotpotqa_distractor" / "dev.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: set THRESHER_DATA to the folder holding hotpotqa_distractor/")
    questions, paragraphs = [], {}
    with path.open(encoding="utf-8") as f:
        for line, _ in zip(f, range(n_questions)):
            row = json.loads(line)
            questions.append(row["question"])
            for title, sentences in row["context"]:
                paragraphs.setdefault(title, {"id": f"p{len(paragraphs)}", "title": title, "text": "".join(sentences)})
    return questions, list(paragraphs.values())


class BM25:
    """BM25 over the paragraphs (title + text)."""

    def __init__(self, paragraphs: list[dict]):
        import bm25s

        self._bm25s = bm25s
        self.paragraphs = paragraphs
        self._index = bm25s.BM25()
        self._index.index(self._tokens([f"{p['title']}. {p['text']}" for p in paragraphs]), show_progress=False)

    def _tokens(self, texts: list[str]):
        return self._bm25s.tokenize(texts, stopwords="en", show_progress=False)

    def search(self, query: str, k: int = 8) -> list[dict]:
        ids, _ = self._index.retrieve(self._tokens([query]), k=k, show_progress=False)
        return [self.paragraphs[int(i)] for i in ids[0]]


def show(label: str, items: list[tuple[str, str, float | None]]) -> None:
    """Print (title, text, score) rows with their sizes."""
    total = sum(len(text) for _, text, _ in items)
    print(f"{label}: {len(items)} passages, {total:,} characters")
    for title, text, score in items:
        head = f"  [{title}]" + ("" if score is None else f" score {score:.3f}")
        print(f"{head} {len(text):,} chars: {text[:160]}{'...' if len(text) > 160 else ''}")
