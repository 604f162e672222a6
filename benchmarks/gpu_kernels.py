"""Kernel checks of the GPU check (gpu_check.py): parity with the twins on the device, achieved
bandwidth against a device-to-device copy, and the timing helpers the end-to-end checks share."""

from __future__ import annotations

import time

import numpy as np
import torch

from thresher.kernels.sentence_keep import sentence_keep, sentence_keep_reference
from thresher.kernels.yesno_head import yesno_head, yesno_head_reference

EPS32 = torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- timing


def device_ms(fn, iters: int, device: torch.device) -> float:
    """Median milliseconds of fn() on the device (CUDA events; wall clock on CPU)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def wall_ms(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def pct(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "n": int(a.size)}


# ---------------------------------------------------------------- 1. parity


def check_parity(device: torch.device, tiny: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    worst_head, head_ok = 0.0, True
    shapes = [(1, 64), (37, 1000), (515, 2304)] if not tiny else [(1, 40), (9, 100)]
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n, h in shapes:
            hidden = (torch.randn(n, h, generator=g) * 3).to(dtype)
            head = (torch.randn(2, h, generator=g) * 0.05).to(dtype)
            w = (torch.randn(h, generator=g) * 0.3).to(dtype)
            idx = torch.randint(0, n, (n,), generator=g)
            for kw in ({}, {"norm_weight": w, "eps": 1e-6, "norm_plus_one": True, "softcap": 30.0, "index": idx},
                       {"norm_weight": w, "eps": 1e-5}):
                on = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
                logits, p = yesno_head(hidden.to(device), head.to(device), **on)
                ref, _ = yesno_head_reference(hidden, head, **kw)
                x = hidden.double() if "index" not in kw else hidden.double()[idx]
                scale = torch.ones(x.shape[0], dtype=torch.float64)
                ww = torch.ones(h, dtype=torch.float64)
                if "norm_weight" in kw:
                    ww = w.double() + (1.0 if kw.get("norm_plus_one") else 0.0)
                    scale = torch.rsqrt(x.pow(2).mean(-1) + kw["eps"])
                tol = 8 * h ** 0.5 * EPS32 * ((x.abs() * ww.abs()) @ head.double().abs().t() * scale[:, None]) + 4 * EPS32
                err = (logits.cpu() - ref).abs()
                worst_head = max(worst_head, float(err.max()))
                head_ok &= bool(torch.all(err <= tol.float())) and not bool(torch.isnan(p).any())
    worst_keep, keep_ok, runs = 0.0, True, 0
    for rep in range(3 if tiny else 20):
        b, t = (2, 300) if tiny else (16, int(torch.randint(1000, 9000, (1,), generator=g)))
        n_sent = int(torch.randint(5, 4000, (1,), generator=g))
        runs_len = torch.randint(1, 80, (b * t,), generator=g)
        sid = torch.randint(-1, n_sent, (b * t,), generator=g)
        labels = torch.repeat_interleave(sid, runs_len)[: b * t].to(torch.int32).reshape(b, t)
        sp = torch.sort(torch.randint(0, 20, (n_sent,), generator=g)).values.to(torch.int32)
        for dtype in (torch.float32, torch.bfloat16):
            values = (torch.randn(b, t, 2, generator=g) * 3).to(dtype)
            for fused in (True, False):
                out = sentence_keep(values.to(device), labels.to(device), sp.to(device), 20, 0.5,
                                    mode="vote" if rep % 2 else "mean", fused=fused)
                ref = sentence_keep_reference(values, labels, sp, 20, 0.5, mode="vote" if rep % 2 else "mean")
                tol = 8 * EPS32 * ref.tokens.clamp(min=1).float() + 4 * EPS32
                err = (out.score.cpu() - ref.score).abs()
                worst_keep = max(worst_keep, float(err.max()) if err.numel() else 0.0)
                decided = (ref.score - 0.5).abs() > tol
                keep_ok &= bool(torch.equal(out.tokens.cpu(), ref.tokens)) and bool(torch.all(err <= tol))
                keep_ok &= bool(torch.equal(out.keep.cpu()[decided], ref.keep[decided]))
                keep_ok &= bool(torch.equal(out.passage_length.cpu(), ref.passage_length))
                runs += 1
    return {"yesno_head": {"ok": head_ok, "max_abs_logit_err": worst_head},
            "sentence_keep": {"ok": keep_ok, "max_abs_score_err": worst_keep, "launches": runs}}


# ---------------------------------------------------------------- 2. bandwidth


def check_bandwidth(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"skipped": "needs CUDA"}
    out = {}
    nbytes = 512 * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = device_ms(lambda: dst.copy_(src), 30, device)
    copy = 2 * nbytes / ms / 1e6  # read + write, GB/s
    out["copy"] = {"GBps": copy, "ms": ms, "bytes": 2 * nbytes}
    n, h = 65536, 2048
    hidden = torch.randn(n, h, device=device, dtype=torch.bfloat16)
    head = torch.randn(2, h, device=device, dtype=torch.bfloat16) * 0.02
    w = torch.randn(h, device=device, dtype=torch.bfloat16) * 0.1
    ms = device_ms(lambda: yesno_head(hidden, head, w, norm_plus_one=True), 30, device)
    moved = hidden.numel() * 2 + n * 12
    out["yesno_head"] = {"GBps": moved / ms / 1e6, "ms": ms, "bytes": moved, "shape": [n, h]}
    small = torch.randn(64, h, device=device, dtype=torch.bfloat16)
    out["yesno_head_request_size"] = {"us": 1e3 * device_ms(lambda: yesno_head(small, head, w), 50, device),
                                      "shape": [64, h]}
    m = 32 * 2**20
    values = torch.randn(m // 512, 512, 2, device=device, dtype=torch.bfloat16)
    for name, n_sent in (("sentence_keep", 8192), ("sentence_keep_many_sentences", m // 32)):
        labels = (torch.arange(m, device=device, dtype=torch.int64) * n_sent // m).to(torch.int32).reshape(m // 512, 512)
        sp = (torch.arange(n_sent, device=device) * 20 // n_sent).to(torch.int32)
        ms = device_ms(lambda labels=labels, sp=sp: sentence_keep(values, labels, sp, 20, 0.5), 20, device)
        moved = values.numel() * 2 + labels.numel() * 4 + n_sent * 4 * 6
        out[name] = {"GBps": moved / ms / 1e6, "ms": ms, "bytes": moved, "tokens": m, "sentences": n_sent}
    req_values = torch.randn(20, 224, 2, device=device, dtype=torch.bfloat16)
    req_labels = (torch.arange(20 * 224, device=device) // 28).to(torch.int32).reshape(20, 224)
    req_sp = (torch.arange(160, device=device) // 8).to(torch.int32)
    out["sentence_keep_request_size"] = {
        "us": 1e3 * device_ms(lambda: sentence_keep(req_values, req_labels, req_sp, 20, 0.5), 50, device),
        "shape": [20, 224]}
    for k in ("yesno_head", "sentence_keep", "sentence_keep_many_sentences"):
        out[k]["fraction_of_copy"] = out[k]["GBps"] / copy
    return out
