"""Real batch-job inputs from ../shared/data/hotpotqa_distractor/dev.jsonl (shared by the tests)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import load_jsonl


def hotpot_requests(n: int) -> list[dict]:
    """`n` batch requests {"id", "question", "passages": [{"title", "text"}]} from real records."""
    return [
        {"id": r["id"], "question": r["question"],
         "passages": [{"title": t, "text": "".join(s)} for t, s in r["context"]]}
        for r in load_jsonl("hotpotqa_distractor", limit=n)
    ]


def write_jsonl(path: Path, records: list, extra_lines: dict[int, bytes] | None = None) -> Path:
    """Records one per line; `extra_lines` puts raw bytes at those 1-based line numbers."""
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in records]
    for n, raw in sorted((extra_lines or {}).items()):
        lines.insert(n - 1, raw)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path
