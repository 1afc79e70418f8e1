"""run(deterministic=...): torch's deterministic switches on while the run's batches are processed (and while a
gen_batch loop is open), everything put back afterwards, whatever the run did."""
import os
import warnings

import pytest
import torch

from flowpipe import deterministic
from flowpipe.execution.deterministic import CUBLAS_VARIABLE, CUBLAS_WORKSPACE
from flowpipe.pipeline import Pipeline

from tests.pipeline.helpers import make_dataset


def switches():
    cudnn = torch.backends.cudnn
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            cudnn.deterministic, cudnn.benchmark, os.environ.get(CUBLAS_VARIABLE))


ON = (True, False, True, False, CUBLAS_WORKSPACE)


@pytest.fixture(autouse=True)
def user_settings(monkeypatch):
    """A user's settings that differ from the deterministic ones (benchmark on), put back after the test."""
    monkeypatch.delenv(CUBLAS_VARIABLE, raising=False)
    before = switches()
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = False, True
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


USER = (False, False, False, True, None)


def recording_pipeline(seen, fail_at=None):
    def record(size):
        seen.append(switches())
        if len(seen) == fail_at:
            raise RuntimeError('the action failed')
    return Pipeline().call(record, 3) << make_dataset(9)


@pytest.mark.parametrize('mode, inside', [(True, ON), ('warn', (True, True) + ON[2:]), (False, USER)])
def test_a_run_turns_the_switches_on_for_its_batches_and_restores_them(mode, inside):
    seen = []
    recording_pipeline(seen).run(3, n_epochs=1, prefetch=2, deterministic=mode)
    assert seen == [inside] * 3
    assert switches() == USER


def test_a_failing_run_restores_them_too():
    seen = []
    with pytest.raises(RuntimeError, match='the action failed'):
        recording_pipeline(seen, fail_at=2).run(3, n_epochs=1, deterministic=True)
    assert seen == [ON, ON] and switches() == USER


def test_a_lazy_run_keeps_the_option_and_a_gen_batch_loop_holds_the_switches_until_it_ends():
    seen = []
    lazy = recording_pipeline(seen).run(3, n_epochs=1, deterministic=True, lazy=True)
    lazy.run()
    assert seen == [ON] * 3 and switches() == USER
    loop = recording_pipeline(seen).gen_batch(3, n_epochs=1, deterministic=True)
    next(loop)
    assert switches() == ON                 # between two batches of an open loop
    loop.close()
    assert switches() == USER


def test_a_workspace_variable_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(CUBLAS_VARIABLE, ':16:8')
    with deterministic():
        assert os.environ[CUBLAS_VARIABLE] == ':16:8' and torch.are_deterministic_algorithms_enabled()
    assert os.environ[CUBLAS_VARIABLE] == ':16:8' and switches()[:4] == USER[:4]


def test_setting_the_workspace_after_cuda_started_warns(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_initialized', lambda: True)
    with pytest.warns(RuntimeWarning, match=f'Set {CUBLAS_VARIABLE}=:4096:8 in the environment'):
        with deterministic(True):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        monkeypatch.setenv(CUBLAS_VARIABLE, CUBLAS_WORKSPACE)
        with deterministic(True):
            pass


@pytest.mark.parametrize('value, error', [('yes', ValueError), (1, TypeError), (0.5, TypeError)])
def test_other_values_are_refused_before_any_batch(value, error):
    seen = []
    message = rf"Expected deterministic to be False, True or 'warn'. Received: deterministic={value!r}"
    with pytest.raises(error, match=message):
        recording_pipeline(seen).run(3, deterministic=value)
    with pytest.raises(error, match=message), deterministic(value):
        pass
    assert seen == [] and switches() == USER
