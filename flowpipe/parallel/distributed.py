"""Process groups: detecting a multi-process job, initializing torch.distributed, and the rank helpers.

A process is part of a distributed job when a ``torch.distributed`` process group is already initialized (the
user's, reused as it is) or when its environment says so (``WORLD_SIZE`` > 1, as ``torchrun`` and
``flowpipe.parallel.launch`` set it, with ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``).
:func:`setup` initializes the group in the second case, once per process: NCCL where CUDA is available, else
gloo (``FLOWPIPE_DIST_BACKEND`` chooses another), with the timeout of ``FLOWPIPE_DIST_TIMEOUT`` (seconds), or
the ones given to :func:`init`. The group flowpipe created lives until :func:`shutdown`, which runs at
interpreter exit (and when a launched function returns):
models trained by one run are used by the next, and re-initializing a group with the ``env://`` rendezvous in
one process is not reliable.

Everything here is a no-op, or the one-process answer, outside a distributed job: ``rank()`` is 0,
``world_size()`` is 1, ``barrier()`` returns at once, ``gather(x)`` is ``[x]``.

A collective run under :func:`collective` (the helpers here, every step of the distributed engine, the run's
agreement check) that times out or loses a peer raises an error naming the collective, the rank that waited and
where the other ranks were: each failing rank leaves its own position in the group's key-value store and reads
the others' for a moment (``collective_failure``); a rank that left nothing never reached a collective.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .collective_failure import TIMEOUT_VARIABLE, named_failure

__all__ = ['BACKEND_VARIABLE', 'TIMEOUT_VARIABLE', 'World', 'all_gather', 'barrier', 'broadcast', 'collective',
           'current', 'default_backend', 'from_rank_0', 'gather', 'gather_batches', 'group_timeout', 'init',
           'is_main', 'rank', 'reduce', 'requested', 'setup', 'shutdown', 'world_size']

BACKEND_VARIABLE = 'FLOWPIPE_DIST_BACKEND'
_STATE: dict[str, Any] = {'created': False, 'exit_hook': False, 'timeout': None}
_OPS = ('sum', 'mean', 'max', 'min')
# what gloo and NCCL say when a collective timed out or lost a peer (other errors pass through unchanged)
_BROKEN = ('timed out', 'connection closed', 'connection reset', 'broken pipe', 'gloo', 'nccl', 'watchdog')


@dataclass(frozen=True)
class World:
    """This process's place in a distributed job.

    Attributes:
        rank: the global rank, ``0 .. size - 1``.
        size: the number of processes.
        local_rank: the rank on this node (``LOCAL_RANK``); it picks the GPU.
        local_size: the processes on this node (``LOCAL_WORLD_SIZE``).
        backend: ``'gloo'``, ``'nccl'``..., ``None`` before the group is initialized.
    """

    rank: int
    size: int
    local_rank: int = 0
    local_size: int = 1
    backend: str | None = None

    def __str__(self) -> str:
        return f'rank {self.rank} of {self.size} ({self.backend or "not initialized"})'


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, '')
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise ValueError(f'Expected the environment variable {name} to be an integer. Received: {name}={value!r}.')\
            from None


def _dist() -> Any:
    import torch.distributed as dist
    return dist


def _initialized() -> bool:
    if 'torch.distributed' not in sys.modules:
        return False
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def requested() -> bool:
    """Whether this process belongs to a distributed job: a group is initialized, or ``WORLD_SIZE`` > 1."""
    return _initialized() or _env_int('WORLD_SIZE', 1) > 1


def current() -> World | None:
    """This process's :class:`World` in a distributed job (from the group, else the environment); else ``None``."""
    if _initialized():
        dist = _dist()
        size = dist.get_world_size()
        if size < 2 and _env_int('WORLD_SIZE', 1) < 2:
            return None
        return World(dist.get_rank(), size, _env_int('LOCAL_RANK', 0), _env_int('LOCAL_WORLD_SIZE', 1),
                     str(dist.get_backend()))
    size = _env_int('WORLD_SIZE', 1)
    if size < 2:
        return None
    return World(_env_int('RANK', 0), size, _env_int('LOCAL_RANK', 0), _env_int('LOCAL_WORLD_SIZE', 1))


def _timeout(timeout: Any) -> datetime.timedelta | None:
    if timeout is None:
        text = os.environ.get(TIMEOUT_VARIABLE, '').strip()
        if not text:
            return None
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f'Expected {TIMEOUT_VARIABLE} in seconds. Received: {TIMEOUT_VARIABLE}={text!r}.')\
                from None
    if isinstance(timeout, datetime.timedelta):
        return timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f'Expected timeout as positive seconds or a datetime.timedelta. Received: {timeout!r}.')
    return datetime.timedelta(seconds=float(timeout))


def default_backend() -> str:
    """``'nccl'`` where CUDA and NCCL are available, else ``'gloo'``."""
    import torch
    dist = _dist()
    return 'nccl' if torch.cuda.is_available() and dist.is_nccl_available() else 'gloo'


def init(backend: str | None = None, timeout: Any = None) -> World | None:
    """Initialize the process group of a ``WORLD_SIZE`` > 1 environment, once; reuse one that exists.

    Args:
        backend: ``'gloo'``, ``'nccl'``...; ``None`` for ``FLOWPIPE_DIST_BACKEND``, else NCCL on CUDA, else gloo.
        timeout: seconds (or a ``timedelta``) a collective may wait before the job fails; ``None`` for
            ``FLOWPIPE_DIST_TIMEOUT``, else torch's default.

    Returns:
        This process's :class:`World`, ``None`` outside a distributed job.
    """
    if _initialized():
        return current()
    world = current()
    if world is None:
        return None
    dist = _dist()
    chosen = backend or os.environ.get(BACKEND_VARIABLE, '').strip() or default_backend()
    if chosen == 'nccl':
        import torch
        count = torch.cuda.device_count()
        if not count:
            raise ValueError(f"Expected CUDA GPUs for the NCCL backend. Received: backend 'nccl' in {world} on a "
                             f"machine where torch sees no GPU. Use gloo (FLOWPIPE_DIST_BACKEND=gloo, or "
                             f"init('gloo')), or run the job where GPUs are visible.")
        if world.local_size > count:
            raise ValueError(f"Expected a GPU of its own for each rank under NCCL. Received: backend 'nccl' with "
                             f"{world.local_size} ranks on this node and {count} GPU(s): NCCL refuses two ranks on "
                             f"one GPU. Use gloo (FLOWPIPE_DIST_BACKEND=gloo, or init('gloo')), whose ranks may "
                             f"share a GPU, or start at most {count} process(es) per node.")
        torch.cuda.set_device(world.local_rank % count)
    options = {'backend': chosen, 'rank': world.rank, 'world_size': world.size}
    limit = _timeout(timeout)
    if limit is not None:
        options['timeout'] = limit
    _STATE['timeout'] = limit
    dist.init_process_group(**options)
    _STATE['created'] = True
    if not _STATE['exit_hook']:
        atexit.register(shutdown)
        _STATE['exit_hook'] = True
    return current()


def group_timeout() -> datetime.timedelta | None:
    """The timeout this module gave the job's process group, ``None`` where torch's default holds (a group made
    elsewhere, or no timeout given)."""
    return _STATE['timeout']


def setup() -> World | None:
    """:func:`init` with the defaults when this process belongs to a distributed job; ``None`` otherwise."""
    return init() if requested() else None


# How long shutdown() leaves the CPU to gloo's worker threads after destroying a group: a thread still releasing a
# finished collective takes the GIL, and one that does so once the interpreter is finalizing aborts the process.
_GLOO_EXIT_GRACE = 0.1


def shutdown() -> None:
    """Destroy the process group flowpipe created (a group the user initialized is left alone)."""
    if _STATE['created'] and _initialized():
        gloo = _dist().get_backend() == 'gloo'
        _dist().destroy_process_group()
        if gloo:        # torch keeps a DDP job's gloo threads to the end: let them finish while Python still runs
            time.sleep(_GLOO_EXIT_GRACE)
    _STATE['created'] = False


def rank() -> int:
    """The global rank (0 outside a distributed job)."""
    world = current()
    return 0 if world is None else world.rank


def world_size() -> int:
    """The number of processes (1 outside a distributed job)."""
    world = current()
    return 1 if world is None else world.size


def is_main() -> bool:
    """Whether this process is rank 0: the one that shows progress, prints and writes files."""
    return rank() == 0


def _group_ready() -> bool:
    return _initialized() and _dist().get_world_size() > 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for outside an initialized group)."""
    if _group_ready():
        dist = _dist()
        with collective('distributed.barrier()'):
            if dist.get_backend() == 'nccl':
                import torch
                dist.barrier(device_ids=[torch.cuda.current_device()])
            else:
                dist.barrier()


def broadcast(value: Any, src: int = 0) -> Any:
    """``value`` of rank ``src`` on every rank (any picklable object)."""
    if not _group_ready():
        return value
    box = [value]
    with collective(f'distributed.broadcast(src={src})'):
        _dist().broadcast_object_list(box, src=src)
    return box[0]


def all_gather(value: Any) -> list:
    """Every rank's ``value``, in rank order, on every rank."""
    if not _group_ready():
        return [value]
    values = [None] * _dist().get_world_size()
    with collective('distributed.all_gather()'):
        _dist().all_gather_object(values, value)
    return values


def gather(value: Any, dst: int | None = 0) -> list | None:
    """Every rank's ``value`` in rank order: on rank ``dst`` only (others get ``None``), or on all for ``None``."""
    if dst is None or not _group_ready():
        return all_gather(value)
    dist = _dist()
    values = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    with collective(f'distributed.gather(dst={dst})'):
        dist.gather_object(value, values, dst=dst)
    return values


def reduce(value: Any, op: str = 'sum', dst: int | None = None) -> Any:
    """Combine a number or array over the ranks: ``'sum'``, ``'mean'``, ``'max'`` or ``'min'`` (elementwise).

    The result is on every rank (``dst=None``) or on rank ``dst`` only (others get ``None``).
    """
    if op not in _OPS:
        raise ValueError(f'Expected op among {list(_OPS)}. Received: op={op!r}.')
    values = gather(value, dst)
    if values is None:
        return None
    import numpy as np
    if op == 'mean':
        return sum(values[1:], values[0]) / len(values)
    if op == 'sum':
        return sum(values[1:], values[0])
    stacked = np.stack([np.asarray(v) for v in values])
    result = stacked.max(axis=0) if op == 'max' else stacked.min(axis=0)
    return result.item() if result.ndim == 0 else result


def gather_batches(values: Sequence, dst: int | None = 0, concat: bool = True) -> Any:
    """Per-batch values of every rank (a variable appended once per batch) back in dataset order.

    Rank ``r``'s ``values[b]`` belongs to its shard of global batch ``b``; shards are contiguous and in rank order,
    so batch ``b`` is ``values[b]`` of rank 0, then of rank 1... Every rank must have one value per batch.

    Returns:
        On rank ``dst`` (on every rank for ``None``): with ``concat``, one array of every item in dataset order
        (numpy arrays and tensors are concatenated along the first axis); otherwise a list, per global batch, of
        the per-rank values. Other ranks get ``None``.
    """
    gathered = gather(list(values), dst)
    return None if gathered is None else _in_dataset_order(gathered, concat)


def _in_dataset_order(gathered: list, concat: bool) -> Any:
    """``gathered[rank][batch]`` as a list per batch of the ranks' values, or all items concatenated."""
    counts = {len(per_rank) for per_rank in gathered}
    if len(counts) != 1:
        raise ValueError(f'Expected one value per batch on every rank. Received: '
                         f'{[len(per_rank) for per_rank in gathered]} values on ranks 0..{len(gathered) - 1}.')
    batches = [[per_rank[b] for per_rank in gathered] for b in range(counts.pop())]
    if not concat:
        return batches
    import numpy as np
    parts = [np.asarray(_numpy(part)) for batch in batches for part in batch]
    filled = [part for part in parts if part.ndim == 0 or len(part)]    # an idle rank's empty shard adds nothing
    return np.concatenate(filled) if filled else np.empty(0)


def _numpy(value: Any) -> Any:
    detach = getattr(value, 'detach', None)
    return detach().cpu().numpy() if detach is not None else value


def from_rank_0(compute: Callable[[], Any]) -> Any:
    """``compute()`` run on rank 0 only and its value broadcast to every rank (``compute()`` outside a job).

    For values read from a batch that must be the same everywhere (a model's input shape read from the batch):
    rank 0's shard is never empty when the global batch is not. An error in rank 0 is raised on every rank.
    """
    if not _group_ready():
        return compute()
    outcome: tuple[bool, Any] = (True, None)
    if _dist().get_rank() == 0:
        try:
            outcome = (True, compute())
        except Exception as error:
            outcome = (False, f'{type(error).__name__}: {error}')
            broadcast(outcome)
            raise
    ok, value = broadcast(outcome)
    if not ok:
        raise RuntimeError(f'Expected rank 0 to compute a value every rank shares. Received: rank 0 failed with '
                           f'{value}; see rank 0\'s error for the cause.')
    return value


@contextlib.contextmanager
def collective(what: str | Callable[[], str]) -> Iterator[None]:
    """Run the block's collectives; one that times out or loses a peer is raised again naming ``what`` (a text,
    or a function giving it at the time of the failure), this rank and where the other ranks were.

    Raises:
        TimeoutError: a collective of the block waited past the group's timeout.
        RuntimeError: a collective of the block lost a peer (another rank failed or left).
    """
    try:
        yield
    except RuntimeError as error:
        if getattr(error, 'flowpipe_named', False) or not any(text in str(error).lower() for text in _BROKEN):
            raise
        named = named_failure(what() if callable(what) else what, error, _STATE['timeout'])
        named.flowpipe_named = True
        raise named from error
