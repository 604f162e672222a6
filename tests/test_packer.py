"""thresher._native.Packer against a plain-Python reference packer, its input checks, and
thresher.engine.batch.split_runs."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thresher import _native
from thresher.engine.batch import pack, split_runs

OUTPUT_KEYS = ("input_ids", "position_ids", "segment_ids", "labels", "placement")


def reference_pack(token_ids, cu_seqlens, token_labels, row_len, max_seqs_per_row=0, pad_id=0) -> dict:
    """First-fit-decreasing in plain Python: the specification the C++ packer must match.

    Sequences are taken longest first (ties by index); each goes into the lowest-numbered row
    with remaining capacity >= its length and, when max_seqs_per_row > 0, fewer than that many
    sequences; a new row is opened when none fits. Segment ids number the sequences of a row
    1, 2, ... in placement order; rows are as wide as the fullest row.
    """
    cu = [int(c) for c in cu_seqlens]
    n = len(cu) - 1
    lengths = [cu[i + 1] - cu[i] for i in range(n)]
    order = sorted(range(n), key=lambda i: -lengths[i])  # sorted() is stable: ties by index
    fill: list[int] = []
    count: list[int] = []
    row_of, start_of, seg_of = [0] * n, [0] * n, [0] * n
    for s in order:
        for row in range(len(fill)):
            if row_len - fill[row] >= lengths[s] and (max_seqs_per_row == 0 or count[row] < max_seqs_per_row):
                break
        else:
            row = len(fill)
            fill.append(0)
            count.append(0)
        row_of[s], start_of[s] = row, fill[row]
        fill[row] += lengths[s]
        count[row] += 1
        seg_of[s] = count[row]
    rows, width = len(fill), max(fill, default=0)
    out = {
        "input_ids": np.full((rows, width), pad_id, np.int64),
        "position_ids": np.zeros((rows, width), np.int64),
        "segment_ids": np.zeros((rows, width), np.int32),
        "labels": np.full((rows, width), -1, np.int32),
        "placement": np.zeros((n, 3), np.int64),
    }
    for s in range(n):
        r, a, length = row_of[s], start_of[s], lengths[s]
        out["input_ids"][r, a : a + length] = token_ids[cu[s] : cu[s + 1]]
        out["position_ids"][r, a : a + length] = np.arange(length)
        out["segment_ids"][r, a : a + length] = seg_of[s]
        out["labels"][r, a : a + length] = token_labels[cu[s] : cu[s + 1]]
        out["placement"][s] = (r, a, length)
    return out


@st.composite
def packing_inputs(draw):
    row_len = draw(st.integers(1, 40))
    lengths = draw(st.lists(st.integers(1, row_len), max_size=60))
    cu = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=cu[1:])
    total = int(cu[-1])
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 30_000, total, dtype=np.int64)
    labels = rng.integers(-1, 1000, total, dtype=np.int32)
    return ids, cu, labels, row_len


def assert_same(native: dict, reference: dict) -> None:
    assert set(native) == set(OUTPUT_KEYS)
    for key in OUTPUT_KEYS:
        assert native[key].dtype == reference[key].dtype, key
        assert native[key].shape == reference[key].shape, key
        np.testing.assert_array_equal(native[key], reference[key], err_msg=key)


@settings(max_examples=300, deadline=None)
@given(inp=packing_inputs(), max_seqs=st.sampled_from([0, 1, 3]), pad_id=st.sampled_from([0, 7]))
def test_native_packer_equals_reference(inp, max_seqs, pad_id):
    ids, cu, labels, row_len = inp
    native = _native.Packer(row_len, max_seqs, pad_id).pack(ids, cu, labels)
    assert_same(native, reference_pack(ids, cu, labels, row_len, max_seqs, pad_id))


@settings(max_examples=100, deadline=None)
@given(inp=packing_inputs(), max_seqs=st.sampled_from([0, 1, 3]))
def test_packed_rows_hold_every_token_once_within_limits(inp, max_seqs):
    ids, cu, labels, row_len = inp
    out = _native.Packer(row_len, max_seqs).pack(ids, cu, labels)
    seg = out["segment_ids"]
    assert seg.shape[1] <= row_len
    assert np.count_nonzero(seg) == ids.shape[0]
    if max_seqs:
        assert np.all(seg.max(axis=1, initial=0) <= max_seqs)
    for s, (row, start, length) in enumerate(out["placement"].tolist()):
        np.testing.assert_array_equal(out["input_ids"][row, start : start + length], ids[cu[s] : cu[s + 1]])


def test_no_sequences_gives_empty_arrays():
    empty = np.zeros(0, np.int64)
    out = _native.Packer(8).pack(empty, np.zeros(1, np.int64), np.zeros(0, np.int32))
    assert out["input_ids"].shape == (0, 0) and out["placement"].shape == (0, 3)
    assert_same(out, reference_pack(empty, [0], np.zeros(0, np.int32), 8))


def test_concrete_first_fit_decreasing():
    # lengths 3, 5, 2, 5 into rows of 8: 5(#1) -> row 0, 5(#3) -> row 1, 3(#0) -> row 0, 2(#2) -> row 1
    cu = np.array([0, 3, 8, 10, 15])
    out = _native.Packer(8, pad_id=-9).pack(np.arange(15), cu, np.arange(15, dtype=np.int32))
    np.testing.assert_array_equal(out["placement"], [[0, 5, 3], [0, 0, 5], [1, 5, 2], [1, 0, 5]])
    np.testing.assert_array_equal(out["segment_ids"], [[1, 1, 1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 2, 2, 0]])
    np.testing.assert_array_equal(out["input_ids"][1], [10, 11, 12, 13, 14, 8, 9, -9])
    np.testing.assert_array_equal(out["position_ids"][0], [0, 1, 2, 3, 4, 0, 1, 2])
    assert out["labels"][1, -1] == -1


def _args(cu, n_tokens=None, n_labels=None):
    cu = np.asarray(cu, np.int64)
    n_tokens = int(cu[-1]) if n_tokens is None else n_tokens
    n_labels = n_tokens if n_labels is None else n_labels
    return np.zeros(n_tokens, np.int64), cu, np.zeros(n_labels, np.int32)


@pytest.mark.parametrize("args, message", [
    (_args([0, 0, 3]), "sequence 0 is empty"),
    (_args([0, 3, 2], n_tokens=2), "sequence 1 is empty or cu_seqlens decreases"),
    (_args([0, 9]), "sequence 0 has 9 tokens; row_len is 8"),
    (_args([1, 3], n_tokens=3), r"cu_seqlens\[0\] must be 0"),
    (_args([0, 3], n_tokens=5), r"cu_seqlens\[-1\] \(3\) must equal len\(token_ids\) \(5\)"),
    ((np.zeros(3, np.int64), np.zeros((1, 2), np.int64), np.zeros(3, np.int32)), "cu_seqlens must be 1-D"),
    ((np.zeros(3, np.int64), np.zeros(0, np.int64), np.zeros(3, np.int32)), "at least one entry"),
    ((np.zeros((1, 3), np.int64), np.array([0, 3]), np.zeros(3, np.int32)), "token_ids must be 1-D"),
    (_args([0, 3], n_labels=2), r"token_labels must be 1-D and as long as token_ids \(3\), got 2"),
])
def test_malformed_input_is_a_value_error_naming_the_problem(args, message):
    with pytest.raises(ValueError, match=message):
        _native.Packer(8).pack(*args)


@pytest.mark.parametrize("kwargs, message", [
    ({"row_len": 0}, "row_len must be >= 1, got 0"),
    ({"row_len": -3}, "row_len must be >= 1, got -3"),
    ({"row_len": 8, "max_seqs_per_row": -1}, "max_seqs_per_row must be >= 0"),
])
def test_bad_packer_settings_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _native.Packer(**kwargs)


def test_concurrent_packing_from_threads_gives_the_same_result():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, 5_000)
    cu = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, 30_000, int(cu[-1]))
    labels = rng.integers(0, 10_000, int(cu[-1])).astype(np.int32)
    packer = _native.Packer(256, 0, 0)
    expected = packer.pack(ids, cu, labels)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: packer.pack(ids, cu, labels), range(8)))
    for out in results:
        assert_same(out, expected)


@settings(max_examples=150, deadline=None)
@given(inp=packing_inputs(), budget=st.integers(1, 200))
def test_split_runs_covers_every_row_once_within_the_budget(inp, budget):
    ids, cu, labels, row_len = inp
    packed = pack(ids, cu, labels, row_len=row_len)
    start = 0
    for run in split_runs(packed, budget):
        n_rows, width = run.segment_ids.shape
        assert n_rows >= 1
        assert n_rows * width <= budget or n_rows == 1, "only a single row may exceed the budget"
        assert width == int((run.segment_ids > 0).sum(axis=1).max()), "trimmed to its fullest row"
        rows = slice(start, start + n_rows)
        np.testing.assert_array_equal(run.input_ids, packed.input_ids[rows, :width])
        np.testing.assert_array_equal(run.labels, packed.labels[rows, :width])
        assert not packed.segment_ids[rows, width:].any(), "only padding was trimmed"
        start += n_rows
    assert start == packed.segment_ids.shape[0], "every row in exactly one run"
