"""Functions the distributed tests run in every rank (``flowpipe.parallel.launch``) and in one process alone.

Every function returns plain data (numpy arrays, lists), so the tests compare a launched job's ranks with the
same function run in the test's own process (no distributed job there: one process on the whole batch).
"""
import os

import numpy as np
import torch
from torch import nn

from flowpipe import B, Dataset, P, Pipeline, R, V
from flowpipe.parallel import distributed

N_ITEMS, N_FEATURES, N_CLASSES = 23, 5, 3


def dataset(n_items=N_ITEMS):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_items, N_FEATURES))
    y = rng.integers(0, N_CLASSES, size=n_items)
    return Dataset(n_items, preloaded={'x': x, 'y': y})


def config(microbatch=None, device='cpu'):
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(N_FEATURES, 7), nn.Tanh(), nn.Linear(7, N_CLASSES)).double()
    return {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES,
            'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.5}, 'microbatch': microbatch,
            'device': device}


def train(batch_size, microbatch=None, n_epochs=2, prefetch=0, n_items=N_ITEMS, device='cpu', overrides=None):
    """Train for ``n_epochs`` shuffled epochs; the parameters, the items and losses each batch saw here, and the
    learning rate at the end; ``overrides``: more model config items."""
    pipeline = (Pipeline()
                .init_variable('ids', [])
                .init_variable('loss', [])
                .init_variable('draws', [])
                .init_model('net', config={**config(microbatch, device), **(overrides or {})})
                .update(V('ids', mode='a'), B.indices)
                .update(V('draws', mode='a'), P(R('uniform')))
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset(n_items)
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11, prefetch=prefetch)
    model = pipeline.m('net')
    return {'params': [p.detach().cpu().numpy().copy() for p in model.model.parameters()],
            'ids': [np.asarray(ids) for ids in pipeline.v('ids')], 'loss': list(pipeline.v('loss')),
            'draws': [np.asarray(draws, dtype=float) for draws in pipeline.v('draws')],
            'world': distributed.world_size(), 'rank': distributed.rank(), 'plan': repr(model),
            'lr': model.optimizer.param_groups[0]['lr']}


def scenarios(runs):
    """``train(**kwargs)`` for each ``(name, kwargs)``."""
    return {name: train(**kwargs) for name, kwargs in runs}


def predict(batch_size, model_path=None, save_path=None):
    """Train one epoch (or load ``model_path``), then predict every item, gathered to rank 0, saving with
    ``save_path``."""
    data = dataset()
    if model_path is None:
        trainer = Pipeline().init_model('net', config=config()).train_model('net', x=B.x, y=B.y) << data
        trainer.run(batch_size, shuffle=True, seed=5)
        source = Pipeline().import_model('net', trainer)
    else:
        source = Pipeline().load_model('net', model_path)
    predictor = source.init_variable('predictions', []).predict_model('net', x=B.x,
                                                                      save_to=V('predictions', mode='a'))
    if save_path is not None:
        predictor = predictor.save_model('net', save_path)
    predictor = predictor << data
    predictor.run(batch_size)
    gathered = distributed.gather_batches(predictor.v('predictions'))
    params = [p.detach().numpy().copy() for p in predictor.m('net').model.parameters()]
    return {'gathered': gathered, 'local': [np.asarray(p) for p in predictor.v('predictions')], 'params': params,
            'files': sorted(os.listdir(os.path.dirname(save_path))) if save_path else None}


def fail_on(rank):
    """Rank ``rank`` raises after the group is up; the others wait in a collective that never completes."""
    distributed.setup()
    if distributed.rank() == rank:
        raise ValueError(f'bad value on purpose in rank {rank}')
    distributed.barrier()
    distributed.barrier()
    return 'unreachable'


def kill_self(rank):
    """Rank ``rank`` kills itself with SIGKILL; the others wait in a collective."""
    import signal
    distributed.setup()
    if distributed.rank() == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    distributed.barrier()
    return 'unreachable'


def _jitter(image, rng):
    return image + rng.normal(size=image.shape)


def augment(batch_size, n_items=11):
    """Random augmentations (rotation angles, ``p=`` choices, random crop origins, per-item ``P(R(...))``, a function
    of ``apply_parallel`` given a per-item generator on the items ``p=`` picks) of each batch's items, as arrays per
    batch."""
    from flowpipe import ImagesBatch
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, size=(n_items, 12, 12, 3)).astype(np.uint8)
    data = Dataset(n_items, batch_class=ImagesBatch, preloaded={'images': images})
    pipeline = (Pipeline()
                .init_variable('out', [])
                .rotate(angle=(-30, 30), p=0.6)
                .crop(origin='random', shape=(8, 8))
                .multiply(multiplier=P(R('uniform', 0.5, 1.5)))
                .to_array()
                .apply_parallel(_jitter, src='images', p=0.6)
                .update(V('out', mode='a'), B.images)) << data
    pipeline.run(batch_size, n_epochs=1, shuffle=True, seed=3)
    return [np.asarray(out) for out in pipeline.v('out')]


def _engine(layers):
    """The network ``nn.Sequential(*layers())`` in double precision (seeded), its engine (distributed in a
    launched job) and an SGD optimizer."""
    from flowpipe.parallel.factory import build_engine
    from flowpipe.parallel.plan import make_plan

    torch.manual_seed(0)
    network = nn.Sequential(*layers()).double()
    engine = build_engine(network, make_plan('cpu', world=distributed.init()))
    return network, engine, torch.optim.SGD(engine.parameters(), lr=0.1)


def batchnorm_idle():
    """One step of a BatchNorm network on a global batch of 2 that rank 0 holds alone; the running mean."""
    network, engine, optimizer = _engine(lambda: (nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    x, y = torch.randn(2, 3, dtype=torch.double), torch.tensor([0, 1])
    if distributed.rank() != 0:
        x, y = x[:0], y[:0]
    engine.train_step([x], [y], nn.functional.cross_entropy, optimizer, seed=1)
    return network[1].running_mean.numpy().copy()


def idle_after_a_synchronized_step():
    """Steps on global batches of 4, 1 (rank 1 idle: the step after DDP's first synchronized backward) and 4; the
    losses and the parameters."""
    network, engine, optimizer = _engine(lambda: (nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)))
    x, y = torch.randn(4, 3, dtype=torch.double), torch.tensor([0, 1, 1, 0])
    base, extra = divmod(len(x), distributed.world_size())
    start = distributed.rank() * base + min(distributed.rank(), extra)
    shards = [slice(start, start + base + (distributed.rank() < extra)),
              slice(0, 1) if distributed.rank() == 0 else slice(0, 0)]
    losses = [engine.train_step([x[shard]], [y[shard]], nn.functional.cross_entropy, optimizer, seed=1).loss
              for shard in (shards[0], shards[1], shards[0])]
    return losses, [p.detach().numpy().copy() for p in network.parameters()]


def idle_outputs():
    """A step asking for outputs on a global batch of 2 that rank 0 holds alone: their shape and dtype, and whether
    the network is in training mode afterwards."""
    network, engine, optimizer = _engine(lambda: (nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)))
    x, y = torch.randn(2, 3, dtype=torch.double), torch.tensor([0, 1])
    if distributed.rank() != 0:
        x, y = x[:0], y[:0]
    outputs = engine.train_step([x], [y], nn.functional.cross_entropy, optimizer, return_outputs=True).outputs
    return tuple(outputs.shape), str(outputs.dtype), network.training


class _Sizes(nn.Module):
    """A linear layer that notes the size of every batch it is given."""

    def __init__(self):
        super().__init__()
        self.linear, self.sizes = nn.Linear(3, 2), []

    def forward(self, x):
        self.sizes.append(len(x))
        return self.linear(x)


def predicted_sizes():
    """The batch sizes the network sees when predicting a global batch of 10 with microbatch=2, and the outputs."""
    from flowpipe.parallel.factory import build_engine
    from flowpipe.parallel.plan import make_plan

    torch.manual_seed(0)
    network = _Sizes().double()
    engine = build_engine(network, make_plan('cpu', microbatch=2, world=distributed.init()))
    x = torch.randn(10, 3, dtype=torch.double)
    start = 5 * distributed.rank() if distributed.world_size() == 2 else 0
    outputs = engine.predict([x[start:start + 10 // distributed.world_size()]])
    return network.sizes, outputs.numpy()


def predicted_losses(batch_size=5, n_items=11):
    """``predict_model(fetches='loss')`` batch by batch; the last global batch, of 1 item, leaves rank 1 idle."""
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config())
                .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset(n_items)
    pipeline.run(batch_size, n_epochs=1)
    return list(pipeline.v('loss'))


def empty_batch_mean():
    """``batch_mean`` of a batch with no item on any rank (a shard mean of 0 items): ``nan``, as in one process."""
    _, engine, _ = _engine(lambda: (nn.Linear(3, 2),))
    return engine.batch_mean(0.0, 0)


def train_with(per_rank):
    """``train(**per_rank[rank])``: each rank with its own run arguments (a job that must be refused)."""
    return train(**per_rank[distributed.init().rank])


def _skip_on(rank, number):
    def skip(batch, batch_number):
        if distributed.rank() == rank and batch_number == number:
            from flowpipe import SkipBatch
            raise SkipBatch
    return skip


def skip_on_one_rank(rank, number, n_items=N_ITEMS, batch_size=4):
    """Train one epoch where rank ``rank`` alone raises ``SkipBatch`` on batch ``number``."""
    from flowpipe import I
    pipeline = (Pipeline()
                .init_model('net', config=config())
                .call(_skip_on(rank, number), B(), I('c'))
                .train_model('net', x=B.x, y=B.y)) << dataset(n_items)
    pipeline.run(batch_size, n_epochs=1, shuffle=True, seed=3)
    return 'trained'


def stuck_rank(rank, seconds, batch_size=4):
    """Train where rank ``rank`` sleeps ``seconds`` before the model step of batch 1 (past the job's timeout)."""
    import time

    from flowpipe import I

    def sleep(batch, number):
        if distributed.rank() == rank and number == 1:
            time.sleep(seconds)
    pipeline = (Pipeline()
                .init_model('net', config=config())
                .call(sleep, B(), I('c'))
                .train_model('net', x=B.x, y=B.y)) << dataset()
    pipeline.run(batch_size, n_epochs=1, seed=3)
    return 'trained'


def shape_from_batch(batch_size=2, n_items=7):
    """Train one epoch of the docs' SimpleCNN, whose input shape is read from the batch (``B.image_shape``); a
    global batch smaller than the world leaves a rank idle from the first step. The parameters and losses."""
    from flowpipe import ImagesBatch
    from flowpipe.models.torch import SimpleCNN
    rng = np.random.default_rng(2)
    images = rng.integers(0, 255, size=(n_items, 6, 6, 1)).astype(np.uint8)
    labels = rng.integers(0, 3, n_items)
    data = Dataset(n_items, batch_class=ImagesBatch, preloaded={'images': images, 'labels': labels})
    cfg = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
           'body/filters': (4, 8), 'batch_norm': False, 'device': 'cpu'}
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_model('net', SimpleCNN, config=cfg)
                .to_array().multiply(1 / 255)
                .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss', mode='a'))
                ) << data
    pipeline.run(batch_size, n_epochs=1, shuffle=True, seed=11)
    model = pipeline.m('net')
    return {'params': [p.detach().cpu().numpy().copy() for p in model.model.parameters()],
            'loss': list(pipeline.v('loss'))}


def from_rank_0_failing():
    """``from_rank_0`` whose computation fails on rank 0: the error every rank raises."""
    distributed.setup()

    def compute():
        raise ValueError('no image in this batch')
    try:
        distributed.from_rank_0(compute)
    except Exception as error:      # noqa: BLE001 - the test compares the ranks' errors
        return f'{type(error).__name__}: {error}'
    return 'no error'


def train_counting_on_own_group(batch_size, microbatch=None):
    """``train`` for one epoch with the item counts exchanged on a gloo group of the engine's own, as in a NCCL
    job; the result, how many groups the engine made and how many all-gathers ran on them."""
    from flowpipe.parallel.engines import distributed as engine_module
    dist = engine_module.dist
    made, on_made = [], []
    new_group, all_gather = dist.new_group, dist.all_gather

    def recording_group(*args, **kwargs):
        made.append(new_group(*args, **kwargs))
        return made[-1]

    def recording_gather(*args, group=None, **kwargs):
        on_made.append(group is not None and any(group is own for own in made))
        return all_gather(*args, group=group, **kwargs)
    engine_module._counts_need_own_group = lambda backend: True
    dist.new_group, dist.all_gather = recording_group, recording_gather
    try:
        result = train(batch_size, microbatch, n_epochs=1)
    finally:
        dist.new_group, dist.all_gather = new_group, all_gather
    return {**result, 'own_groups': len(made), 'gathers_on_own': sum(on_made)}



def skip_every_batch_on_one_rank(rank, built, n_items=8, batch_size=4):
    """Train one epoch of 2 batches where rank ``rank`` alone raises ``SkipBatch`` on every batch: it trains on no
    batch while the others do; ``built``: after an epoch every rank trained on (the model built on every rank)."""
    from flowpipe import SkipBatch
    skipping = {'on': False}

    def skip(batch):
        if skipping['on'] and distributed.rank() == rank:
            raise SkipBatch
    pipeline = (Pipeline()
                .init_model('net', config=config())
                .call(skip, B())
                .train_model('net', x=B.x, y=B.y)) << dataset(n_items)
    if built:
        pipeline.run(batch_size, n_epochs=1, shuffle=True, seed=3)
    skipping['on'] = True
    pipeline.run(batch_size, n_epochs=1, shuffle=True, seed=3)
    return 'trained'
