"""A research's cost: a grid of 2 learning rates x 2 micro-batch sizes x 2 repetitions on Digits (8 experiments,
``n_iters`` training batches of 32 each, a small CNN), run by ``Research.run`` with the local pool of 1 and of
2 workers (devices ``CPU:0``, ``CPU:1``) and, where ``dask[distributed]`` is installed, on a Dask ``LocalCluster``
of 2 workers (``executor='dask'``).

Printed, in the same process:

- ``wall(1 worker) / wall(2 workers)``: the speed-up of a second worker (and pool / Dask at 2 workers);
- per-experiment overhead of each arm: ``(workers * wall - alone) / 8``, where ``alone`` is the time of the 8
  experiments run one after another in this process (the same pipelines, no research): what each experiment
  costs a worker beyond its own batches (starting processes or a cluster, imports, data, results on disk).

Each round runs the arms in A B C C B A order (the alone baseline first); each ratio is the median over rounds of
the round's ratio of summed times. One torch thread per process (``OMP_NUM_THREADS=1`` for the workers). Run:
``.venv/bin/python bench/research.py [n_iters] [rounds]``.
"""
import os

import sys

os.environ.setdefault('OMP_NUM_THREADS', '1')      # the workers' torch threads (they inherit the environment)
# bench/distributed.py would shadow dask's `distributed` package: this folder is not needed on the path
sys.path[:] = [path for path in sys.path if os.path.abspath(path or '.') != os.path.dirname(os.path.abspath(__file__))]

import importlib.util  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from flowpipe import B, C, V, Pipeline  # noqa: E402
from flowpipe.models.torch import SimpleCNN  # noqa: E402
from flowpipe.opensets import Digits  # noqa: E402
from flowpipe.research import Option, Research  # noqa: E402

torch.set_num_threads(1)

LRS, MICROBATCHES, REPS, BATCH = (1e-3, 3e-3), (16, 32), 2, 32
N_EXPERIMENTS = len(LRS) * len(MICROBATCHES) * REPS


def make_template() -> Pipeline:
    """The experiment: one training batch per research iteration."""
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
              'body/filters': (8, 16), 'optimizer': {'name': 'Adam', 'lr': C('lr')},
              'device': C('device'), 'microbatch': C('microbatch')}
    return (Pipeline()
            .init_variable('loss', [])
            .init_model('cnn', SimpleCNN, config=config)
            .to_array().multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels, save_to=V('loss', mode='a'))
            .run_later(BATCH, shuffle=True, n_epochs=None)) << Digits().train


def run_alone(template: Pipeline, n_iters: int) -> float:
    """Seconds for the 8 experiments, one after another in this process, no research around them."""
    start = time.perf_counter()
    for _ in range(REPS):
        for lr in LRS:
            for microbatch in MICROBATCHES:
                pipeline = template << {'lr': lr, 'microbatch': microbatch, 'device': 'CPU:0'}
                for _ in range(n_iters):
                    pipeline.next_batch()
    return time.perf_counter() - start


def run_research(template: Pipeline, n_iters: int, workers: int, executor: str | None, folder: str) -> float:
    """Seconds for ``Research.run`` of the grid (results written to ``folder``)."""
    research = Research(name=folder, domain=Option('lr', list(LRS)) * Option('microbatch', list(MICROBATCHES)),
                        n_reps=REPS).add_pipeline('train', template, variables='loss')
    start = time.perf_counter()
    research.run(n_iters=n_iters, workers=workers, devices=['CPU:0', 'CPU:1'][:workers], executor=executor,
                 bar=False, seed=1)
    elapsed = time.perf_counter() - start
    frame = research.results.df
    if frame.empty or frame['id'].nunique() != N_EXPERIMENTS:
        raise RuntimeError(f"Expected {N_EXPERIMENTS} finished experiments. Received: the log\n"
                           + '\n'.join(research.storage.log[-20:]))
    return elapsed


def main(n_iters: int = 300, rounds: int = 2) -> None:
    template = make_template()
    arms = {'pool, 1 worker': (1, None), 'pool, 2 workers': (2, None)}
    if importlib.util.find_spec('distributed') is not None:
        arms['dask, 2 workers'] = (2, 'dask')
    else:
        print("dask[distributed] is not installed: no Dask arm (pip install 'flowpipe[dask]')")
    run_alone(template, 1)                                   # warm-up: data loaded, kernels touched
    times: dict = {name: [] for name in ('alone', *arms)}
    with tempfile.TemporaryDirectory() as root:
        for number in range(rounds):
            times['alone'].append(run_alone(template, n_iters))
            order = list(arms) + list(reversed(arms))        # A B C C B A
            round_times: dict = {name: 0.0 for name in arms}
            for position, name in enumerate(order):
                workers, executor = arms[name]
                folder = os.path.join(root, f'r{number}-{position}')
                round_times[name] += run_research(template, n_iters, workers, executor, folder) / 2
            for name in arms:
                times[name].append(round_times[name])
    report(times, arms, n_iters, rounds)


def report(times: dict, arms: dict, n_iters: int, rounds: int) -> None:
    print(f"grid: {len(LRS)} lr x {len(MICROBATCHES)} microbatch x {REPS} reps = {N_EXPERIMENTS} experiments, "
          f"{n_iters} batches of {BATCH} each; {rounds} round(s), {os.cpu_count()} CPUs")
    alone = statistics.median(times['alone'])
    print(f"{'alone, in this process':<24} {alone:7.2f} s")
    for name, (workers, _) in arms.items():
        wall = statistics.median(times[name])
        overhead = statistics.median((workers * t - a) / N_EXPERIMENTS for t, a in zip(times[name], times['alone']))
        print(f"{name:<24} {wall:7.2f} s   overhead per experiment {overhead:6.2f} s")
    ratio = statistics.median(a / b for a, b in zip(times['pool, 1 worker'], times['pool, 2 workers']))
    print(f"wall(pool, 1 worker) / wall(pool, 2 workers) = {ratio:.2f}")
    if 'dask, 2 workers' in arms:
        ratio = statistics.median(a / b for a, b in zip(times['dask, 2 workers'], times['pool, 2 workers']))
        print(f"wall(dask, 2 workers) / wall(pool, 2 workers) = {ratio:.2f}")


if __name__ == '__main__':
    main(*(int(arg) for arg in sys.argv[1:3]))
