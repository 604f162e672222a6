"""The `encoder-pruner` graph, shared by the Provence (DeBERTa) and trained BERT pruner exports.

Contract: one `[CLS] question [SEP] context [SEP]` sequence per row, `input_ids` and
`attention_mask` [R, W] int64 -> `keep_prob` [R, W] (softmax index 1 of the token head, fused)
and `rank_logit` [R]. The fp32 graph must match torch within 1e-4 over real (unpadded) tokens on
random right-padded batches, or nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from thresher.engine.runner import open_session
from thresher.export.onnx_io import export_onnx, max_abs_diff, quantize_int8, verify

PRECISIONS = ("fp32", "int8", "fp16")
FP32_TOLERANCE = 1e-4
FP16_TOLERANCE = 2e-2


def random_feeds(vocab: int, seed: int, rows: int = 3, *, cls: int, low: int) -> dict[str, np.ndarray]:
    """Right-padded rows of different lengths starting with [CLS], other ids in [low, vocab)."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(12, 48))
    lengths = rng.integers(4, width + 1, rows)
    lengths[0] = width
    ids = np.zeros((rows, width), np.int64)
    mask = np.zeros((rows, width), np.int64)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(low, vocab, n)
        ids[r, 0] = cls
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def masked_diff(path: Path, module: nn.Module, feeds_list: list[dict]) -> float:
    """Largest |ORT - torch| over real (unpadded) positions and all rank logits."""

    sess, worst = open_session(path), 0.0
    for feeds in feeds_list:
        got = sess.run(None, feeds)
        with torch.no_grad():
            want = module(*(torch.from_numpy(v) for v in feeds.values()))
        real = feeds["attention_mask"].astype(bool)
        worst = max(worst, float(np.abs(got[0] - want[0].numpy())[real].max()),
                    float(np.abs(got[1] - want[1].numpy()).max()))
    return worst


def export_pruner_graph(module: nn.Module, vocab: int, out_dir: Path, precision: str, *,
                        cls: int, low: int) -> dict:
    """Write out_dir/model.onnx at `precision`; returns the manifest's verification fields.

    "int8": per-channel weights, per-token activations, for CPU (its largest difference from
    torch is recorded); "fp16": for GPU execution providers, checked within 2e-2.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    module = module.eval()
    fp32 = out_dir / ("model.onnx" if precision == "fp32" else "model.fp32.onnx")
    example = {k: torch.from_numpy(v) for k, v in random_feeds(vocab, 0, cls=cls, low=low).items()}
    export_onnx(module, tuple(example.values()), fp32, list(example), ["keep_prob", "rank_logit"],
                {"input_ids": {0: "rows", 1: "width"}, "attention_mask": {0: "rows", 1: "width"}})
    checks = [random_feeds(vocab, s, rows, cls=cls, low=low) for s, rows in ((1, 3), (2, 1), (3, 5))]
    try:
        verified = masked_diff(fp32, module, checks)
        if not verified <= FP32_TOLERANCE:
            raise ValueError(f"exported graph differs from torch by {verified:.3g} "
                             f"(> {FP32_TOLERANCE}); not writing it")
    except BaseException:
        fp32.unlink(missing_ok=True)
        raise
    extra: dict = {"verified_max_abs_diff": verified}
    if precision == "int8":
        quantize_int8(fp32, out_dir / "model.onnx")
        extra["int8_max_abs_diff"] = max_abs_diff(out_dir / "model.onnx", module, checks[0])
        fp32.unlink()
    elif precision == "fp16":
        _convert_fp16(fp32, out_dir / "model.onnx")
        fp32.unlink()
        try:
            verify(out_dir / "model.onnx", module, checks[:1], tolerance=FP16_TOLERANCE)
        except BaseException:
            (out_dir / "model.onnx").unlink(missing_ok=True)
            raise
    return extra


def _convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and activations, fp32 inputs/outputs (for CUDA/TensorRT execution providers)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
