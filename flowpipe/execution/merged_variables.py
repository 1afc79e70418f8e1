"""One process's variables from what each rank wrote: the rule ``Validate`` and a relayout share.

Ranks that each read a block of batches and extended list variables batch by batch hold, joined in rank order,
the lists one process reading every batch would hold.
"""
from __future__ import annotations

from typing import Any, Mapping

__all__ = ['merge_variables']


def merge_variables(initial: Mapping[str, list], written: list[Mapping[str, tuple]]) -> dict[str, Any]:
    """The variables one process holds after validating every batch, from what each rank wrote (rank order, each
    rank's block of batches following the previous rank's): a list variable is its ``initial`` items (none for a
    variable that did not exist) followed by the items every rank added, in rank order.

    Raises:
        ValueError: a variable changed in another way than by items added to a list (replaced, summed into,
            overwritten per batch): no rule gives one process's value from the ranks' values.
    """
    merged = {}
    for name in sorted({name for ranks in written for name in ranks}):
        kinds = [ranks[name] for ranks in written if name in ranks]
        if any(kind == 'value' for kind, _ in kinds):
            raise ValueError(
                f"Expected validation variables that are lists extended batch by batch (V({name!r}, mode='a') or "
                f"mode='e'), which the ranks' blocks of batches join into one process's list. Received: variable "
                f"{name!r} changed otherwise (set, summed into or overwritten per batch), so its one-process value "
                f"cannot be rebuilt from the ranks'. Collect per-batch values in a list and reduce them in the "
                f"metric, or pass Validate(..., shard=False) to validate the whole set on every rank.")
        merged[name] = [*initial.get(name, ()), *(item for _, items in kinds for item in items)]
    return merged
