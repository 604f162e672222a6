// Prefix-shared tree packing; see tree_packer.hpp for what it does and why.
#include "tree_packer.hpp"

#include "owned.hpp"

#include <algorithm>
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

}  // namespace

py::dict pack_tree(const I64& prefix_ids_in, const I64& prefix_cu_in, const I64& branch_ids_in,
                   const I64& branch_cu_in, const I64& branch_group_in, int64_t row_budget, int64_t pad_id) {
  // Owned copies, validated and then read with the GIL released (see owned.hpp).
  using thresher_owned::snapshot;
  const Vec prefix_ids = snapshot(prefix_ids_in, "prefix_ids"), prefix_cu = snapshot(prefix_cu_in, "prefix_cu");
  const Vec branch_ids = snapshot(branch_ids_in, "branch_ids"), branch_cu = snapshot(branch_cu_in, "branch_cu");
  const Vec branch_group = snapshot(branch_group_in, "branch_group");
  check_offsets(prefix_ids, prefix_cu, "prefix");
  check_offsets(branch_ids, branch_cu, "branch");
  const int64_t groups = static_cast<int64_t>(prefix_cu.size()) - 1;
  const int64_t n = static_cast<int64_t>(branch_cu.size()) - 1;
  if (static_cast<int64_t>(branch_group.size()) != n)
    throw py::value_error("branch_group must be 1-D with one entry per branch (" + std::to_string(n) +
                          "), got " + std::to_string(branch_group.size()));
  if (row_budget < 1) throw py::value_error("row_budget must be >= 1, got " + std::to_string(row_budget));
  const int64_t* pcu = prefix_cu.data();
  const int64_t* bcu = branch_cu.data();
  const int64_t* bg = branch_group.data();
  for (int64_t b = 0; b < n; ++b) {
    if (bg[b] < 0 || bg[b] >= groups)
      throw py::value_error("branch_group[" + std::to_string(b) + "] = " + std::to_string(bg[b]) +
                            " is not a prefix index in [0, " + std::to_string(groups) + ")");
    const int64_t len = bcu[b + 1] - bcu[b];
    if (len < 1) throw py::value_error("branch " + std::to_string(b) + " is empty (it needs a scoring token)");
    const int64_t need = pcu[bg[b] + 1] - pcu[bg[b]] + len;
    if (need > row_budget)
      throw py::value_error("branch " + std::to_string(b) + " needs " + std::to_string(need) +
                            " tokens with its prefix; row_budget is " + std::to_string(row_budget));
  }

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
  I64 input_ids({rows, width}), position_ids({rows, width}), score_index({n}), rows_group({rows});
  I64 rows_of_branch({n});
  I32 branch_map({rows, width});
  int64_t* ids = input_ids.mutable_data();
  int64_t* pos = position_ids.mutable_data();
  int32_t* br = branch_map.mutable_data();
  int64_t* score = score_index.mutable_data();
  int64_t* rg = rows_group.mutable_data();
  int64_t* rob = rows_of_branch.mutable_data();
  const int64_t* ptok = prefix_ids.data();
  const int64_t* btok = branch_ids.data();
  {
    py::gil_scoped_release release;
    std::fill(ids, ids + rows * width, pad_id);
    std::fill(pos, pos + rows * width, 0);
    std::fill(br, br + rows * width, -1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = row_group[r];
      const int64_t plen = pcu[g + 1] - pcu[g];
      rg[r] = g;
      for (int64_t t = 0; t < plen; ++t) {
        ids[r * width + t] = ptok[pcu[g] + t];
        pos[r * width + t] = t;
        br[r * width + t] = 0;
      }
    }
    for (int64_t b = 0; b < n; ++b) {
      const int64_t r = branch_row[b];
      const int64_t plen = pcu[bg[b] + 1] - pcu[bg[b]];
      const int64_t len = bcu[b + 1] - bcu[b];
      const int64_t base = r * width + branch_start[b];
      for (int64_t t = 0; t < len; ++t) {
        ids[base + t] = btok[bcu[b] + t];
        pos[base + t] = plen + t;
        br[base + t] = static_cast<int32_t>(branch_k[b]);
      }
      score[b] = base + len - 1;
      rob[b] = r;
    }
  }
  py::dict out;
  out["input_ids"] = input_ids;
  out["position_ids"] = position_ids;
  out["branch_ids"] = branch_map;
  out["score_index"] = score_index;
  out["row_group"] = rows_group;
  out["branch_row"] = rows_of_branch;
  return out;
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

}  // namespace thresher_tree
