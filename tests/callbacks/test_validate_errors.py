"""Validate's mistakes are named before the first epoch's work is lost, or at the metric that made them: no
pipeline, no batch size, a metric that returns no number."""
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.callbacks import Validate

DATA = Dataset(8, preloaded={'x': np.arange(8.0)})


def _train():
    return (Pipeline().init_variable('batches', 0).update(V('batches'), V('batches') + 1)) << DATA


def _validation():
    return (Pipeline().init_variable('seen', []).update(V('seen', mode='e'), B.x)) << DATA


@pytest.mark.parametrize('pipeline', [None, 'val', _validation])
def test_anything_but_a_pipeline_is_refused_when_made(pipeline):
    with pytest.raises(TypeError, match=r"Expected the validation pipeline.*Received: pipeline="):
        Validate(pipeline, batch_size=4, metrics={'n': len})


@pytest.mark.parametrize('batch_size', [0, 2.5, True])
def test_a_bad_batch_size_is_refused_when_made(batch_size):
    with pytest.raises(ValueError, match=rf"Expected batch_size as an int >= 1\. Received: batch_size={batch_size}"):
        Validate(_validation(), batch_size=batch_size, metrics={'n': len})


def test_no_batch_size_is_refused_before_the_first_batch():
    train = _train()
    with pytest.raises(ValueError, match=r"Expected the validation batch size\. Received: batch_size=None.*"
                                         r"Validate\(pipeline, batch_size=N"):
        train.run(4, n_epochs=1, callbacks=[Validate(_validation(), metrics={'n': lambda p: 1.0})])
    assert train.v('batches') == 0
    stored = _validation().run(4, lazy=True)                       # a batch size stored with the pipeline
    train.run(4, n_epochs=1, callbacks=[Validate(stored, metrics={'n': lambda p: float(len(p.v('seen')))})])
    assert train.v('batches') == 2


@pytest.mark.parametrize('value, kind', [('0.9', 'str'), (None, 'NoneType'), (np.array([0.5, 0.7]), 'ndarray'),
                                         ([0.5], 'list')])
def test_a_metric_returning_no_number_is_named(value, kind):
    with pytest.raises(TypeError, match=rf"Expected the metric 'accuracy' to return a number.*Received: {kind}"):
        _train().run(4, n_epochs=1, callbacks=[Validate(_validation(), batch_size=4,
                                                        metrics={'accuracy': lambda p: value})])


@pytest.mark.parametrize('value', [0.5, np.float32(0.5), np.array(0.5), np.array([0.5]), torch.tensor(0.5), 1])
def test_a_number_of_any_kind_is_a_metric(value):
    validate = Validate(_validation(), batch_size=4, metrics={'accuracy': lambda p: value})
    _train().run(4, n_epochs=1, callbacks=[validate])
    assert validate.values == {'val/accuracy': float(value.item() if hasattr(value, 'item') else value)}
