"""The error of a collective that timed out or lost a peer, naming where every rank was
(``distributed.collective`` raises it).

Each failing rank leaves its own position in the group's key-value store and reads the others' for a moment
(``_PEEK`` seconds); a rank that left nothing never reached a collective.
"""
from __future__ import annotations

import datetime
import time

__all__ = ['TIMEOUT_VARIABLE', 'named_failure']

TIMEOUT_VARIABLE = 'FLOWPIPE_DIST_TIMEOUT'
_PEEK = 2.0                     # seconds a failed rank looks for the other ranks' positions
_FAILED_KEY = 'flowpipe/failed/'


def named_failure(what: str, error: BaseException, limit: datetime.timedelta | None) -> BaseException:
    """The error of a failed collective (``what``), with where every rank was; ``limit``: the group's timeout."""
    import torch.distributed as dist
    me, size = dist.get_rank(), dist.get_world_size()
    timed_out = 'timed out' in str(error).lower()
    position = f'{what}, where it {"timed out" if timed_out else "lost a peer"}'
    others = _positions(position, me, size)
    places = [f'rank {other} was in {where}' for other, where in sorted(others.items())]
    missing = [other for other in range(size) if other != me and other not in others]
    if missing:
        places.append(f'{"rank" if len(missing) == 1 else "ranks"} {", ".join(map(str, missing))} never reached '
                      f'it (still computing, stuck, or ended)')
    seen = '; '.join(places)
    if timed_out:
        within = f'{limit.total_seconds():g} s' if limit is not None else "the process group's timeout"
        return TimeoutError(
            f'Expected every rank in {what} within {within}. Received: rank {me} waited for the others; {seen}. '
            f'A rank that never comes raised an error, hangs, or skipped a step the others take (SkipBatch or '
            f'StopPipeline raised on some ranks only); for steps that are only slow, raise {TIMEOUT_VARIABLE} '
            f'(seconds) or the timeout given to distributed.init().')
    cause = str(error).splitlines()[0] if str(error) else type(error).__name__
    return RuntimeError(f'Expected every rank in {what}. Received: rank {me} lost a peer ({cause}); {seen}. '
                        f'The rank that failed first has the cause: look at its error.')


def _positions(mine: str, me: int, size: int) -> dict[int, str]:
    """Where the other failed ranks were: this rank's position is left in the group's store, the others' read
    for up to ``_PEEK`` seconds; ``{}`` when the store cannot be reached (its host, rank 0, is gone)."""
    try:
        import torch.distributed as dist
        store = dist.distributed_c10d._get_default_store()
        store.set(f'{_FAILED_KEY}{me}', mine)
        others: dict[int, str] = {}
        deadline = time.monotonic() + _PEEK
        while True:
            for other in range(size):
                key = f'{_FAILED_KEY}{other}'
                if other != me and other not in others and store.check([key]):
                    others[other] = store.get(key).decode()
            if len(others) == size - 1 or time.monotonic() > deadline:
                return others
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the store is a courtesy: the failure is reported without it
        return {}
