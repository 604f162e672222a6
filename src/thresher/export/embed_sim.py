"""Export a sentence-transformers BERT bi-encoder (all-MiniLM-L6-v2) as an `embed-sim` model.

The graph returns token states of packed rows; thresher mean-pools them per sentence in NumPy
(segment sums over the packer's token labels) and scores cosine(question, sentence).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from thresher import __version__
from thresher.export.bert import load_bert
from thresher.export.onnx_io import export_onnx, quantize_int8, verify
from thresher.manifest import write_manifest

PRECISIONS = ("fp32", "int8")


def _random_feeds(vocab: int, seed: int) -> dict[str, np.ndarray]:
    """A packed batch of 3 rows with 1-3 sequences each and padding, like the packer emits."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(8, 40))
    ids = np.zeros((3, width), np.int64)
    pos = np.zeros((3, width), np.int64)
    seg = np.zeros((3, width), np.int32)
    for r in range(3):
        start = 0
        for s in range(1, int(rng.integers(1, 4)) + 1):
            n = int(rng.integers(1, max(2, (width - start) // 2 + 1)))
            if start + n > width:
                break
            ids[r, start:start + n] = rng.integers(1, vocab, n)
            pos[r, start:start + n] = np.arange(n)
            seg[r, start:start + n] = s
            start += n
    return {"input_ids": ids, "position_ids": pos, "segment_ids": seg}


def export_embed_sim(checkpoint_dir: str | Path, out_dir: str | Path, *, precision: str = "int8",
                     threshold: float, segmenter: str, max_length: int = 256, name: str = "",
                     source: dict | None = None) -> Path:
    """Write out_dir/{model.onnx, tokenizer.json, thresher.json}; returns out_dir."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if not (checkpoint_dir / "tokenizer.json").is_file():
        raise ValueError(f"{checkpoint_dir} has no tokenizer.json (a fast tokenizer is required)")
    model, config = load_bert(checkpoint_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / ("model.onnx" if precision == "fp32" else "model.fp32.onnx")
    example = {k: torch.from_numpy(v) for k, v in _random_feeds(config["vocab_size"], 0).items()}
    export_onnx(model, tuple(example.values()), fp32, list(example), ["hidden"],
                {name: {0: "rows", 1: "width"} for name in example})
    verify(fp32, model, [_random_feeds(config["vocab_size"], s) for s in (1, 2)], tolerance=1e-4)
    if precision == "int8":
        quantize_int8(fp32, out_dir / "model.onnx")
        fp32.unlink()
    shutil.copyfile(checkpoint_dir / "tokenizer.json", out_dir / "tokenizer.json")
    tok = json.loads((checkpoint_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    write_manifest(out_dir, {
        "kind": "embed-sim",
        "name": name or checkpoint_dir.name,
        "source": source or {"path": str(checkpoint_dir)},
        "precision": precision,
        "max_length": min(max_length, config["max_position_embeddings"]),
        "hidden_size": config["hidden_size"],
        "special_ids": {"cls": vocab["[CLS]"], "sep": vocab["[SEP]"], "pad": vocab["[PAD]"]},
        "pooling": "mean",
        "threshold": threshold,
        "segmenter": segmenter,
        "exporter_version": __version__,
        "files": ["model.onnx", "tokenizer.json"],
    })
    return out_dir
