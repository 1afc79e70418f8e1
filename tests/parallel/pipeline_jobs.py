"""Functions the pipeline-parallel tests run in every rank (``flowpipe.parallel.launch``) and in one process alone
(where ``'pipeline'`` changes nothing: the one device holds the whole network)."""
import numpy as np
import torch
from torch import nn

from flowpipe import B, Checkpoint, Dataset, I, Pipeline, V
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


#: the batch at which a run stops (set by ``checkpointed``; read by the pipeline's ``call``)
STOP = {'at': None, 'calls': 0}


class Stopped(Exception):
    """The failure a checkpointed run stops with."""


def _stop(number):
    STOP['calls'] += 1
    if STOP['at'] is not None and number == STOP['at']:
        raise Stopped(number)


def _pipeline(model_config):
    return (Pipeline()
            .init_variable('loss', [])
            .init_variable('ids', [])
            .init_model('net', config=model_config)
            .call(_stop, I('c'))
            .update(V('ids', mode='a'), B.indices)
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()


def train(batch_size, stages=2, microbatch=None, schedule=None, n_epochs=2, save_path=None, loss='ce', split=None):
    """Train ``n_epochs`` shuffled epochs; the parameters this process holds (by name), the losses, the predictions
    of every item after training and the plan."""
    pipeline = _pipeline(config(stages, microbatch, schedule, loss, split))
    pipeline.run(batch_size, n_epochs=n_epochs, shuffle=True, seed=11)
    return _result(pipeline, batch_size, save_path)


def checkpointed(folder, stop, batch_size, stages=2, microbatch=None):
    """Train two epochs with run checkpoints in ``folder``, stopped at batch ``stop``, then resumed from them by a
    new pipeline and model; the state at the end, as ``train`` gives it."""
    STOP['at'] = stop
    try:
        _pipeline(config(stages, microbatch)).run(batch_size, n_epochs=2, shuffle=True, seed=11,
                                                  checkpoint=Checkpoint(folder, every=1))
    except Stopped:
        pass
    finally:
        STOP['at'] = None
    resumed, STOP['calls'] = _pipeline(config(stages, microbatch)), 0
    resumed.run(batch_size, n_epochs=2, shuffle=True, seed=11, checkpoint=Checkpoint(folder, every=1), resume=True)
    return {**_result(resumed, batch_size), 'resumed_batches': STOP['calls']}


def _result(pipeline, batch_size, save_path=None):
    predictor = (Pipeline().import_model('net', pipeline).init_variable('losses', [])
                 .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << dataset()
    predictor.run(batch_size)          # each global batch's loss, predicted on the pipelines' parts
    model = pipeline.m('net')
    data = dataset()
    predictions = model.predict(x=data.preloaded['x'])
    if save_path is not None:
        model.save(save_path)
    held = {name: param.detach().cpu().numpy().copy() for name, param in model.model.named_parameters()
            if param.device.type != 'meta'}
    return {'params': held, 'loss': list(pipeline.v('loss')), 'ids': [np.asarray(i) for i in pipeline.v('ids')],
            'predictions': np.asarray(predictions), 'plan': model.device_plan(batch_size),
            'rank': distributed.rank(), 'predicted_losses': list(predictor.v('losses'))}


def scenarios(runs):
    """``train(**kwargs)`` for each ``(name, kwargs)``."""
    return {name: train(**kwargs) for name, kwargs in runs}


def hidden_stages():
    """A model whose whole config is an expression: the run cannot read its 'pipeline' before the first batch."""
    from flowpipe import C
    pipeline = (Pipeline().init_model('net', config=C('model'))
                .train_model('net', x=B.x, y=B.y)) << dataset() << {'model': config(2, 2)}
    pipeline.run(6, n_epochs=1)


def validated(batch_size=5, stages=2):
    """One epoch with a validation at its end of the items' ids and predictions (batches of 4); what every rank
    holds of the validation's variables afterwards."""
    from flowpipe.callbacks import Validate
    train = _pipeline(config(stages, 2))
    val = (Pipeline().import_model('net', train).init_variable('ids', []).init_variable('predictions', [])
           .update(V('ids', mode='a'), B.indices)
           .predict_model('net', x=B.x, save_to=V('predictions', mode='a'))) << dataset()
    validate = Validate(val, batch_size=4, metrics={'items': lambda p: float(len(np.concatenate(p.v('ids'))))})
    train.run(batch_size, n_epochs=1, shuffle=True, seed=11, callbacks=[validate])
    return {'ids': np.concatenate(val.v('ids')), 'predictions': np.concatenate(val.v('predictions')),
            'items': validate.values['val/items']}
