"""The CPU the process may use (affinity, cgroup quota, ISA) and the session defaults built on it."""

from __future__ import annotations

import os

import pytest

from thresher.engine.cpu import _cgroup_quota, available_cpus, cpu_info, isa_class
from thresher.engine.runner import SessionConfig, open_session


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
    ({"cpu.max": "garbage"}, None),
])
def test_cgroup_quota_v1_and_v2(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _cgroup_quota(tmp_path) == quota
    cpus = available_cpus(tmp_path)
    mask = len(os.sched_getaffinity(0))
    assert cpus == (mask if quota is None else min(mask, max(1, int(quota))))


def test_affinity_mask_narrows_the_pool():
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert available_cpus() == 1
        assert SessionConfig().intra_op_threads == 1
    finally:
        os.sched_setaffinity(0, before)


def test_isa_classes():
    assert isa_class(["avx2", "avx512f", "avx512_vnni"]) == "avx512-vnni"
    assert isa_class(["avx2"]) == "avx2"
    assert isa_class(["avx2", "avx_vnni"]) == "avx2-vnni"
    assert isa_class(["asimd", "asimddp"]) == "arm-dotprod"
    assert isa_class([]) == "other"
    info = cpu_info()
    assert info["cores"] >= 1 and info["model"] and info["isa_class"] == isa_class(info["isa"])


def test_thread_and_spin_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("THRESHER_THREADS", "abc")
    with pytest.raises(ValueError, match="THRESHER_THREADS must be an integer"):
        SessionConfig()
    monkeypatch.setenv("THRESHER_THREADS", "1")
    monkeypatch.setenv("THRESHER_SPIN", "maybe")
    with pytest.raises(ValueError, match="THRESHER_SPIN must be"):
        SessionConfig()
    monkeypatch.setenv("THRESHER_SPIN", "on")
    assert SessionConfig() == SessionConfig(intra_op_threads=1, spin=True)
    monkeypatch.delenv("THRESHER_SPIN")
    assert SessionConfig().spin is False


@pytest.mark.parametrize("spin", [False, True])
def test_spin_reaches_the_session(default_compressor, spin):
    model = default_compressor.scorer._runner.session._model_path
    session = open_session(model, SessionConfig(intra_op_threads=1, spin=spin))
    assert session.get_session_options().get_session_config_entry(
        "session.intra_op.allow_spinning") == ("1" if spin else "0")
