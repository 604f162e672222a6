"""Runners for a model directory: which backend runs it, on which device.

`Compressor.load(model, device=, backend=)` lands here. backend="onnx" runs the exported graph
with ONNX Runtime: the CPU provider, or CUDA/TensorRT on a GPU (needs the onnxruntime-gpu
package). backend="torch" runs the checkpoint the model was exported from, in torch, with the
Triton kernels and CUDA graphs of engine/torch_backend.py (needs torch, and that checkpoint on
this machine). Both give the scorers the same outputs for the same feeds.
"""

from __future__ import annotations

from pathlib import Path

from thresher.engine.runner import (
    CPU_CALL_TOKENS,
    GPU_CALL_TOKENS,
    OrtRunner,
    Runner,
    SessionConfig,
    cuda_providers_available,
    gpu_session_config,
)

DEVICES = ("cpu", "cuda")
BACKENDS = ("onnx", "torch")
TORCH_KINDS = ("causal-yesno", "encoder-pruner")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # source paths like "thresher/trained/..."


def check_device(device: object) -> str:
    if not isinstance(device, str) or device.split(":")[0] not in DEVICES or device.count(":") > 1 or (
            ":" in device and not device.split(":")[1].isdigit()):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def make_runner(model_dir: Path, manifest: dict, *, device: str = "cpu", backend: str = "onnx",
                session_config: SessionConfig | None = None, call_tokens: int | None = None,
                dtype: str = "bf16") -> Runner:
    """The runner for a loaded manifest. call_tokens defaults per kind and device
    (engine/runner.py explains the numbers); dtype applies to backend="torch" on a GPU."""
    device = check_device(device)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    kind, gpu = manifest["kind"], device.startswith("cuda")
    if call_tokens is None:
        call_tokens = GPU_CALL_TOKENS if gpu else CPU_CALL_TOKENS[kind]
    if backend == "torch":
        return _torch_runner(model_dir, manifest, device, dtype if gpu else "fp32", call_tokens)
    if gpu:
        found = cuda_providers_available()
        if not found:
            import onnxruntime as ort

            raise RuntimeError(
                f"device={device!r} with backend='onnx' needs the onnxruntime-gpu package (instead of "
                f"onnxruntime, never both) and CUDA; this onnxruntime offers {ort.get_available_providers()}. "
                "Use backend='torch' for the torch CUDA path, or device='cpu'")
        session_config = session_config or gpu_session_config()
    return OrtRunner(model_dir / "model.onnx", call_tokens, session_config)


def _source_path(model_dir: Path, manifest: dict, key: str) -> Path:
    where = (manifest.get("source") or {}).get(key)
    path = None if where is None else (PACKAGE_ROOT / where if key == "delta" else Path(where))
    if path is None or not path.exists():
        raise ValueError(
            f"backend='torch' runs the checkpoint {model_dir} was exported from, but its manifest's "
            f"source.{key} is {where!r}, which is not on this machine; pass the checkpoint folder "
            "itself as the model, or use backend='onnx'")
    return path


def _torch_device(kind: str, what: object, device: str, dtype: str):
    if kind not in TORCH_KINDS:
        raise ValueError(f"backend='torch' runs {list(TORCH_KINDS)} models; {what} is {kind!r}: "
                         "use backend='onnx'")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ImportError("backend='torch' needs torch: pip install 'thresher[export]'") from None
    from thresher.engine.torch_backend import resolve_device, resolve_dtype

    return resolve_device(device), resolve_dtype(dtype)


def _yesno_runner(causal_lm, manifest: dict, dev, dt, call_tokens: int) -> Runner:
    from thresher.engine.torch_backend import CausalYesNoTorch, YesNoTorchRunner

    model = CausalYesNoTorch(causal_lm.to(dev, dt), manifest["yes_id"], manifest["no_id"],
                             cuda_graphs=dev.type == "cuda")
    return YesNoTorchRunner(model, call_tokens)


def _pruner_runner(net, dev, dt, call_tokens: int) -> Runner:
    from thresher.engine.torch_backend import EncoderTorchRunner

    return EncoderTorchRunner(net.to(dev, dt), call_tokens, cuda_graphs=dev.type == "cuda")


def _torch_runner(model_dir: Path, manifest: dict, device: str, dtype: str, call_tokens: int) -> Runner:
    """The network a model directory was exported from, found through its manifest's source."""
    dev, dt = _torch_device(manifest["kind"], model_dir, device, dtype)
    source = manifest.get("source") or {}
    if manifest["kind"] == "causal-yesno":
        from thresher.export.causal_lm import load_causal_lm

        lm = load_causal_lm(_source_path(model_dir, manifest, "path"), source.get("adapter"))
        return _yesno_runner(lm.model, manifest, dev, dt, call_tokens)
    if "delta" in source:  # thresher's own trained pruner: LoRA delta over the pip-installed MiniLM
        from thresher.export.bert_pruner import load_trained_pruner

        return _pruner_runner(load_trained_pruner(_source_path(model_dir, manifest, "delta"))[0], dev, dt,
                              call_tokens)
    from thresher.export.provence import load_provence

    return _pruner_runner(load_provence(_source_path(model_dir, manifest, "path"))[0], dev, dt, call_tokens)


def torch_checkpoint(path: Path, kind: str | None = None, *, device: str = "cpu", dtype: str = "bf16",
                     call_tokens: int | None = None) -> tuple[Path, dict, Runner]:
    """A checkpoint folder run in torch as it is, with no ONNX export (minutes and gigabytes for
    a 2B model): its manifest is described in memory. Returns (the folder holding tokenizer.json,
    the manifest, the runner)."""
    from thresher.export.detect import kind_of

    device = check_device(device)
    kind = kind or kind_of(path)
    gpu = device.startswith("cuda")
    dev, dt = _torch_device(kind, path, device, dtype if gpu else "fp32")
    call_tokens = call_tokens or (GPU_CALL_TOKENS if gpu else CPU_CALL_TOKENS[kind])
    if kind == "causal-yesno":
        from thresher.export.causal_lm import load_causal_lm
        from thresher.export.yesno import describe

        lm = load_causal_lm(path)
        if not (path / "tokenizer.json").is_file():
            raise ValueError(f"{path} has no tokenizer.json; backend='torch' reads the fast tokenizer file "
                             "from the checkpoint folder (export a GGUF file with backend='onnx')")
        manifest = describe(lm)
        return path, manifest, _yesno_runner(lm.model, manifest, dev, dt, call_tokens)
    from thresher.export.provence import describe, load_provence

    net, ckpt = load_provence(path)
    return ckpt.path, describe(ckpt), _pruner_runner(net, dev, dt, call_tokens)
