"""Type stub for the compiled extension (bindings/packer.cpp, bindings/tree_packer.cpp)."""

import numpy as np
import numpy.typing as npt

class Packer:
    """Immutable first-fit-decreasing packer of token sequences into rows of at most row_len tokens."""

    def __init__(self, row_len: int, max_seqs_per_row: int = 0, pad_id: int = 0) -> None: ...
    @property
    def row_len(self) -> int: ...
    @property
    def max_seqs_per_row(self) -> int: ...
    @property
    def pad_id(self) -> int: ...
    def pack(
        self,
        token_ids: npt.ArrayLike,
        cu_seqlens: npt.ArrayLike,
        token_labels: npt.ArrayLike,
    ) -> dict[str, np.ndarray]:
        """input_ids, position_ids, segment_ids, labels ([R, W]) and placement ([N, 3])."""

def pack_tree(
    prefix_ids: npt.ArrayLike,
    prefix_cu: npt.ArrayLike,
    branch_ids: npt.ArrayLike,
    branch_cu: npt.ArrayLike,
    branch_group: npt.ArrayLike,
    row_budget: int,
    pad_id: int = 0,
) -> dict[str, np.ndarray]:
    """Prefix-shared tree packing: one prefix per row followed by its branches."""

def pack_forest(
    prefix_ids: npt.ArrayLike,
    prefix_cu: npt.ArrayLike,
    branch_ids: npt.ArrayLike,
    branch_cu: npt.ArrayLike,
    branch_group: npt.ArrayLike,
    row_budget: int,
    pad_id: int,
    tree_stride: int,
) -> dict[str, np.ndarray]:
    """Prefix-shared trees several to a row (block-diagonal): branch id = slot * tree_stride + k."""
