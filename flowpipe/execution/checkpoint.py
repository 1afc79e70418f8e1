"""Checkpoint files: what ``run(..., checkpoint=...)`` asks for, and writing and reading them atomically.

A checkpoint folder holds files ``checkpoint-<batches>.flowpipe``, one ``torch.save`` zip each, numbered by the batches
the run had completed. A file is written under a temporary name in the same folder, flushed to disk and renamed
over its final name (``os.replace``), so a crash while writing leaves the earlier files as they were and never a
half-written file under a checkpoint's name. With ``Checkpoint(sharded=True)`` the models' weights and optimizer
state are in a folder ``checkpoint-<batches>.shards`` beside the file (one shard per rank, written before the file
and removed with it). Reading is safe by default (``flowpipe.safe_pickle``: torch's restricted unpickler rebuilds
tensors, arrays, containers and flowpipe's models); a checkpoint whose variables hold objects of other classes is
read with ``Checkpoint(..., trusted=True)``, which runs whatever code the file names: only for checkpoints you
trust. Files of format version 2 and before (bare dill pickles) are read trusted only.
"""
from __future__ import annotations

import numbers
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

from .. import safe_pickle
from ..atomic import dump_atomically
from ..errors import UnsafeFileError, add_note
from .nodes import CheckpointError

__all__ = ['Checkpoint', 'FORMAT', 'as_checkpoint', 'latest', 'latest_in', 'read', 'shards_of', 'shards_path',
           'write']

FORMAT = 'flowpipe-checkpoint'
FORMAT_VERSION = 3          # 3: a torch.save zip (2: the fingerprint is the run's canonical description)
_NAME = re.compile(r'^checkpoint-(\d+)\.flowpipe$')


@dataclass(frozen=True)
class Checkpoint:
    """Where and how often a run writes checkpoints.

    Args:
        path: the folder of the checkpoint files (made when missing).
        every: write after every ``every`` completed batches of the run (batch 4, 8, 12... for 4, also after a
            resume from another batch).
        seconds: write when at least this many seconds have passed since the last write. With neither
            ``every`` nor ``seconds``, every batch.
        keep: how many of the newest files to keep; older ones are removed after a successful write.
        on_interrupt: on Ctrl-C (or leaving a ``gen_batch`` loop early) between two batches, write one for the
            last completed batch if it has none yet; on SIGTERM, SIGUSR1 or a first Ctrl-C during a batch, finish
            the batch, write its checkpoint and stop (``signals.py``).
        requeue: the signals (``'SIGUSR1'``, ``'SIGTERM'``) after which a Slurm job (``SLURM_JOB_ID`` set) is
            requeued with ``scontrol requeue`` once the checkpoint is written; ``()`` for never.
        sharded: write the models' weights and optimizer state one shard per rank (``torch.distributed.checkpoint``)
            into a folder ``checkpoint-<batches>.shards`` beside the file, instead of gathering them into the file:
            for sharded models too big for one process.
        trusted: read the checkpoint to resume from with dill, which runs any code it names (its variables may
            hold objects of the user's own classes); by default it is read safely and such a file is refused.
    """
    path: str
    every: int | None = None
    seconds: float | None = None
    keep: int = 1
    on_interrupt: bool = True
    sharded: bool = False
    trusted: bool = False
    requeue: tuple[str, ...] = ('SIGUSR1',)

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)) or not os.fspath(self.path):
            raise TypeError(f"Expected the checkpoint path as a str or os.PathLike. Received: path={self.path!r}")
        object.__setattr__(self, 'path', os.fspath(self.path))
        _check_int('every', self.every, allow_none=True)
        _check_int('keep', self.keep, allow_none=False)
        if self.seconds is not None and (isinstance(self.seconds, bool) or not isinstance(self.seconds, numbers.Real)
                                         or not self.seconds > 0):
            raise ValueError(f"Expected seconds as a positive number or None. Received: seconds={self.seconds!r}")
        for name in ('sharded', 'trusted'):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Expected {name} as True or False. Received: {name}={getattr(self, name)!r}")
        if self.every is None and self.seconds is None:
            object.__setattr__(self, 'every', 1)
        object.__setattr__(self, 'requeue', _requeue_signals(self.requeue))


def _requeue_signals(value: Any) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"Expected requeue as a signal name or a tuple of them. Received: requeue={value!r}")
    unknown = [name for name in names if name not in ('SIGUSR1', 'SIGTERM')]
    if unknown:
        raise ValueError(f"Expected requeue among 'SIGUSR1' and 'SIGTERM'. Received: requeue={value!r}. Name the "
                         "signals after which Slurm requeues the job, or pass () for none.")
    return tuple(dict.fromkeys(names))


def _check_int(name: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected {name} as an int >= 1{' or None' if allow_none else ''}. "
                         f"Received: {name}={value!r}")


def as_checkpoint(value: Any) -> Checkpoint | None:
    """``checkpoint=`` as a ``Checkpoint``: a path, a dict of its fields, or an object with ``path`` (and maybe
    ``every``, ``seconds``, ``keep``, ``on_interrupt``, ``sharded``, ``trusted``, ``requeue`` attributes); ``None`` for
    none."""
    if value is None or isinstance(value, Checkpoint):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Checkpoint(value)
    if isinstance(value, dict):
        try:
            return Checkpoint(**value)
        except TypeError as error:
            raise TypeError(f"Expected checkpoint= as a dict of path, every, seconds, keep, on_interrupt, sharded, "
                            f"trusted, requeue. Received: {value!r} ({error})") from None
    if hasattr(value, 'path'):
        fields = ('every', 'seconds', 'keep', 'on_interrupt', 'sharded', 'trusted', 'requeue')
        return Checkpoint(value.path, **{name: getattr(value, name) for name in fields if hasattr(value, name)})
    raise TypeError(f"Expected checkpoint= as a folder path, a dict or a Checkpoint(path, every=, seconds=, keep=). "
                    f"Received: checkpoint={value!r}")


# ----- files -----

def write(folder: str, number: int, payload: dict, keep: int) -> str:
    """Write ``payload`` as checkpoint ``number`` in ``folder`` atomically, then keep the ``keep`` newest files.

    Files numbered after ``number`` are a run's that this one resumed before their batches: they are removed too,
    so that they neither count as the newest nor are what ``resume=True`` takes next. A removed file's folder of
    shards (``shards_of``) goes with it.
    """
    path = os.path.join(folder, f'checkpoint-{number:09d}.flowpipe')
    try:
        dump_atomically({'format': FORMAT, 'format_version': FORMAT_VERSION, **payload}, path)
    except OSError as error:                        # a full disk, a quota, a folder gone: the earlier files stay
        add_note(error, _not_written(path, [old for found, old in _files(folder) if found < number]))
        raise
    files = _files(folder)
    later = [old for found, old in files if found > number]
    for old in later + [old for found, old in files if found <= number][keep:]:
        os.unlink(old)
        if os.path.isdir(shards_of(old)):
            shutil.rmtree(shards_of(old))
    return path


def shards_of(path: str) -> str:
    """The folder of shards of the checkpoint file ``path`` (``checkpoint-<batches>.shards``), written by
    ``Checkpoint(sharded=True)`` before the file."""
    return path[:-len('.flowpipe')] + '.shards' if path.endswith('.flowpipe') else path + '.shards'


def shards_path(folder: str, number: int) -> str:
    """The folder of shards of checkpoint ``number`` in ``folder``."""
    return shards_of(os.path.join(folder, f'checkpoint-{number:09d}.flowpipe'))


def _not_written(path: str, earlier: list[str]) -> str:
    """The note of a checkpoint write that failed: which file, and what ``resume=True`` would read instead."""
    kept = (f"the previous checkpoint {earlier[0]} is intact and resume=True continues from it" if earlier
            else "no earlier checkpoint of this run is in that folder")
    return (f"flowpipe: the checkpoint {path} was not written (its temporary file is removed); {kept}. Free space "
            "on that disk, or pass another folder as checkpoint=.")


def _files(folder: str) -> list[tuple[int, str]]:
    """``(number, path)`` of the checkpoint files in ``folder``, newest first."""
    if not os.path.isdir(folder):
        return []
    found = [(int(match.group(1)), os.path.join(folder, name))
             for name in os.listdir(folder) if (match := _NAME.match(name))]
    return sorted(found, reverse=True)


def latest_in(folder: str) -> str | None:
    """The newest checkpoint file of ``folder``; ``None`` when it has none."""
    files = _files(folder)
    return files[0][1] if files else None


def latest(source: str) -> str | None:
    """The newest checkpoint file of a folder (``None`` when it has none), or ``source`` if it is a file."""
    return source if os.path.isfile(source) else latest_in(source)


def read(path: str, trusted: bool = False) -> dict:
    """The checked contents of a checkpoint file; ``CheckpointError`` when it is corrupt or not a checkpoint,
    ``UnsafeFileError`` when it names code other than torch's and flowpipe's models, unless ``trusted``."""
    from ..models.torch import io          # the classes of the models a checkpoint holds are registered there
    try:
        with open(path, 'rb') as file:
            payload = safe_pickle.load(file, trusted)
    except UnsafeFileError as error:
        raise safe_pickle.unsafe(error, path, 'a checkpoint', TRUST) from None
    except Exception as error:  # a truncated or foreign pickle raises many different types
        raise CheckpointError(f"Expected a flowpipe checkpoint file. Received: {path!r}, which cannot be read "
                              f"({type(error).__name__}: {error}). Delete it to resume from the one before.") from error
    if not isinstance(payload, dict) or payload.get('format') != FORMAT:
        raise CheckpointError(f"Expected a flowpipe checkpoint file (format {FORMAT!r}). Received: {path!r} holding "
                              f"{type(payload).__name__}.")
    if payload.get('format_version', 0) > FORMAT_VERSION:
        raise CheckpointError(f"Expected a checkpoint of format version {FORMAT_VERSION} or older. Received: "
                              f"{path!r}, version {payload.get('format_version')!r}. Upgrade flowpipe to read it.")
    models = payload.get('models')
    if isinstance(models, dict):
        payload['models'] = {name: model if model is None else io.accept(model, path, trusted, 'a checkpoint', TRUST)
                             for name, model in models.items()}
    return payload


#: how to read a checkpoint the safe reader refuses
TRUST = "checkpoint=Checkpoint(folder, trusted=True)"
