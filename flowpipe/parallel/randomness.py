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
"""
from __future__ import annotations

import threading

import torch

__all__ = ['draw_step_seed', 'piece_random', 'piece_seed']

_MASK = (1 << 64) - 1
_LOCKS: dict[tuple[str, int], threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


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
            generator = _generator(self._key)
            self._saved = generator.get_state()
            generator.manual_seed(self._seed)

    def __exit__(self, *exc_info: object) -> None:
        if self._key is not None:
            _generator(self._key).set_state(self._saved)
            _lock(self._key).release()
