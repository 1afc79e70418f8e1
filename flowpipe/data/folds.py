"""Cross-validation folds: an order of positions cut into ``n_splits`` contiguous, balanced parts."""
from __future__ import annotations

import numpy as np

__all__ = ['kfold_parts']


def kfold_parts(order: np.ndarray, n_splits: int) -> list[np.ndarray]:
    """``order`` cut into ``n_splits`` parts whose sizes differ by at most one (the first parts are the larger).

    Raises:
        ValueError: fewer than 2 splits, or more splits than items.
    """
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 2:
        raise ValueError(f"Expected n_splits to be an int >= 2. Received: n_splits={n_splits!r}")
    if n_splits > len(order):
        raise ValueError(f"Expected at most {len(order)} folds, one item each at least. Received: "
                         f"n_splits={n_splits}; use fewer folds")
    sizes = np.full(n_splits, len(order) // n_splits)
    sizes[:len(order) % n_splits] += 1
    return np.split(order, np.cumsum(sizes)[:-1])
