"""Rank-0 output: ``print0`` and ``is_main``, and the callbacks' bars and warnings shown by rank 0 only."""
import warnings

import pytest

import flowpipe
from flowpipe import print0
from flowpipe.callbacks.base import _warn_once


def test_print0_prints_outside_a_distributed_job(capsys, monkeypatch):
    monkeypatch.delenv('WORLD_SIZE', raising=False)
    print0('hello', 3, sep='-')
    assert capsys.readouterr().out == 'hello-3\n' and flowpipe.is_main()


def test_print0_and_warnings_stay_silent_on_another_rank_before_the_group_starts(capsys, monkeypatch):
    # torchrun sets these before the script runs: print0 holds from its first line
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('RANK', '1')
    assert not flowpipe.is_main()
    print0('hidden')
    assert capsys.readouterr().out == ''

    class Owner:
        pass
    owner = Owner()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _warn_once(owner, '_warned', 'a message every rank would repeat')
    assert caught == [] and owner._warned             # rank 1 counts it as given: never later either
    monkeypatch.setenv('RANK', '0')
    print0('shown')
    assert capsys.readouterr().out == 'shown\n'


@pytest.mark.slow
def test_only_rank_0_prints_shows_bars_and_warns_in_a_job_of_two():
    from flowpipe.parallel import launch

    from . import rank0_jobs
    ranks = launch(rank0_jobs.train_and_capture, 2, timeout=240)
    first, second = ranks
    lines = first['out'].splitlines()              # rank 0's own lines and its epoch summaries, above its bar
    assert lines[:2] == ['printed by rank 0'] * 2 and lines[-1] == 'done' and len(lines) == 5
    assert lines[2].startswith('epoch 1/2 – loss ') and lines[3].startswith('epoch 2/2 – loss ')
    assert lines[3].endswith('– val/loss nan')
    assert second['out'] == 'printed by rank 1\n'
    assert '100%' in first['err'] and second['err'] == ''          # the run's and the validation's bars
    assert len([message for message in first['warnings'] if 'EarlyStopping skips epoch' in message]) == 1
    assert not [message for message in second['warnings'] if 'EarlyStopping' in message]
