"""Pipeline.plot: variable histories drawn with matplotlib, saved to a file or shown, and a clear error without it."""
import sys
import warnings

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
    with pytest.warns(UserWarning, match='path='):       # Agg: the figure is shown nowhere
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


def test_plot_saves_to_path_without_a_warning(tmp_path):
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    pipeline = _pipeline()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        ax = pipeline.plot('loss', window=2, path=tmp_path / 'loss.png')
        pipeline.plot('loss', path=str(tmp_path / 'loss.pdf'))
    assert (tmp_path / 'loss.png').read_bytes().startswith(b'\x89PNG') and len(ax.get_lines()) == 2
    assert (tmp_path / 'loss.pdf').read_bytes().startswith(b'%PDF')
    plt.close('all')


def test_plot_in_a_script_warns_and_names_path_only_where_nothing_shows(monkeypatch):
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    pipeline = _pipeline()
    with pytest.warns(UserWarning, match=r"Pipeline.plot\(\) drew a figure that nothing shows.*'agg'.*"
                                         r"path='plot.png'") as caught:
        pipeline.plot('loss')
    assert caught[0].filename == __file__                 # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        _, given = plt.subplots()
        pipeline.plot('loss', ax=given)                   # the caller's own figure: the caller shows it
        monkeypatch.setattr(plt, 'get_backend', lambda: 'module://matplotlib_inline.backend_inline')
        pipeline.plot('loss')                             # a notebook shows it
    plt.close('all')
