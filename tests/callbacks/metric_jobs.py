"""A validation with built-in metrics and torchmetrics objects, run in every rank of a job and in one process."""
import importlib.util

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import Validate

from ..parallel import dist_jobs

NAMES = ['accuracy', 'top2', 'loss', 'precision', 'recall', 'f1']


def trained():
    """A model trained one epoch on the shared data set, and that data set (23 items)."""
    data = dist_jobs.dataset()
    train = Pipeline().init_model('net', config=dist_jobs.config()).train_model('net', x=B.x, y=B.y) << data
    train.run(8, shuffle=True, seed=3)
    return train, data


def validation(train, data):
    """Logits of each item, its label and each batch's mean cross-entropy, as the built-in names read them."""
    return _predicting(Pipeline().import_model('net', train), data)


def _predicting(pipeline, data):
    return (pipeline
            .predict_model('net', x=B.x, y=B.y, fetches=['predictions', 'loss'],
                           save_to=[V('predictions', mode='e'), V('losses', mode='a')])
            .update(V('targets', mode='e'), B.y)) << data


def torchmetrics_objects():
    """Micro accuracy (sum states) and macro f1 (per-class sum states) of torchmetrics, or none without it."""
    if importlib.util.find_spec('torchmetrics') is None:
        return {}
    import torchmetrics
    classes = dist_jobs.N_CLASSES
    return {'tm_accuracy': torchmetrics.Accuracy(task='multiclass', num_classes=classes, average='micro'),
            'tm_f1': torchmetrics.F1Score(task='multiclass', num_classes=classes, average='macro')}


def validate_named(shard=True, batch_size=10):
    """One validation in batches of 10 (10, 10 and 3 items) by default: the logged values. The model is made, not
    trained, where it validates: every rank holds the same parameters (a job's training would average gradients in
    another order than one process and differ in the last bits); a first validation on every rank makes it there
    (a job's model is made at its first batch, collectively, even on a rank that then validates no batch)."""
    data = dist_jobs.dataset()
    val = _predicting(Pipeline().init_model('net', config=dist_jobs.config()), data)
    Validate(val, batch_size=batch_size, metrics=['loss'], shard=False).validate()  # every rank makes the model
    metrics = {**{name: name for name in NAMES}, **torchmetrics_objects()}
    return Validate(val, batch_size=batch_size, metrics=metrics, shard=shard).validate()
