"""Functions the sharding tests run in every rank (``flowpipe.parallel.launch``) and in one process alone.

Each returns plain data: the full parameters (a sharded rank gathers its ``DTensor`` shards), the losses and the
model's description, so a test compares a launched job's ranks with one process on the whole batch.
"""
import torch

from flowpipe import B, Pipeline, V
from flowpipe.models.torch.networks import MLPNetwork
from flowpipe.parallel import distributed

from .dist_jobs import N_CLASSES, N_FEATURES, dataset


def config(sharding=None, microbatch=None, **overrides):
    """A float64 MLP (initial_block, two body blocks, head) trained with Adam."""
    torch.manual_seed(0)
    network = MLPNetwork((N_FEATURES,), N_CLASSES, units=(6, 4)).double()
    return {'model': network, 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES, 'loss': 'ce',
            'optimizer': {'name': 'Adam', 'lr': 0.05}, 'microbatch': microbatch, 'sharding': sharding, **overrides}


def full(tensor):
    """The whole tensor of a ``DTensor`` shard (an all-gather), a plain tensor as it is, as numpy."""
    gather = getattr(tensor, 'full_tensor', None)
    return (tensor if gather is None else gather()).detach().cpu().numpy().copy()


def train(batch_size, sharding=None, microbatch=None, n_epochs=2, overrides=None):
    """Train for ``n_epochs`` shuffled epochs of 23 items; the parameters, losses and the model's description."""
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_model('net', config=config(sharding, microbatch, **(overrides or {})))
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11)
    model = pipeline.m('net')
    return {'params': [full(p) for p in model.model.parameters()], 'loss': list(pipeline.v('loss')),
            'plan': model.device_plan(batch_size), 'world': distributed.world_size()}


def scenarios(runs):
    """``train(**kwargs)`` for each ``(name, kwargs)``."""
    return {name: train(**kwargs) for name, kwargs in runs}


def train_and_predict(sharding=None):
    """Train on global batches of 2 (an idle rank among 3) fetching predictions, then predict every item in global
    batches of 5 (the last of 1); the predicted losses, the predictions gathered in dataset order, and the shapes of
    the training predictions each rank got."""
    data = dataset(11)
    trainer = (Pipeline()
               .init_variable('shapes', [])
               .init_model('net', config=config(sharding))
               .train_model('net', x=B.x, y=B.y, fetches='predictions', save_to=V('shapes', mode='a'))) << data
    trainer.run(2, n_epochs=1, shuffle=True, seed=3)
    predictor = (Pipeline().import_model('net', trainer)
                 .init_variable('predictions', []).init_variable('loss', [])
                 .predict_model('net', x=B.x, y=B.y, fetches=['predictions', 'loss'],
                                save_to=[V('predictions', mode='a'), V('loss', mode='a')])) << data
    predictor.run(5, n_epochs=1)
    return {'gathered': distributed.gather_batches(predictor.v('predictions'), dst=None),
            'loss': list(predictor.v('loss')), 'shapes': [value.shape for value in trainer.v('shapes')]}


def skip_poisoned_batch(sharding=None):
    """Three steps on a global batch of 6, the second with an inf in the last item (the last rank's shard); the
    skipped count and the full parameters."""
    from flowpipe.models.torch import TorchModel
    rng = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, N_FEATURES, generator=rng, dtype=torch.float64), torch.arange(6) % N_CLASSES
    poisoned = x.clone()
    poisoned[-1, 0] = float('inf')
    world, rank = distributed.world_size(), distributed.rank()
    shard = slice(rank * 6 // world, (rank + 1) * 6 // world)
    with TorchModel(config(sharding, nonfinite_loss='skip')) as model:
        for inputs in (x, poisoned, x):
            model.train(x=inputs[shard], y=y[shard], seed=1)
        return model.skipped_steps, [full(p) for p in model.model.parameters()]


def batchnorm_idle(sharding=None, microbatch=None):
    """Three steps of a BatchNorm network on a global batch of 4 that rank 0 holds alone (with ``microbatch``,
    the other ranks run as many pieces without items); the running statistics and the full parameters."""
    from torch import nn

    from flowpipe.parallel.factory import build_engine
    from flowpipe.parallel.plan import make_plan
    torch.manual_seed(0)
    # no bias before BatchNorm: its gradient is zero but for rounding, which Adam would scale up to whole steps
    network = nn.Sequential(nn.Linear(3, 4, bias=False), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()
    engine = build_engine(network, make_plan('cpu', microbatch, world=distributed.init(), sharding=sharding))
    optimizer = torch.optim.Adam(engine.parameters(), lr=0.05)
    x, y = torch.randn(4, 3, dtype=torch.double), torch.tensor([0, 1, 1, 0])
    if distributed.rank() != 0:
        x, y = x[:0], y[:0]
    try:
        for _ in range(3):
            engine.train_step([x], [y], nn.functional.cross_entropy, optimizer, seed=1)
        batch_norm = engine.module[1]
        return ([batch_norm.running_mean.numpy().copy(), batch_norm.running_var.numpy().copy()],
                [full(p) for p in engine.parameters()])
    finally:
        engine.close()


def nonfinite_on_one_shard():
    """After a step, the engine's non-finite check with clean gradients, then with an inf written into rank 1's
    shard of the first weight's gradient only (the loss finite): what each rank decides."""
    from torch import nn

    from flowpipe.parallel.factory import build_engine
    from flowpipe.parallel.plan import make_plan
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    engine = build_engine(network, make_plan('cpu', world=distributed.init(), sharding='full'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, dtype=torch.double), torch.tensor([0, 1, 1, 0])
    try:
        loss = engine.train_step([x], [y], nn.functional.cross_entropy, optimizer).loss
        clean = engine.nonfinite(loss, optimizer)
        if distributed.rank() == 1:
            engine.module[0].weight.grad.to_local()[0, 0] = float('inf')
        return clean, engine.nonfinite(loss, optimizer)
    finally:
        engine.close()


def averaging_refused():
    """The error of a sharded model asked to average its weights: its type and message."""
    try:
        train(4, 'full', n_epochs=1, overrides={'weights_averaging': {'start_iter': 1, 'last_iter': 3, 'frequency': 1}})
    except ValueError as error:
        return str(error)
    return None


def export_refused(path):
    """A sharded model asked for a safetensors export: the error's message; then its own file, written once."""
    pipeline = (Pipeline()
                .init_model('net', config=config('full'))
                .train_model('net', x=B.x, y=B.y)) << dataset()
    pipeline.run(4, n_epochs=1)
    model = pipeline.m('net')
    try:
        model.save(path + '.export', fmt='safetensors')
        message = None
    except ValueError as error:
        message = str(error)
    model.save(path)
    return message


def validate_sharded(shard):
    """Train a sharded model for an epoch with a ``Validate(shard=shard)``: the validation loss, or the error."""
    import numpy as np

    from flowpipe.callbacks import Validate
    data = dataset()
    trainer = (Pipeline().init_model('net', config=config('full'))
               .train_model('net', x=B.x, y=B.y)) << data
    checker = (Pipeline().import_model('net', trainer).init_variable('loss', [])
               .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << data
    validate = Validate(checker, metrics={'loss': lambda p: float(np.mean(p.v('loss')))}, batch_size=4, shard=shard)
    try:
        trainer.run(8, n_epochs=1, callbacks=[validate])
    except ValueError as error:
        return str(error)
    return validate.values['val/loss']


def train_refused(per_rank):
    """``train(**per_rank[rank])``, each rank with its own arguments: the text of the error the rank raised."""
    try:
        train(**per_rank[distributed.init().rank])
    except ValueError as error:
        return str(error)
    return None


class TiedNetwork(torch.nn.Module):
    """``embed`` and ``out`` share one weight (tied input and output weights), ``mid`` between them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(N_FEATURES, N_CLASSES, bias=False)
        self.mid = torch.nn.Linear(N_CLASSES, N_FEATURES)
        self.out = torch.nn.Linear(N_FEATURES, N_CLASSES)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(torch.tanh(self.mid(torch.tanh(self.embed(x)))))


def train_tied(sharding_units=None):
    """Train ``TiedNetwork`` under ``'sharding': 'full'`` with ``sharding_units``."""
    torch.manual_seed(0)
    overrides = {'model': TiedNetwork().double(), 'sharding_units': sharding_units}
    return train(4, sharding='full', n_epochs=1, overrides=overrides)
