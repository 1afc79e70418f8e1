"""When a unit runs: batchflow's ``when=`` forms.

- a positive int ``k``: every ``k``-th iteration (iterations ``k-1``, ``2k-1``, ...);
- ``'%i'`` or ``'#i'``: at iteration ``i`` (zero-based);
- ``'last'``: at the last iteration (``iteration + 1 == n_iters``, or once a unit raised ``StopIteration``);
- a list of these: whenever one of them matches.
"""
from __future__ import annotations

from typing import Any

__all__ = ['check_when', 'must_execute']


def check_when(when: Any) -> list:
    """``when`` as a list, each item checked; raise ``ValueError`` naming a malformed one."""
    items = when if isinstance(when, (list, tuple)) else [when]
    for item in items:
        ok = (isinstance(item, int) and not isinstance(item, bool) and item > 0) or item == 'last' or \
             (isinstance(item, str) and len(item) > 1 and item[0] in '%#' and item[1:].isdigit())
        if not ok:
            raise ValueError(f"Expected when= to be a positive int, '%i' (an iteration), 'last' or a list of them. "
                             f"Received: when={when!r}.")
    return list(items)


def must_execute(iteration: int, when: list, n_iters: int | None = None, last: bool = False) -> bool:
    """Whether a unit with ``when`` runs at ``iteration`` of ``n_iters`` (``last``: the experiment is ending)."""
    if 'last' in when and (last or (n_iters is not None and iteration + 1 == n_iters)):
        return True
    for item in when:
        if isinstance(item, int) and (iteration + 1) % item == 0:
            return True
        if isinstance(item, str) and item != 'last' and int(item[1:]) == iteration:
            return True
    return False
