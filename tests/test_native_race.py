"""The native packers own what they validate: another thread that rewrites the caller's arrays
while packing runs cannot cause an out-of-bounds read, only one of the consistent outcomes (the
result for some whole state of the arrays) or a clean ValueError.

Arrays are small on purpose: NumPy then assigns them without releasing the GIL, so each state
the mutating thread writes is whole and the set of consistent outcomes is known.
"""

import threading

import numpy as np

from thresher import _native


def _key(out: dict) -> tuple:
    return tuple((k, v.shape, v.tobytes()) for k, v in sorted(out.items()))


def _race(pack, states: list[tuple[np.ndarray, ...]], arrays: tuple[np.ndarray, ...], rounds: int = 3_000):
    """Pack `arrays` in a loop while a thread writes each of `states` into them in turn;
    returns the outcomes seen (result keys and ValueError messages)."""
    stop = threading.Event()

    def mutate():
        while not stop.is_set():
            for state in states:
                for target, value in zip(arrays, state):
                    target[:] = value

    thread = threading.Thread(target=mutate)
    thread.start()
    seen = []
    try:
        for _ in range(rounds):
            try:
                seen.append(_key(pack(*arrays)))
            except ValueError as e:
                seen.append(str(e))
    finally:
        stop.set()
        thread.join()
    return seen


def test_packer_under_concurrent_mutation_gives_consistent_results_or_value_errors():
    packer = _native.Packer(16)
    n = 48
    ids_a, ids_b = np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)[::-1].copy()
    cu_a = np.array([0, 5, 20, 21, 36, 48], np.int64)
    cu_b = np.array([0, 16, 17, 18, 40, 48], np.int64)  # 22 tokens: too long for rows of 16
    cu_bad = np.array([0, 40, 2, 2**62, -(2**62), 48], np.int64)  # decreasing and overflowing
    labels = np.arange(n, dtype=np.int32)
    cu_states = (cu_a, cu_b, cu_bad)
    allowed = set()
    for ids in (ids_a, ids_b):
        for cu in cu_states:
            try:
                allowed.add(_key(packer.pack(ids, cu, labels)))
            except ValueError as e:
                allowed.add(str(e))
    arrays = (ids_a.copy(), cu_a.copy(), labels.copy())
    states = [(ids_a, cu_a, labels), (ids_b, cu_b, labels), (ids_a, cu_bad, labels), (ids_b, cu_a, labels)]
    seen = _race(packer.pack, states, arrays)
    assert set(seen) <= allowed
    assert any(not isinstance(s, str) for s in seen), "some packs succeeded"


def test_pack_tree_under_concurrent_mutation_gives_consistent_results_or_value_errors():
    prefix_ids = np.arange(1, 7, dtype=np.int64)
    prefix_cu = np.array([0, 2, 6], np.int64)
    branch_ids = np.arange(10, 22, dtype=np.int64)
    cu_a, cu_b = np.array([0, 3, 6, 12], np.int64), np.array([0, 1, 11, 12], np.int64)
    cu_bad = np.array([0, 2**62, -(2**62), 12], np.int64)
    group_a, group_b = np.array([0, 1, 1], np.int64), np.array([1, 0, 7], np.int64)

    def pack(pi, pc, bi, bc, bg):
        return _native.pack_tree(pi, pc, bi, bc, bg, 12, 0)

    allowed = set()
    for cu in (cu_a, cu_b, cu_bad):
        for group in (group_a, group_b):
            try:
                allowed.add(_key(pack(prefix_ids, prefix_cu, branch_ids, cu, group)))
            except ValueError as e:
                allowed.add(str(e))
    arrays = (prefix_ids, prefix_cu, branch_ids, cu_a.copy(), group_a.copy())
    fixed = (prefix_ids, prefix_cu, branch_ids)
    good = (*fixed, cu_a, group_a)  # the only state that packs: written most of the time
    states = [good, good, (*fixed, cu_b, group_b), good, good, (*fixed, cu_bad, group_a), (*fixed, cu_b, group_a)]
    seen = _race(pack, states, arrays)
    assert set(seen) <= allowed
    assert any(not isinstance(s, str) for s in seen), "some packs succeeded"


def test_offsets_near_int64_limits_are_value_errors_not_overflow():
    ids, labels = np.zeros(3, np.int64), np.zeros(3, np.int32)
    for cu in ([0, 2**63 - 1, 3], [0, -(2**63), 3], [0, 1, -(2**63) + 1, 3]):
        try:
            _native.Packer(8).pack(ids, np.array(cu, np.int64), labels)
        except ValueError as e:
            assert "empty or cu_seqlens decreases" in str(e) or "tokens; row_len is" in str(e)
        else:
            raise AssertionError(f"{cu} was accepted")
