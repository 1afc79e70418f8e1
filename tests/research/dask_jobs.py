"""What the tests of a research on a Dask cluster of separate processes run: the experiment's unit (importable on
the workers: they run with the repository on ``PYTHONPATH``) and the research, which ``dask_caller.py`` runs.

Each execution of an experiment leaves a file ``run-<lr>-<worker>-<unique>`` in the folder it is given as it
starts (so the tests count executions and see which worker ran each), then waits while ``hold-<lr>`` exists there:
the tests hold experiments in flight, and let them go, by files, never by time.
"""
import os
import time
import uuid

from flowpipe.research import EC, Option, Research

LRS = [1, 2, 3, 4, 5]
_POLL = 0.05


def step(lr: int, folder: str) -> tuple[int, float]:
    """Leave this execution's file, wait while the experiment is held; ``10 * lr`` and a draw from the experiment's
    seed (torch's generator, which every task seeds)."""
    import torch
    try:
        from distributed import get_worker
        worker = get_worker().name
    except (ImportError, ValueError):       # not in a Dask worker: the reference run in the test's process
        worker = 'local'
    open(os.path.join(folder, f'run-{lr}-{worker}-{uuid.uuid4().hex}'), 'w').close()
    while os.path.exists(os.path.join(folder, f'hold-{lr}')):
        time.sleep(_POLL)
    return 10 * lr, round(float(torch.rand(1)), 8)


def research(name: str, folder: str) -> Research:
    """A research of ``step`` over ``LRS``, one iteration each."""
    return Research(name=name, domain=Option('lr', LRS)).add_callable('step', step, lr=EC('lr'), folder=folder,
                                                                       save_to=['value', 'draw'])


def table(research: Research) -> list[tuple]:
    """``(lr, value, draw)`` of each experiment, sorted."""
    frame = research.results.df
    return sorted(zip(frame['lr'].astype(int), frame['value'].astype(int), frame['draw'].astype(float)))


def executions(folder: str) -> list[tuple[int, str]]:
    """``(lr, worker)`` of every execution so far, sorted."""
    return sorted((int(name.split('-')[1]), name.split('-')[2]) for name in os.listdir(folder)
                  if name.startswith('run-'))
