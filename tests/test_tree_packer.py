"""thresher._native.pack_tree against a plain-Python twin, pack_forest (several trees per row),
and the tree mask both imply."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thresher._native import pack_forest, pack_tree

STRIDE = 1 << 16  # engine.tree_mask.TREE_STRIDE (that module needs torch)


def pack_tree_reference(prefixes, branches, groups, row_budget, pad_id=0):
    """Readable twin: rows group by group; a branch opens a new row (repeating its prefix)
    when it does not fit into the current row of its group."""
    rows = []  # [group, tokens, positions, branch ids]
    where = []  # per branch: (row, start)
    for g, prefix in enumerate(prefixes):
        current = None
        for b in (b for b in range(len(branches)) if groups[b] == g):
            tokens = branches[b]
            if current is None or len(current[1]) + len(tokens) > row_budget:
                current = [g, list(prefix), list(range(len(prefix))), [0] * len(prefix)]
                rows.append(current)
            where.append((b, len(rows) - 1, len(current[1])))
            current[1] += tokens
            current[2] += range(len(prefix), len(prefix) + len(tokens))
            current[3] += [max(current[3] + [0]) + 1] * len(tokens)
    width = max((len(r[1]) for r in rows), default=0)
    out = {
        "input_ids": np.full((len(rows), width), pad_id, np.int64),
        "position_ids": np.zeros((len(rows), width), np.int64),
        "branch_ids": np.full((len(rows), width), -1, np.int32),
        "score_index": np.zeros(len(branches), np.int64),
        "row_group": np.array([r[0] for r in rows], np.int64),
        "branch_row": np.zeros(len(branches), np.int64),
    }
    for i, (_, tokens, pos, bid) in enumerate(rows):
        out["input_ids"][i, : len(tokens)] = tokens
        out["position_ids"][i, : len(tokens)] = pos
        out["branch_ids"][i, : len(tokens)] = bid
    for b, row, start in where:
        out["score_index"][b] = row * width + start + len(branches[b]) - 1
        out["branch_row"][b] = row
    return out


def _flat(prefixes, branches, groups):
    pcu = np.concatenate([[0], np.cumsum([len(p) for p in prefixes])]).astype(np.int64)
    bcu = np.concatenate([[0], np.cumsum([len(b) for b in branches])]).astype(np.int64)
    flat_p = np.array([t for p in prefixes for t in p], np.int64)
    flat_b = np.array([t for b in branches for t in b], np.int64)
    return flat_p, pcu, flat_b, bcu, np.asarray(groups, np.int64)


def _native(prefixes, branches, groups, row_budget, pad_id=0):
    return pack_tree(*_flat(prefixes, branches, groups), row_budget, pad_id)


def _forest(prefixes, branches, groups, row_budget, pad_id=0, stride=STRIDE):
    return pack_forest(*_flat(prefixes, branches, groups), row_budget, pad_id, stride)


@st.composite
def trees(draw):
    n_groups = draw(st.integers(1, 4))
    prefixes = [draw(st.lists(st.integers(1, 999), min_size=0, max_size=12)) for _ in range(n_groups)]
    branches = draw(st.lists(st.lists(st.integers(1, 999), min_size=1, max_size=8), min_size=0, max_size=12))
    groups = [draw(st.integers(0, n_groups - 1)) for _ in branches]
    need = max((len(prefixes[g]) + len(b) for g, b in zip(groups, branches)), default=1)
    budget = need + draw(st.integers(0, 20))
    return prefixes, branches, groups, budget


@settings(max_examples=200, deadline=None)
@given(trees())
def test_native_equals_reference(tree):
    prefixes, branches, groups, budget = tree
    got = _native(prefixes, branches, groups, budget, pad_id=7)
    want = pack_tree_reference(prefixes, branches, groups, budget, pad_id=7)
    assert set(got) == set(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def _visible(branch_ids: np.ndarray, stride: int = STRIDE) -> np.ndarray:
    """NumPy twin of engine.tree_mask.tree_mask (without sliding window): [R, Tq, Tk] bool; a
    token sees its own branch and its own tree's prefix (id - id mod stride)."""
    width = branch_ids.shape[1]
    causal = np.tril(np.ones((width, width), bool))
    query, key = branch_ids[:, :, None].astype(np.int64), branch_ids[:, None, :]
    return causal[None] & ((key == query) | (key == query - np.mod(query, stride)))


def _sees_its_prompt(out, prefixes, branches, groups, budget, stride=STRIDE):
    width = out["input_ids"].shape[1]
    visible = _visible(out["branch_ids"], stride)
    assert out["input_ids"].shape[0] == 0 or (out["branch_ids"] >= 0).sum(axis=1).max() <= budget
    for b, flat in enumerate(out["score_index"].tolist()):
        row, col = divmod(flat, width)
        seen = np.flatnonzero(visible[row, col])
        prompt = prefixes[groups[b]] + branches[b]
        assert out["input_ids"][row, seen].tolist() == prompt
        assert out["position_ids"][row, seen].tolist() == list(range(len(prompt)))
        assert out["branch_row"][b] == row


@settings(max_examples=100, deadline=None)
@given(trees())
def test_each_branch_sees_exactly_its_own_prompt(tree):
    """What the scoring token of a branch attends to is its prompt, in order, at its positions."""
    prefixes, branches, groups, budget = tree
    out = _native(prefixes, branches, groups, budget)
    if not branches:
        assert out["input_ids"].shape[0] == 0
        return
    _sees_its_prompt(out, prefixes, branches, groups, budget)
    assert (out["row_group"][out["branch_row"]] == groups).all()


def test_rows_repeat_the_prefix_when_branches_overflow():
    out = _native([[1, 2, 3]], [[4, 5], [6, 7], [8, 9]], [0, 0, 0], row_budget=7)
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 8, 9, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4, 3, 4], [0, 1, 2, 3, 4, 0, 0]]
    assert out["branch_ids"].tolist() == [[0, 0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, -1, -1]]
    assert out["score_index"].tolist() == [4, 6, 7 + 4]


@pytest.mark.parametrize("args, message", [
    (([[1]], [[2, 3, 4]], [0], 3), "needs 4 tokens"),
    (([[1]], [[]], [0], 3), "is empty"),
    (([[1]], [[2]], [1], 3), "not a prefix index"),
    (([[1]], [[2]], [0], 0), "row_budget must be >= 1"),
])
def test_bad_input_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        _native(*args)


# -- pack_forest: several trees per row ----------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(trees(), st.sampled_from([2, 3, STRIDE]))
def test_forest_branch_sees_exactly_its_own_prompt(tree, stride):
    """Across trees sharing a row, a branch's scoring token attends to its prompt only: its
    own tree's prefix and its own branch, in order, at positions restarting with each tree."""
    prefixes, branches, groups, budget = tree
    out = _forest(prefixes, branches, groups, budget, stride=stride)
    _sees_its_prompt(out, prefixes, branches, groups, budget, stride)
    pads = out["branch_ids"] < 0
    assert (out["input_ids"][pads] == 0).all() and (out["position_ids"][pads] == 0).all()
    real = sum(len(p) for p in prefixes) + sum(len(b) for b in branches)
    assert (~pads).sum() >= real - sum(len(p) for g, p in enumerate(prefixes) if g not in groups)


@settings(max_examples=200, deadline=None)
@given(trees())
def test_forest_never_uses_more_rows_than_one_prefix_per_row(tree):
    """First fit of whole trees: never more rows than pack_tree, whose rows are those trees."""
    prefixes, branches, groups, budget = tree
    one = _native(prefixes, branches, groups, budget)
    forest = _forest(prefixes, branches, groups, budget)
    assert forest["input_ids"].shape[0] <= one["input_ids"].shape[0]
    assert (forest["branch_ids"] >= 0).sum() == (one["branch_ids"] >= 0).sum()  # the same trees


def test_short_trees_share_a_row_block_diagonally():
    out = _forest([[1, 2], [3, 4, 5], [6]], [[7], [8, 9], [10], [11, 12]], [0, 1, 1, 2], row_budget=8)
    # trees by length: group 1 (6 tokens), group 0 (3), group 2 (3); first fit into rows of 8
    assert out["input_ids"].tolist() == [[3, 4, 5, 8, 9, 10], [1, 2, 7, 6, 11, 12]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4, 3], [0, 1, 2, 0, 1, 2]]
    s = STRIDE
    assert out["branch_ids"].tolist() == [[0, 0, 0, 1, 1, 2], [0, 0, 1, s, s + 1, s + 1]]
    assert out["score_index"].tolist() == [6 + 2, 4, 5, 6 + 5]


def test_forest_caps_branches_per_tree_at_the_stride():
    """With stride 3 a tree holds at most 2 branches; the third repeats the prefix."""
    out = _forest([[1]], [[2], [3], [4]], [0, 0, 0], row_budget=10, stride=3)
    assert out["input_ids"].tolist() == [[1, 2, 3, 1, 4]]
    assert out["branch_ids"].tolist() == [[0, 1, 2, 3, 4]]


@pytest.mark.parametrize("args, message", [
    (([[1]], [[2, 3, 4]], [0], 3), "needs 4 tokens"),
    (([[1]], [[2]], [1], 3), "not a prefix index"),
    (([[1]], [[2]], [0], 3, 0, 1), "tree_stride must be in"),
])
def test_forest_bad_input_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        _forest(*args)
