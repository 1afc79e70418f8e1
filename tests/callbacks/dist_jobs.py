"""A training run with callbacks that the distributed tests run in every rank and in one process alone."""
import os

import numpy as np

from flowpipe import B, I, Pipeline, R, V
from flowpipe.callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, Validate
from flowpipe.parallel import distributed

from ..parallel import dist_jobs

VALIDATED_BATCHES = []      # one entry per validation batch this process ran


def _accuracy(pipeline):
    return float(np.mean(np.array(pipeline.v('predicted')) == np.array(pipeline.v('true'))))


def train_with_callbacks(folder, n_epochs=30):
    """Train with validation, early stopping and plateau LRs; the stop epoch, parameters, LRs and rows."""
    VALIDATED_BATCHES.clear()
    data = dist_jobs.dataset()
    train = (Pipeline().init_model('net', config=dist_jobs.config())
             .train_model('net', x=B.x, y=B.y)) << data
    val = (Pipeline().import_model('net', train).init_variable('losses', [])
           .init_variable('predicted', []).init_variable('true', [])
           .init_variable('numbers', []).init_variable('draws', [])
           .call(VALIDATED_BATCHES.append, B.indices)
           .update(V('numbers', mode='a'), I('c'))
           .update(V('draws', mode='a'), R('uniform'))
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))
           .predict_model('net', x=B.x, fetches='labels', save_to=V('predicted', mode='e'))
           .update(V('true', mode='e'), B.y)) << data
    early = EarlyStopping('val/loss', patience=1, min_delta=0.02)
    rows = []

    class Rows(CSVLogger):
        def on_epoch_end(self, run, epoch):
            super().on_epoch_end(run, epoch)
            rows.append(dict(run.logs))
    validate = Validate(val, batch_size=8, metrics={'loss': lambda p: float(np.mean(p.v('losses'))),
                                                    'accuracy': _accuracy, 'items': lambda p: len(p.v('true'))},
                        seed=5, prefetch=2)
    where = os.path.join(folder, f'rank-{distributed.rank()}')
    best = ModelCheckpoint(os.path.join(folder, 'best'), monitor='val/loss', save_top_k=2)
    train.run(6, n_epochs=n_epochs, shuffle=True, seed=11,
              callbacks=[validate,
                         early, best, ReduceLROnPlateau('net', factor=0.5, patience=0), Rows(where)])
    model = train.m('net')
    return {'stop': early.stopped_epoch, 'params': [p.detach().numpy().copy() for p in model.model.parameters()],
            'lrs': [group['lr'] for group in model.optimizer.param_groups], 'rows': rows,
            'wrote': os.path.exists(os.path.join(where, 'metrics.csv')), 'rank': distributed.rank(),
            'validated': dict(validate.values), 'best': (best.best_path, best.best_score),
            'files': sorted(name for name in os.listdir(os.path.join(folder, 'best')) if name.endswith('.model')),
            'validated_batches': [list(indices) for indices in VALIDATED_BATCHES],
            'numbers': list(val.v('numbers')), 'draws': list(val.v('draws'))}


def validate_a_sum(shard):
    """Validate once with a variable summed into (not a list): what a sharded validation says, or the metric."""
    data = dist_jobs.dataset()
    train = Pipeline().init_model('net', config=dist_jobs.config()).train_model('net', x=B.x, y=B.y) << data
    train.run(8, shuffle=True, seed=3)
    val = (Pipeline().import_model('net', train).init_variable('correct', 0)
           .predict_model('net', x=B.x, fetches='labels', save_to=V('predicted'))
           .update(V('correct'), V('correct') + (V('predicted') == B.y).sum())) << data
    validate = Validate(val, batch_size=8, metrics={'correct': lambda p: p.v('correct')}, shard=shard)
    try:
        return validate.validate()
    except ValueError as error:
        return str(error)
