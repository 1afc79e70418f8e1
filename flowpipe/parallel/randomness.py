"""The random streams of a training step: every piece draws from a generator state of its own.

Dropout and other random layers draw from torch's default generator of their device: one generator for every
CPU device, one per CUDA device. Replicas run their pieces on threads, so without care the pieces of a step
would take their random numbers in whatever order the threads happen to run. Instead:

- a training step has a *step seed*: the one its caller gives (a pipeline run with a seed derives it from the
  batch's place in the run's seed tree and the model), else one number drawn from torch's global CPU generator
  in the caller's thread (so ``torch.manual_seed`` decides, as in plain PyTorch);
- the piece of micro-batch ``chunk`` that starts at item ``start`` of the batch gets
  ``piece_seed(step_seed, chunk, start)``;
- around the piece's forward and backward, the default generator of the piece's device is seeded with it and
  restored afterwards (``piece_random``), under a lock per generator: two threads never share one at once.

So a piece's draws depend on the seed and on the piece's place in the batch, never on thread timing, and the
global generators are left as they were (but for the step seed drawn when none is given). All CPU replicas
share the CPU generator, hence one lock: their pieces run one at a time (CUDA devices each have their own).
Devices other than the CPU and CUDA keep their generators untouched.

Activation checkpointing recomputes a forward during backward, with the generator states the forward started
from (:class:`ForwardGenerators`). Backward of CPU tensors runs on the thread that called it, inside the piece, so
the recomputation uses the generator the piece holds; backward of CUDA tensors runs on autograd's thread for the
device, which does not hold the piece's lock: it uses the piece's generators (their owner waits in ``backward``)
and locks any other it must set, such as the CPU generator shared with the CPU replicas.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator

import torch

__all__ = ['ForwardGenerators', 'draw_step_seed', 'piece_random', 'piece_seed']

_MASK = (1 << 64) - 1
_LOCKS: dict[tuple[str, int], threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()
_HELD = threading.local()       # per thread: how many times its pieces hold each generator's lock


def _mix(value: int) -> int:
    """The splitmix64 finalizer: a cheap bijection of 64-bit ints that scatters nearby inputs."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


def piece_seed(step_seed: int, chunk: int, start: int) -> int:
    """The seed of the piece of micro-batch ``chunk`` that starts at item ``start`` (a non-negative 63-bit int)."""
    return _mix(_mix(step_seed & _MASK) ^ (chunk << 40) ^ (start + 1)) >> 1


def _key(device: torch.device) -> tuple[str, int] | None:
    if device.type == 'cpu':
        return ('cpu', 0)
    if device.type == 'cuda':
        return ('cuda', torch.cuda.current_device() if device.index is None else device.index)
    return None


def _lock(key: tuple[str, int]) -> threading.RLock:
    lock = _LOCKS.get(key)
    if lock is None:
        with _LOCKS_GUARD:
            lock = _LOCKS.setdefault(key, threading.RLock())
    return lock


def _held() -> dict[tuple[str, int], int]:
    return _HELD.__dict__.setdefault('counts', {})


def _generator(key: tuple[str, int]) -> torch.Generator:
    return torch.default_generator if key[0] == 'cpu' else torch.cuda.default_generators[key[1]]


_DRAW = torch.empty((), dtype=torch.int64)


def draw_step_seed() -> int:
    """A step seed drawn from torch's global CPU generator (under its lock, so no piece is using it)."""
    with _lock(('cpu', 0)):
        return int(_DRAW.random_())


class piece_random:  # noqa: N801 - used as a function: ``with piece_random(device, seed):``
    """Run the block with ``device``'s default generator seeded by ``seed``, restored afterwards.

    ``seed=None``, or a device whose generator flowpipe does not manage, runs the block as it is.
    """
    __slots__ = ('_key', '_seed', '_saved')

    def __init__(self, device: torch.device, seed: int | None):
        self._key = None if seed is None else _key(device)
        self._seed, self._saved = seed, None

    def __enter__(self) -> None:
        if self._key is not None:
            _lock(self._key).acquire()
            held = _held()
            held[self._key] = held.get(self._key, 0) + 1
            generator = _generator(self._key)
            self._saved = generator.get_state()
            generator.manual_seed(self._seed)

    def __exit__(self, *exc_info: object) -> None:
        if self._key is not None:
            _generator(self._key).set_state(self._saved)
            _held()[self._key] -= 1
            _lock(self._key).release()


class ForwardGenerators:
    """The states of the generators a forward may draw from (the CPU's and those of ``devices``' CUDA devices),
    taken when it starts, to run its recomputation (activation checkpointing) with the same draws.

    Create it when the forward starts and call :meth:`finish` when it ends: the recomputation sets again only the
    generators the forward drew from. A generator whose lock the forward's thread held (its piece's, see
    ``piece_random``) is set without locking: its owner waits in backward while the recomputation runs, on the
    same thread (CPU) or on autograd's device thread (CUDA). Any other (the CPU generator of a CUDA piece, shared
    with the CPU replicas' pieces; any generator outside a piece) is locked while it is set.
    """

    def __init__(self, devices: Iterable[torch.device]):
        keys = {('cpu', 0)} | {key for key in map(_key, devices) if key is not None}
        self._keys = sorted(keys)           # one order for the locks of every recomputation
        held = _held()
        self._owned = {key for key in self._keys if held.get(key)}
        self._states = {key: _generator(key).get_state() for key in self._keys}
        self._drawn: list[tuple[str, int]] = []

    def finish(self) -> None:
        """The forward has ended: keep the generators whose state it changed."""
        self._drawn = [key for key in self._keys if not torch.equal(_generator(key).get_state(), self._states[key])]

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Run the block (a recomputation) from the forward's starting states, the current ones put back after."""
        locks = [_lock(key) for key in self._drawn if key not in self._owned]
        for lock in locks:
            lock.acquire()
        try:
            current = [(key, _generator(key).get_state()) for key in self._drawn]
            for key in self._drawn:
                _generator(key).set_state(self._states[key])
            try:
                yield
            finally:
                for key, state in current:
                    _generator(key).set_state(state)
        finally:
            for lock in reversed(locks):
                lock.release()
