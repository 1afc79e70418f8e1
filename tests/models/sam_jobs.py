"""Functions the SAM and weight-averaging tests run in every rank of a ``flowpipe.parallel.launch`` job and in one
process alone; each returns plain data (numpy arrays, lists)."""
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.parallel import distributed

N_ITEMS, N_FEATURES, N_CLASSES = 23, 5, 3
RHO = 0.05


def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N_FEATURES, 7), nn.Tanh(), nn.Linear(7, N_CLASSES)).double()


def global_batch(size=12):
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(size, N_FEATURES, generator=generator, dtype=torch.float64),
            torch.randint(0, N_CLASSES, (size,), generator=generator))


def engine_steps(individual, steps=2, microbatch=None):
    """``steps`` SAM steps of an engine on this rank's contiguous shard of ``global_batch()``; the parameters."""
    from flowpipe.parallel.engines.sam import make_sam
    from flowpipe.parallel.factory import build_engine
    from flowpipe.parallel.plan import make_plan

    net = network()
    engine = build_engine(net, make_plan('cpu', microbatch, world=distributed.init()))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
    x, y = global_batch()
    base, extra = divmod(len(x), distributed.world_size())
    rank = distributed.rank()
    start = rank * base + min(rank, extra)
    shard = slice(start, start + base + (rank < extra))
    losses = [float(engine.train_step([x[shard]], [y[shard]], F.cross_entropy, optimizer,
                                      sam=make_sam(RHO, individual)).loss) for _ in range(steps)]
    engine.close()
    return {'params': [p.detach().numpy().copy() for p in net.parameters()], 'losses': losses}


def averaged_run(batch_size=5, microbatch=None, n_epochs=2):
    """A shuffled run with SAM and weight averaging; the network's and the average's parameters."""
    rng = np.random.default_rng(0)
    dataset = Dataset(N_ITEMS, preloaded={'x': rng.normal(size=(N_ITEMS, N_FEATURES)),
                                          'y': rng.integers(0, N_CLASSES, N_ITEMS)})
    config = {'model': network(), 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES, 'loss': 'ce',
              'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.5}, 'microbatch': microbatch, 'device': 'cpu',
              'sam_rho': RHO, 'sam_individual_norm': False,
              'swa': {'start_iter': 2, 'last_iter': 100, 'frequency': 2, 'avg_fn': 'ema',
                      'swalr': {'swa_lr': 0.05, 'anneal_epochs': 3}}}
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11)
    model = pipeline.m('net')
    return {'params': [p.detach().numpy().copy() for p in model.model.parameters()],
            'averaged': [p.detach().numpy().copy() for p in model.averaging.module.parameters()],
            'updates': list(model.averaging.iterations), 'loss': list(pipeline.v('loss')),
            'lr': model.optimizer.param_groups[0]['lr']}
