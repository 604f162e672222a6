// Prefix-shared tree packing; see tree_packer.hpp for what it does and why.
#include "tree_packer.hpp"

#include "owned.hpp"

#include <algorithm>
#include <climits>
#include <numeric>
#include <string>
#include <vector>

namespace thresher_tree {

using I32 = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

namespace {

using Vec = std::vector<int64_t>;

// Offsets are checked on the owned copy: cu[0] = 0, never decreasing, cu[-1] = len(ids).
void check_offsets(const Vec& ids, const Vec& cu, const char* what) {
  if (cu.empty()) throw py::value_error(std::string(what) + "_cu must be 1-D with at least one entry (0)");
  const int64_t n = static_cast<int64_t>(cu.size()) - 1;
  if (cu[0] != 0) throw py::value_error(std::string(what) + "_cu[0] must be 0");
  for (int64_t i = 0; i < n; ++i)
    if (cu[i + 1] < cu[i]) throw py::value_error(std::string(what) + "_cu decreases at " + std::to_string(i));
  if (cu[n] != static_cast<int64_t>(ids.size()))
    throw py::value_error(std::string(what) + "_cu[-1] (" + std::to_string(cu[n]) + ") must equal len(" + what +
                          "_ids) (" + std::to_string(ids.size()) + ")");
}

// A tree batch's inputs, copied while the GIL is held and validated on the copies (owned.hpp):
// offsets, groups and budget; every branch must fit in a row with its prefix. Only the copies
// are read afterwards, so another thread changing the caller's arrays cannot break the checks.
struct TreeInputs {
  Vec prefix_ids, prefix_cu, branch_ids, branch_cu, branch_group;
  int64_t groups, n;

  TreeInputs(const I64& prefix_ids_in, const I64& prefix_cu_in, const I64& branch_ids_in, const I64& branch_cu_in,
             const I64& branch_group_in, int64_t row_budget)
      : prefix_ids(thresher_owned::snapshot(prefix_ids_in, "prefix_ids")),
        prefix_cu(thresher_owned::snapshot(prefix_cu_in, "prefix_cu")),
        branch_ids(thresher_owned::snapshot(branch_ids_in, "branch_ids")),
        branch_cu(thresher_owned::snapshot(branch_cu_in, "branch_cu")),
        branch_group(thresher_owned::snapshot(branch_group_in, "branch_group")) {
    check_offsets(prefix_ids, prefix_cu, "prefix");
    check_offsets(branch_ids, branch_cu, "branch");
    groups = static_cast<int64_t>(prefix_cu.size()) - 1;
    n = static_cast<int64_t>(branch_cu.size()) - 1;
    if (static_cast<int64_t>(branch_group.size()) != n)
      throw py::value_error("branch_group must be 1-D with one entry per branch (" + std::to_string(n) +
                            "), got " + std::to_string(branch_group.size()));
    if (row_budget < 1) throw py::value_error("row_budget must be >= 1, got " + std::to_string(row_budget));
    for (int64_t b = 0; b < n; ++b) {
      const int64_t g = branch_group[b];
      if (g < 0 || g >= groups)
        throw py::value_error("branch_group[" + std::to_string(b) + "] = " + std::to_string(g) +
                              " is not a prefix index in [0, " + std::to_string(groups) + ")");
      const int64_t len = branch_cu[b + 1] - branch_cu[b];
      if (len < 1) throw py::value_error("branch " + std::to_string(b) + " is empty (it needs a scoring token)");
      const int64_t need = prefix_cu[g + 1] - prefix_cu[g] + len;
      if (need > row_budget)
        throw py::value_error("branch " + std::to_string(b) + " needs " + std::to_string(need) +
                              " tokens with its prefix; row_budget is " + std::to_string(row_budget));
    }
  }
};

// The arrays both packers return, padding written in (-1 branch id, pad_id, position 0); rows
// are then filled through raw pointers (also without the GIL).
struct TreeRows {
  I64 input_ids, position_ids, score_index, branch_row;
  I32 branch_ids;
  int64_t *ids, *pos, *score, *rob;
  int32_t* br;

  TreeRows(int64_t rows, int64_t width, int64_t n, int64_t pad_id)
      : input_ids({rows, width}), position_ids({rows, width}), score_index({n}), branch_row({n}),
        branch_ids({rows, width}), ids(input_ids.mutable_data()), pos(position_ids.mutable_data()),
        score(score_index.mutable_data()), rob(branch_row.mutable_data()), br(branch_ids.mutable_data()) {
    std::fill(ids, ids + rows * width, pad_id);
    std::fill(pos, pos + rows * width, 0);
    std::fill(br, br + rows * width, -1);
  }

  // `len` tokens at flat offset `base`: positions first_pos, first_pos + 1, ..., one branch id.
  void write(int64_t base, const int64_t* src, int64_t len, int64_t first_pos, int64_t id) {
    for (int64_t i = 0; i < len; ++i) {
      ids[base + i] = src[i];
      pos[base + i] = first_pos + i;
      br[base + i] = static_cast<int32_t>(id);
    }
  }

  py::dict dict() const {
    py::dict out;
    out["input_ids"] = input_ids;
    out["position_ids"] = position_ids;
    out["branch_ids"] = branch_ids;
    out["score_index"] = score_index;
    out["branch_row"] = branch_row;
    return out;
  }
};

}  // namespace

py::dict pack_tree(const I64& prefix_ids, const I64& prefix_cu, const I64& branch_ids, const I64& branch_cu,
                   const I64& branch_group, int64_t row_budget, int64_t pad_id) {
  const TreeInputs in(prefix_ids, prefix_cu, branch_ids, branch_cu, branch_group, row_budget);
  const int64_t groups = in.groups, n = in.n;
  const int64_t* pcu = in.prefix_cu.data();
  const int64_t* bcu = in.branch_cu.data();
  const int64_t* bg = in.branch_group.data();

  // Rows: (group, first branch slot in `order`, number of branches, fill).
  std::vector<int64_t> row_group, row_first, row_count, row_fill, branch_row(n), branch_start(n), branch_k(n);
  std::vector<int64_t> order;
  {
    py::gil_scoped_release release;
    std::vector<std::vector<int64_t>> by_group(groups);
    for (int64_t b = 0; b < n; ++b) by_group[bg[b]].push_back(b);
    order.reserve(n);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t plen = pcu[g + 1] - pcu[g];
      for (int64_t b : by_group[g]) {
        const int64_t len = bcu[b + 1] - bcu[b];
        const bool open = !row_group.empty() && row_group.back() == g && row_fill.back() + len <= row_budget;
        if (!open) {
          row_group.push_back(g);
          row_first.push_back(static_cast<int64_t>(order.size()));
          row_count.push_back(0);
          row_fill.push_back(plen);
        }
        const int64_t r = static_cast<int64_t>(row_group.size()) - 1;
        branch_row[b] = r;
        branch_start[b] = row_fill[r];
        branch_k[b] = ++row_count[r];
        row_fill[r] += len;
        order.push_back(b);
      }
    }
  }

  const int64_t rows = static_cast<int64_t>(row_group.size());
  const int64_t width = rows ? *std::max_element(row_fill.begin(), row_fill.end()) : 0;
  TreeRows out(rows, width, n, pad_id);
  I64 rows_group({rows});
  int64_t* rg = rows_group.mutable_data();
  const int64_t* ptok = in.prefix_ids.data();
  const int64_t* btok = in.branch_ids.data();
  {
    py::gil_scoped_release release;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = row_group[r];
      rg[r] = g;
      out.write(r * width, ptok + pcu[g], pcu[g + 1] - pcu[g], 0, 0);
    }
    for (int64_t b = 0; b < n; ++b) {
      const int64_t r = branch_row[b];
      const int64_t plen = pcu[bg[b] + 1] - pcu[bg[b]];
      const int64_t len = bcu[b + 1] - bcu[b];
      const int64_t base = r * width + branch_start[b];
      out.write(base, btok + bcu[b], len, plen, branch_k[b]);
      out.score[b] = base + len - 1;
      out.rob[b] = r;
    }
  }
  py::dict result = out.dict();
  result["row_group"] = rows_group;
  return result;
}

const char* const kPackTreeDoc = R"doc(
Pack prefix-shared trees: every branch after its group's prefix, next-fit in input order.

Args:
    prefix_ids, prefix_cu: flat token ids of G prefixes and their offsets (int64, cu[0] = 0).
    branch_ids, branch_cu: flat token ids of N branches and their offsets; no branch is empty.
    branch_group: int64 [N], the prefix index of every branch.
    row_budget: at most this many tokens per row (prefix + branches); every branch must fit
        with its prefix.
    pad_id: token id written into padding positions.

Returns a dict of NumPy arrays: input_ids, position_ids (int64 [R, W]; positions continue from
the prefix end in every branch), branch_ids (int32 [R, W]: 0 = prefix, k = k-th branch of the
row, -1 = padding), score_index (int64 [N]: flat index r * W + t of each branch's last token),
row_group (int64 [R]) and branch_row (int64 [N]). Rows come group by group, in input order.
)doc";


py::dict pack_forest(const I64& prefix_ids, const I64& prefix_cu, const I64& branch_ids, const I64& branch_cu,
                     const I64& branch_group, int64_t row_budget, int64_t pad_id, int64_t tree_stride) {
  const TreeInputs in(prefix_ids, prefix_cu, branch_ids, branch_cu, branch_group, row_budget);
  if (tree_stride < 2 || tree_stride > (int64_t{1} << 30))
    throw py::value_error("tree_stride must be in [2, 2**30], got " + std::to_string(tree_stride));
  const int64_t groups = in.groups, n = in.n;
  const int64_t* pcu = in.prefix_cu.data();
  const int64_t* bcu = in.branch_cu.data();
  const int64_t* bg = in.branch_group.data();
  const int64_t max_trees = (int64_t{INT32_MAX} + 1) / tree_stride;  // tree slot * stride + k fits int32

  // 1. Trees: a group's branches next-fit in input order behind its prefix, as pack_tree's rows.
  std::vector<int64_t> tree_group, tree_len, tree_count, branch_tree(n), branch_off(n), branch_k(n);
  std::vector<std::vector<int64_t>> by_group(groups);
  for (int64_t b = 0; b < n; ++b) by_group[bg[b]].push_back(b);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t plen = pcu[g + 1] - pcu[g];
    for (int64_t b : by_group[g]) {
      const int64_t len = bcu[b + 1] - bcu[b];
      const bool open = !tree_group.empty() && tree_group.back() == g && tree_len.back() + len <= row_budget &&
                        tree_count.back() + 1 < tree_stride;
      if (!open) {
        tree_group.push_back(g);
        tree_len.push_back(plen);
        tree_count.push_back(0);
      }
      const int64_t t = static_cast<int64_t>(tree_group.size()) - 1;
      branch_tree[b] = t;
      branch_off[b] = tree_len[t];
      branch_k[b] = ++tree_count[t];
      tree_len[t] += len;
    }
  }

  // 2. Rows: trees longest first (ties by index) into the first row with room.
  const int64_t trees = static_cast<int64_t>(tree_group.size());
  std::vector<int64_t> order(trees), tree_row(trees), tree_start(trees), tree_slot(trees), row_fill, row_trees;
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return tree_len[a] > tree_len[b]; });
  const int64_t shortest = trees ? tree_len[order.back()] : 0;
  int64_t first_open = 0;  // rows before it cannot take even the shortest tree
  for (int64_t t : order) {
    const int64_t len = tree_len[t];
    while (first_open < static_cast<int64_t>(row_fill.size()) &&
           (row_fill[first_open] + shortest > row_budget || row_trees[first_open] == max_trees))
      ++first_open;
    int64_t r = first_open;
    while (r < static_cast<int64_t>(row_fill.size()) && (row_fill[r] + len > row_budget || row_trees[r] == max_trees))
      ++r;
    if (r == static_cast<int64_t>(row_fill.size())) {
      row_fill.push_back(0);
      row_trees.push_back(0);
    }
    tree_row[t] = r;
    tree_start[t] = row_fill[r];
    tree_slot[t] = row_trees[r]++;
    row_fill[r] += len;
  }

  // 3. Write rows (from the owned copies; the GIL stays held: microseconds next to the model call).
  const int64_t rows = static_cast<int64_t>(row_fill.size());
  const int64_t width = rows ? *std::max_element(row_fill.begin(), row_fill.end()) : 0;
  TreeRows out(rows, width, n, pad_id);
  const int64_t* ptok = in.prefix_ids.data();
  const int64_t* btok = in.branch_ids.data();
  for (int64_t t = 0; t < trees; ++t) {
    const int64_t g = tree_group[t];
    out.write(tree_row[t] * width + tree_start[t], ptok + pcu[g], pcu[g + 1] - pcu[g], 0, tree_slot[t] * tree_stride);
  }
  for (int64_t b = 0; b < n; ++b) {
    const int64_t t = branch_tree[b];
    const int64_t base = tree_row[t] * width + tree_start[t] + branch_off[b];
    const int64_t len = bcu[b + 1] - bcu[b];
    const int64_t plen = pcu[bg[b] + 1] - pcu[bg[b]];  // every branch continues from its prefix
    out.write(base, btok + bcu[b], len, plen, tree_slot[t] * tree_stride + branch_k[b]);
    out.score[b] = base + len - 1;
    out.rob[b] = tree_row[t];
  }
  return out.dict();
}

const char* const kPackForestDoc = R"doc(
Pack prefix-shared trees several to a row (block-diagonal across trees).

A tree is a group's prefix and the branches that follow it (next-fit in input order, as
pack_tree's rows: a group whose branches overflow row_budget makes several trees repeating its
prefix). Trees are placed longest first (ties by index) into the first row with room, so short
contexts share rows instead of each padding a row to the longest.

Args: as pack_tree, plus tree_stride (>= 2): the branch id of a token is
    slot * tree_stride + k, where slot is its tree's place in the row (0, 1, ...) and k is 0 in
    the prefix and the branch number (1, 2, ...) in a branch. A token sees the earlier tokens
    of its own branch and of its own tree's prefix (id - id % tree_stride); with one tree per
    row this is pack_tree's layout.

Returns a dict of NumPy arrays: input_ids, position_ids (int64 [R, W]; positions restart at 0
with every tree), branch_ids (int32 [R, W], -1 = padding), score_index (int64 [N]: flat index
r * W + t of each branch's last token) and branch_row (int64 [N]).
)doc";

}  // namespace thresher_tree
