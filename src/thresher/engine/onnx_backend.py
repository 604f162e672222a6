"""ONNX Runtime sessions with explicit options, shared by every model kind."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _env_threads() -> int:
    """THRESHER_THREADS, read when a config is made (never at import, so a bad value cannot
    break `import thresher`)."""
    raw = os.environ.get("THRESHER_THREADS", "0").strip() or "0"
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"THRESHER_THREADS must be an integer >= 0 (0 = all cores), got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class SessionConfig:
    """intra_op_threads: threads inside one operator; 0 = ONNX Runtime's choice (all cores).
    Set THRESHER_THREADS to override the default for every session.
    inter_op_threads: threads across independent operators; 1 suits these sequential graphs.
    optimization: one of disable | basic | extended | all.
    providers: execution providers in order of preference; absent ones are skipped.
    disabled_optimizers: ONNX Runtime graph rewrites to skip. By default the two that replace
    standard ops by fused contrib kernels (LayerNorm + residual -> SkipLayerNormalization, bias +
    Gelu -> BiasGelu): on this project's CPU (2-core AVX-512 EPYC) the fused kernels are slower
    than the plain ops they replace; MiniLM int8 runs ~15% faster without them, with the same
    outputs (benchmarks/RESULTS.md, "Default model: latency"). GPU configs clear it.
    call_tokens: padded tokens per model call for the encoder scorers (embed-sim,
    encoder-pruner), which cut a batch into calls of about this size. On a CPU small calls are
    faster per token: their activations stay in cache (MiniLM int8 on this project's CPU, 2
    threads: 30 us/token at 320-640 tokens per call, 39 at 5,120), and a batch of 8 HotpotQA
    requests ran 1.1x (pruner) to 2x (cosine) faster in 512-token calls than in 8-16k-token
    ones (benchmarks/RESULTS.md, "Call size"). GPUs want large calls: their configs raise it.
    """

    intra_op_threads: int = field(default_factory=_env_threads)
    inter_op_threads: int = 1
    optimization: str = "all"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    disabled_optimizers: tuple[str, ...] = ("SkipLayerNormFusion", "BiasGeluFusion")
    call_tokens: int = 512

    def __post_init__(self) -> None:
        if self.optimization not in _OPT_LEVELS:
            raise ValueError(f"optimization must be one of {sorted(_OPT_LEVELS)}, got {self.optimization!r}")
        if self.intra_op_threads < 0 or self.inter_op_threads < 0:
            raise ValueError("thread counts must be >= 0")
        if isinstance(self.call_tokens, bool) or not isinstance(self.call_tokens, int) or self.call_tokens < 1:
            raise ValueError(f"call_tokens must be an int >= 1, got {self.call_tokens!r}")


def open_session(path: str | Path, config: SessionConfig | None = None) -> ort.InferenceSession:
    config = config or SessionConfig()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = config.intra_op_threads
    opts.inter_op_num_threads = config.inter_op_threads
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = _OPT_LEVELS[config.optimization]
    opts.log_severity_level = 3
    available = set(ort.get_available_providers())
    providers = [p for p in config.providers if p in available] or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers,
                                disabled_optimizers=list(config.disabled_optimizers))
