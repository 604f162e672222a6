// thresher._native.pack_tree: prefix-shared tree packing for causal yes/no scorers.
//
// A causal yes/no scorer asks one question per candidate sentence, and all questions about one
// context share a long prefix (instruction, query, context). Instead of one prompt per sentence,
// a row holds the prefix once followed by several branches (sentence + question + model turn).
// Each token gets a branch id: 0 = prefix, k >= 1 = k-th branch of its row, -1 = padding. The
// model graph builds the attention mask from these ids (a branch sees the prefix and itself,
// causally) and position ids continue from the prefix end in every branch, so each branch
// computes exactly what its own full prompt would. Branches that do not fit in one row under the
// token budget go to further rows that repeat the prefix.
//
// Performance notes:
// - Rows are filled next-fit in input order: branches of one context have similar lengths, and
//   keeping input order makes the packing predictable (the Python twin in tests/ is 30 lines).
//   FFD across branches would save at most one prefix copy per context; rejected as not worth
//   the less obvious layout.
// - The mask is not materialised here: [R, W] branch ids are W times smaller than [R, 1, W, W]
//   and the graph expands them where the attention needs them.
// - pack_tree keeps one prefix per row; pack_forest puts several trees (prefix + branches) in a
//   row, block-diagonal across trees. With one context per request ("all") rows are already
//   ~90% full; with one context per document ("own") one row per prefix padded to the longest
//   computed 2.3x the real tokens. The tree is encoded in the branch id itself
//   (slot * stride + k) so the graph keeps its inputs and the mask rule stays one comparison.
// - pack_forest's first fit scans rows from the first one that can still take the shortest tree:
//   a few rows per request, so no segment tree (packer.cpp's) is needed.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>

namespace thresher_tree {

namespace py = pybind11;
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Defined in tree_packer.cpp; bound as thresher._native.pack_tree in packer.cpp.
py::dict pack_tree(const I64& prefix_ids, const I64& prefix_cu, const I64& branch_ids,
                   const I64& branch_cu, const I64& branch_group, int64_t row_budget, int64_t pad_id);

// Several trees per row; bound as thresher._native.pack_forest.
py::dict pack_forest(const I64& prefix_ids, const I64& prefix_cu, const I64& branch_ids, const I64& branch_cu,
                     const I64& branch_group, int64_t row_budget, int64_t pad_id, int64_t tree_stride);

extern const char* const kPackTreeDoc;
extern const char* const kPackForestDoc;

}  // namespace thresher_tree
