"""The Digits grid of tests/research: 2 learning rates x 2 micro-batch sizes x 2 repetitions, a tiny MLP, a few
iterations. Also a script: ``python grid.py FOLDER WORKERS`` runs it with results under FOLDER (used by the
interruption tests, which kill or interrupt that process)."""
from __future__ import annotations

import sys

from flowpipe import B, C, D, Pipeline, V
from flowpipe.models.torch import MLP
from flowpipe.opensets import Digits
from flowpipe.research import Domain, Research

N_ITERS = 3
SEED = 11


def make_research(name: str, domain: Domain | None = None, sleep: float = 0.0) -> Research:
    """The grid's research (``domain`` replaces the grid, e.g. to run one config alone)."""
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'body/units': (8,),
              'optimizer': {'name': 'SGD', 'lr': C('lr')}, 'microbatch': C('microbatch'), 'device': C('device')}
    template = (Pipeline()
                .init_variable('loss', None)
                .init_model('net', MLP, config=config)
                .to_array().multiply(1 / 255)
                .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss'))
                .run_later(16, n_iters=N_ITERS, shuffle=5))
    if domain is None:
        domain = Domain({'lr': [0.05, 0.2]}) * Domain({'microbatch': [4, 8]})
    research = Research(name=name, domain=domain, n_reps=2).add_pipeline('train', template << Digits().train,
                                                                         variables='loss')
    if sleep:
        research = research.add_callable('pause', _pause, seconds=sleep)
    return research


def _pause(seconds: float) -> None:
    import time
    time.sleep(seconds)


def table(research: Research) -> list[tuple]:
    """The results as sorted ``(id, lr, microbatch, iteration, loss)`` rows (no pandas needed)."""
    rows = research.results.rows()
    return sorted((row['id'], row['lr'], row['microbatch'], row['iteration'], row['loss']) for row in rows)


if __name__ == '__main__':
    folder, workers = sys.argv[1], int(sys.argv[2])
    sleep = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    research = make_research(folder, sleep=sleep)
    research.run(n_iters=N_ITERS, workers=workers, devices=['CPU:0', 'CPU:1'], seed=SEED, bar=False)
    print('finished', research.monitor.finished, flush=True)
