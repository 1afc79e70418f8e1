"""Pipeline.plot: variable histories drawn with matplotlib, and a clear error without it."""
import sys

import numpy as np
import pytest

from flowpipe import V, Pipeline
from flowpipe.data import Dataset


def _pipeline():
    pipeline = (Pipeline().init_variable('loss', []).init_variable('acc', []).init_variable('last', None)
                .update(V('loss', mode='a'), 1.0).update(V('last'), 1.0)) << Dataset(10)
    pipeline.run(2, n_epochs=1)
    pipeline.set_variable('loss', [3.0, 2.0, 1.5, 1.0, 0.8])
    pipeline.set_variable('acc', [np.array([0.5, 0.7]), None, np.array([0.9])])
    return pipeline


def test_plot_draws_each_history_and_its_moving_mean():
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    pipeline = _pipeline()
    ax = pipeline.plot('loss', window=2)
    raw, mean = ax.get_lines()
    assert list(raw.get_ydata()) == [3.0, 2.0, 1.5, 1.0, 0.8]
    assert list(mean.get_xdata()) == [1, 2, 3, 4] and list(mean.get_ydata()) == [2.5, 1.75, 1.25, 0.9]
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ['loss (mean of 2)']
    _, given = plt.subplots()
    assert pipeline.plot('loss', 'acc', ax=given, logy=True) is given and given.get_yscale() == 'log'
    acc = given.get_lines()[1].get_ydata()
    assert acc[0] == pytest.approx(0.6) and np.isnan(acc[1]) and acc[2] == pytest.approx(0.9)
    plt.close('all')


def test_plot_rejects_what_is_not_a_history():
    pytest.importorskip('matplotlib')
    pipeline = _pipeline()
    with pytest.raises(TypeError, match=r"variable 'last' to hold a list of numbers.*mode='a'"):
        pipeline.plot('last')
    with pytest.raises(TypeError, match="Expected the names of variables to plot"):
        pipeline.plot()
    with pytest.raises(ValueError, match='Expected window as a positive int'):
        pipeline.plot('loss', window=0)


def test_without_matplotlib_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    monkeypatch.setitem(sys.modules, 'matplotlib.pyplot', None)
    with pytest.raises(ImportError, match=r"Expected matplotlib for plot\(\).*flowpipe\[notebooks\]"):
        _pipeline().plot('loss')
