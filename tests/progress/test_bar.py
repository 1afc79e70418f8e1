"""make_progress: every bar form, monitors, the ready counter, bad inputs."""
import importlib.util
import io
import sys
import types

import numpy as np
import pytest
import torch
import tqdm

from flowpipe.progress import NullProgress, Progress, in_notebook, make_progress
from flowpipe.progress import bar as bar_module


class _FakeExpression:
    """Stands in for V('name'): evaluated against a context's variables."""

    def __init__(self, name):
        self.name = name

    def get(self, ctx):
        return ctx.variables[self.name]


class _RecordingBar:
    def __init__(self):
        self.calls = []
        self.total = 7

    def update(self, n=1):
        self.calls.append(('update', n))

    def set_postfix(self, postfix, refresh=True):
        self.calls.append(('postfix', dict(postfix)))

    def close(self):
        self.calls.append(('close',))


def _text_progress(total=5, variables=None, **options):
    stream = io.StringIO()
    progress = make_progress({'bar': 't', 'file': stream, 'mininterval': 0, **options}, total, variables)
    return progress, stream


@pytest.mark.parametrize('bar', [False, None])
def test_no_bar_is_a_silent_progress(bar, capsys):
    progress = make_progress(bar, 10)
    assert isinstance(progress, NullProgress) and not isinstance(progress, Progress)
    progress.update(ready=3)
    progress.close()
    with progress:
        pass
    assert capsys.readouterr().err == ''


@pytest.mark.parametrize('bar', [True, 't', 'a', 'n'])
def test_text_bar_with_known_total_outside_a_notebook(bar):
    assert not in_notebook()
    progress = make_progress({'bar': bar, 'file': io.StringIO()}, 12)
    assert isinstance(progress.bar, tqdm.tqdm)
    assert progress.total == 12
    progress.close()


def test_open_ended_run_has_no_total():
    progress, stream = _text_progress(total=None)
    progress.update()
    progress.close()
    assert progress.total is None
    assert '1it' in stream.getvalue()


def test_monitors_show_the_last_value_and_ready_counter():
    variables = {'loss_history': [0.9, 0.123456], 'acc': np.float32(0.5)}
    progress, stream = _text_progress(variables=variables, monitors=['loss_history', _FakeExpression('acc')],
                                      desc='training')
    progress.update(ready=2)
    progress.close()
    text = stream.getvalue()
    assert 'training' in text
    assert 'loss_history=0.1235' in text
    assert 'acc=0.5' in text
    assert 'ready=2' in text
    assert progress.n == 1


def test_monitor_of_a_variable_not_created_yet_shows_a_dash():
    variables = {}
    progress, stream = _text_progress(variables=variables, monitors=['loss', _FakeExpression('acc')])
    progress.update()
    variables['loss'] = [1.5]
    progress.update()
    progress.close()
    text = stream.getvalue()
    assert 'loss=-' in text and 'acc=-' in text and 'loss=1.5' in text


def test_monitors_with_labels():
    variables = {'loss_history': [3.0]}
    progress, stream = _text_progress(variables=variables, monitors={'loss': 'loss_history'})
    progress.update()
    progress.close()
    assert 'loss=3' in stream.getvalue()


def test_ready_made_tqdm_like_object_is_driven():
    fake = _RecordingBar()
    progress = make_progress({'bar': fake, 'monitors': ['x']}, 99, {'x': 4})
    progress.update(2, ready=1)
    progress.close()
    progress.close()
    assert fake.calls == [('postfix', {'x': '4', 'ready': '1'}), ('update', 2), ('close',)]
    assert progress.total == 7


def test_tqdm_class_is_instantiated_with_the_total():
    class Quiet(tqdm.tqdm):
        def __init__(self, **kwargs):
            super().__init__(file=io.StringIO(), **kwargs)

    progress = make_progress(Quiet, 4)
    assert isinstance(progress.bar, Quiet) and progress.total == 4
    progress.close()


def test_bar_is_refreshed_only_by_the_caller():
    progress, _ = _text_progress()
    assert progress.bar.monitor_interval == 0     # no tqdm monitor thread touches it
    progress.close()


def test_notebook_bar_chosen_inside_a_kernel(monkeypatch):
    from tqdm.notebook import tqdm as notebook_tqdm

    monkeypatch.setattr(bar_module, 'in_notebook', lambda: True)
    for kind in ('n', True, 'a'):
        chosen = bar_module._bar_class(kind)
        assert issubclass(chosen, notebook_tqdm) and chosen.monitor_interval == 0
    assert not issubclass(bar_module._bar_class('t'), notebook_tqdm)


def test_write_prints_without_breaking_the_bar(capsys):
    progress, _ = _text_progress()
    progress.write('hello')
    progress.close()
    assert capsys.readouterr().out == 'hello\n'



@pytest.mark.parametrize('bar, error, text', [
    ('x', ValueError, "bar='x'"),
    (3, TypeError, 'bar=3'),
    ({'bar': 'fancy'}, ValueError, "bar='fancy'"),
])
def test_bad_bar_names_the_accepted_forms(bar, error, text):
    with pytest.raises(error, match=text) as info:
        make_progress(bar, 5)
    assert "'t'" in str(info.value) and 'tqdm-like' in str(info.value)


def test_bad_monitor_is_a_type_error():
    with pytest.raises(TypeError, match='monitor.*Received: 3'):
        make_progress({'bar': 't', 'monitors': [3]}, 5)


def test_torch_values_are_formatted():
    progress, stream = _text_progress(variables={'loss': torch.tensor(0.25)}, monitors=['loss'])
    progress.update()
    progress.close()
    assert 'loss=0.25' in stream.getvalue()


def _fake_kernel(monkeypatch, widgets: bool):
    shell = types.SimpleNamespace(config={'IPKernelApp': {}})
    monkeypatch.setitem(sys.modules, 'IPython', types.SimpleNamespace(get_ipython=lambda: shell))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *args: (object() if widgets else None) if name == 'ipywidgets'
                        else real_find_spec(name, *args))


def test_kernel_without_ipywidgets_falls_back_to_text(monkeypatch):
    _fake_kernel(monkeypatch, widgets=False)
    assert not in_notebook()
    progress = make_progress({'bar': 'n', 'file': io.StringIO()}, 3)
    assert type(progress.bar) is bar_module._TextBar
    progress.close()


def test_kernel_with_ipywidgets_is_a_notebook(monkeypatch):
    _fake_kernel(monkeypatch, widgets=True)
    assert in_notebook()
