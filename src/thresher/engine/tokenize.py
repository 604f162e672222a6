"""HF fast tokenizer (tokenizers.Tokenizer from tokenizer.json) without torch or transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load tokenizer.json with truncation and padding off: thresher never cuts text silently."""
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


def encode_flat(tok: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode texts without special tokens in one call; returns flat int64 ids and cu_seqlens."""
    encs = tok.encode_batch(texts, add_special_tokens=False) if texts else []
    lens = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
    cu = np.zeros(len(encs) + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    ids = np.fromiter((i for e in encs for i in e.ids), dtype=np.int64, count=int(cu[-1]))
    return ids, cu


def token_id(tok: Tokenizer, token: str) -> int:
    tid = tok.token_to_id(token)
    if tid is None:
        raise ValueError(f"tokenizer has no token {token!r}")
    return int(tid)
