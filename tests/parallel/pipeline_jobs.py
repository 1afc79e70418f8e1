"""Functions the pipeline-parallel tests run in every rank (``flowpipe.parallel.launch``) and in one process alone
(where ``'pipeline'`` changes nothing: the one device holds the whole network)."""
import numpy as np
import torch
from torch import nn

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.parallel import distributed

N_ITEMS, N_FEATURES, N_CLASSES = 23, 5, 3


def dataset():
    rng = np.random.default_rng(0)
    return Dataset(N_ITEMS, preloaded={'x': rng.normal(size=(N_ITEMS, N_FEATURES)),
                                       'y': rng.integers(0, N_CLASSES, size=N_ITEMS)})


def network():
    """Five top-level children in float64 (whatever the default dtype, which the inputs are cast from)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N_FEATURES, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, N_CLASSES)).double()


def config(stages, microbatch=None, schedule=None, loss='ce', split=None):
    result = {'model': network(), 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': N_CLASSES,
              'loss': loss, 'optimizer': {'name': 'Adam', 'lr': 0.01}, 'microbatch': microbatch, 'device': 'cpu',
              'pipeline': stages}
    if schedule is not None:
        result['pipeline_schedule'] = schedule
    if split is not None:
        result['pipeline_split'] = split
    return result


def train(batch_size, stages=2, microbatch=None, schedule=None, n_epochs=2, save_path=None, loss='ce', split=None):
    """Train ``n_epochs`` shuffled epochs; the parameters this process holds (by name), the losses, the predictions
    of every item after training and the plan."""
    model_config = config(stages, microbatch, schedule, loss, split)
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_variable('ids', [])
                .init_model('net', config=model_config)
                .update(V('ids', mode='a'), B.indices)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11)
    model = pipeline.m('net')
    data = dataset()
    predictions = model.predict(x=data.preloaded['x'])
    if save_path is not None:
        model.save(save_path)
    held = {name: param.detach().cpu().numpy().copy() for name, param in model.model.named_parameters()
            if param.device.type != 'meta'}
    return {'params': held, 'loss': list(pipeline.v('loss')), 'ids': [np.asarray(i) for i in pipeline.v('ids')],
            'predictions': np.asarray(predictions), 'plan': model.device_plan(batch_size),
            'rank': distributed.rank()}


def scenarios(runs):
    """``train(**kwargs)`` for each ``(name, kwargs)``."""
    return {name: train(**kwargs) for name, kwargs in runs}
