"""The CPU this process may actually use: cores after the affinity mask and the cgroup quota,
and the instruction-set extensions that decide int8 speed.

ONNX Runtime sizes its pools from the host's cores; in a container with a CPU quota
(cgroup `cpu.max`) or a narrowed affinity mask that oversubscribes the quota, and threads that
spin while waiting burn the quota other work needs (benchmarks/RESULTS.md, "Shared CPU").
"""

from __future__ import annotations

import math
import os
import platform
from functools import lru_cache
from pathlib import Path

# Extensions that change int8/bf16 matmul speed: VNNI does int8 dot products in one instruction
# (4-5x the int8 latency of AVX2 alone on the pruner), AMX and bf16 add tile/bf16 units.
X86_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8")
ARM_FLAGS = ("asimd", "asimddp", "sve", "i8mm", "bf16")


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs' worth of the cgroup quota (cgroup v2 cpu.max, or v1 cfs quota/period), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cpus(root: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may run on: the affinity mask, capped by the cgroup CPU quota
    (rounded down, at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


@lru_cache(maxsize=1)
def cpu_info() -> dict:
    """CPU model, the ISA extensions that matter for int8, an ISA class, and usable cores."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "hardware", "cpu model") and model in ("", platform.machine(),
                                                                           platform.processor()):
                model = value.strip()
            elif key in ("flags", "features"):
                flags |= set(value.split())
    except OSError:
        pass
    isa = [f for f in (*X86_FLAGS, *ARM_FLAGS) if f in flags]
    return {"model": model, "isa": isa, "isa_class": isa_class(isa), "cores": available_cpus(),
            "host_cpus": os.cpu_count()}


def isa_class(isa: list[str]) -> str:
    """One label per int8 speed class: amx, avx512-vnni, avx2-vnni, avx2, arm-dotprod, arm, other."""
    have = set(isa)
    for label, needs in (("amx", {"amx_int8"}), ("avx512-vnni", {"avx512_vnni"}), ("avx2-vnni", {"avx_vnni"}),
                         ("avx2", {"avx2"}), ("arm-dotprod", {"asimddp"}), ("arm", {"asimd"})):
        if needs <= have:
            return label
    return "other"
