"""Shared export steps: torch -> ONNX (dynamo exporter), parity check, int8 quantization."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from thresher.engine.runner import open_session
from thresher.export.attention import TRANSLATIONS
from thresher.export.quantize import quantize_int8_per_token

log = logging.getLogger(__name__)


def export_onnx(module: torch.nn.Module, args: tuple, path: Path, input_names: list[str],
                output_names: list[str], dynamic: dict[str, dict[int, str]]) -> None:
    """Export with torch's dynamo exporter into one self-contained file.

    A submodule may ask for a newer opset with an `onnx_opset` attribute (BertLayer: 23, for the
    one-node Attention of export/attention.py); others keep torch's default, because opset 23
    also turns HF rotary embeddings into RotaryEmbedding nodes that ONNX Runtime rejects for the
    causal LMs' packed positions."""

    opset = max((getattr(m, "onnx_opset", 0) for m in module.modules()), default=0) or None
    module.eval()  # torch.onnx.export restores the training flag afterwards; keep dropout off
    dynamic_shapes = {
        name: {axis: torch.export.Dim.AUTO for axis in axes} for name, axes in dynamic.items()
    }
    with torch.no_grad():
        program = torch.onnx.export(module, args, dynamo=True, input_names=input_names,
                                    output_names=output_names, dynamic_shapes=dynamic_shapes,
                                    optimize=True, verbose=False, opset_version=opset,
                                    custom_translation_table=TRANSLATIONS)
    program.save(str(path), external_data=False)


def max_abs_diff(session_path: Path, module: torch.nn.Module, feeds: dict[str, np.ndarray]) -> float:
    """Largest |ORT - torch| over all outputs for one set of inputs."""

    sess = open_session(session_path)
    got = sess.run(None, feeds)
    with torch.no_grad():
        want = module(*(torch.from_numpy(v) for v in feeds.values()))
    want = want if isinstance(want, (tuple, list)) else (want,)
    return max(float(np.max(np.abs(g - w.numpy()))) if g.size else 0.0 for g, w in zip(got, want))


def verify(session_path: Path, module: torch.nn.Module, feeds_list: list[dict[str, np.ndarray]],
           tolerance: float) -> float:
    """Refuse (ValueError) an export that disagrees with torch beyond `tolerance`."""
    worst = max(max_abs_diff(session_path, module, f) for f in feeds_list)
    if not worst <= tolerance:
        raise ValueError(f"exported graph differs from torch by {worst:.3g} (> {tolerance}); not writing it")
    log.info("export verified: max |ORT - torch| = %.3g", worst)
    return worst


def quantize_int8(src: Path, dst: Path) -> None:
    """int8 for CPU: per-channel weights, per-token activations (see export/quantize.py for why
    not ONNX Runtime's quantize_dynamic: its per-batch scale makes scores batch-dependent)."""

    if quantize_int8_per_token(src, dst) == 0:
        raise ValueError(f"{src} has no MatMul with a constant weight to quantize")
