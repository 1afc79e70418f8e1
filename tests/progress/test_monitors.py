"""Monitor values: compact formatting and the accepted monitor specs."""
import numpy as np
import pytest
import torch

from flowpipe.progress import Monitor, format_value
from flowpipe.progress.monitors import make_monitors


@pytest.mark.parametrize('value, text', [
    (None, '-'),
    ([], '-'),
    ([1.0, 2.0, 0.000123456], '0.0001235'),
    ((1, 2, 3), '3'),
    (3, '3'),
    (np.int64(12), '12'),
    (True, 'True'),
    (2.0 / 3.0, '0.6667'),
    (123456.789, '1.235e+05'),
    (np.float32(0.5), '0.5'),
    (torch.tensor(1.5), '1.5'),
    (np.array([[2.0]]), '2'),
    (np.zeros((2, 3)), 'array(2, 3)'),
    ('short', 'short'),
    ('x' * 40, 'x' * 23 + '…'),
])
def test_format_value(value, text):
    assert format_value(value) == text


def test_make_monitors_accepts_names_pairs_and_dicts():
    monitors = make_monitors(['loss', ('accuracy', 'acc_history'), {'lr': 'rate'}])
    assert [(m.label, m.source) for m in monitors] == [
        ('loss', 'loss'), ('accuracy', 'acc_history'), ('lr', 'rate')]
    assert make_monitors(None) == []
    assert [m.label for m in make_monitors('loss')] == ['loss']


def test_expression_label_uses_its_name():
    class Expr:
        name = 'acc'

        def get(self, ctx):
            return ctx.variables['acc']

    monitor = Monitor(Expr())
    assert monitor.label == 'acc'
    assert monitor.read({'acc': [0.1, 0.7]}) == [0.1, 0.7]
    assert monitor.read({}) is None


def test_monitor_of_a_bad_type():
    with pytest.raises(TypeError, match=r"V\('loss'\). Received: 1.5"):
        Monitor(1.5)
