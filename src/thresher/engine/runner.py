"""Backends: the runner contract, and ONNX Runtime runners for CPU, CUDA and TensorRT.

A runner runs one packed model call: a dict of NumPy feeds in, the graph's outputs (NumPy) out.
Scorers build the feeds, cut their work into calls of at most `call_tokens` padded tokens
(engine.batch.cut_runs) and read the outputs; they never open sessions themselves.
`Compressor.load(model, device=, backend=)` chooses the runner (thresher.backends); the torch
runners live in engine/torch_backend.py, the same contract on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort

from thresher.engine.cpu import available_cpus

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
CPU_PROVIDERS = ("CPUExecutionProvider",)
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")

# Padded tokens per model call. On a CPU small calls are faster per token: their activations stay
# in cache (MiniLM int8 on this project's CPU, 2 threads: 30 us/token at 320-640 tokens per call,
# 39 at 5,120), and a batch of 8 HotpotQA requests ran 1.1x (pruner) to 2x (cosine) faster in
# 512-token calls than in 8-16k-token ones (benchmarks/RESULTS.md, "Call size"). Causal LMs carry
# a rows x width^2 tree mask, which bounds their calls. GPUs want large calls to fill the device.
CPU_CALL_TOKENS = {"embed-sim": 512, "encoder-pruner": 512, "causal-yesno": 8_192, "causal-eos": 8_192}
GPU_CALL_TOKENS = 16_384


class Runner(Protocol):
    """What a scorer needs from a backend."""

    call_tokens: int  # padded tokens (rows x width) one call may hold
    padded: bool  # a call is a dense [rows, width] batch: it costs rows x its widest row

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One model call: the graph's named inputs -> its outputs, in the graph's order."""
        ...


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return number


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ValueError(f"{name} must be 0/1, true/false, yes/no or on/off, got {value!r}")
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SessionConfig:
    """ONNX Runtime session options.

    intra_op_threads: threads inside one operator. Default: THRESHER_THREADS when set, else the
    cores this process may use (affinity mask and cgroup CPU quota, engine/cpu.py), not the
    host's: a pool sized from the host oversubscribes a container's quota. 0 = ONNX Runtime's
    choice (all host cores).
    spin: whether idle pool threads spin waiting for work (ONNX Runtime's default) instead of
    sleeping. Default: THRESHER_SPIN when set, else off: on a shared CPU a spinning pool burns
    the cores (or the quota) the other work needs (benchmarks/RESULTS.md, "Shared CPU").
    inter_op_threads: threads across independent operators; 1 suits these sequential graphs.
    optimization: one of disable | basic | extended | all.
    providers: execution providers in order of preference; absent ones are skipped.
    disabled_optimizers: ONNX Runtime graph rewrites to skip. By default the two that replace
    standard ops by fused contrib kernels (LayerNorm + residual -> SkipLayerNormalization, bias +
    Gelu -> BiasGelu): on this project's CPU (2-core AVX-512 EPYC) the fused kernels are slower
    than the plain ops they replace; MiniLM int8 runs ~15% faster without them, with the same
    outputs (benchmarks/RESULTS.md, "Default model: latency"). GPU configs clear it.
    """

    intra_op_threads: int | None = None
    spin: bool | None = None
    inter_op_threads: int = 1
    optimization: str = "all"
    providers: tuple[str, ...] = CPU_PROVIDERS
    disabled_optimizers: tuple[str, ...] = ("SkipLayerNormFusion", "BiasGeluFusion")

    def __post_init__(self) -> None:
        if self.intra_op_threads is None:
            threads = _env_int("THRESHER_THREADS")
            object.__setattr__(self, "intra_op_threads", available_cpus() if threads is None else threads)
        if self.spin is None:
            object.__setattr__(self, "spin", _env_flag("THRESHER_SPIN", False))
        if not isinstance(self.spin, bool):
            raise ValueError(f"spin must be a bool, got {self.spin!r}")
        if self.optimization not in _OPT_LEVELS:
            raise ValueError(f"optimization must be one of {sorted(_OPT_LEVELS)}, got {self.optimization!r}")
        for name in ("intra_op_threads", "inter_op_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def gpu_session_config(**overrides) -> SessionConfig:
    """Prefer TensorRT, then CUDA, then CPU; keep the fused ops that the CPU default skips."""
    return SessionConfig(**{"providers": GPU_PROVIDERS, "disabled_optimizers": (), **overrides})


def open_session(path: str | Path, config: SessionConfig | None = None) -> ort.InferenceSession:
    config = config or SessionConfig()  # built per call: THRESHER_* env vars are read then, not at import
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = config.intra_op_threads
    opts.inter_op_num_threads = config.inter_op_threads
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = _OPT_LEVELS[config.optimization]
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if config.spin else "0")
    available = set(ort.get_available_providers())
    providers = [p for p in config.providers if p in available] or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers,
                                disabled_optimizers=list(config.disabled_optimizers))


def check_call_tokens(call_tokens: object) -> int:
    if isinstance(call_tokens, bool) or not isinstance(call_tokens, int) or call_tokens < 1:
        raise ValueError(f"call_tokens must be an int >= 1, got {call_tokens!r}")
    return call_tokens


class OrtRunner:
    """An ONNX Runtime session behind the runner contract (CPU, CUDA or TensorRT providers)."""

    padded = True

    def __init__(self, path: str | Path, call_tokens: int, config: SessionConfig | None = None):
        self.call_tokens = check_call_tokens(call_tokens)
        self.session = open_session(path, config or SessionConfig())

    @property
    def providers(self) -> list[str]:
        """The providers the session actually uses (absent ones were skipped)."""
        return self.session.get_providers()

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, feeds)


def cuda_providers_available() -> list[str]:
    """The GPU execution providers this onnxruntime build offers ([] for the CPU package)."""
    return [p for p in GPU_PROVIDERS[:-1] if p in ort.get_available_providers()]
