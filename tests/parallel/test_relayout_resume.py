"""A run checkpoint written by 2 gloo ranks resumes in one process and on 3 ranks — gathered into the file, or a
sharded model's shards (DCP) — and ends with the parameters of the uninterrupted run (float64, 1e-10 relative);
rank 0 holds the per-rank lists merged, every item once; a dropout model under torch's generators and a variable
overwritten per rank are refused, named; dropout drawn by item (the default) continues exactly."""
import shutil

import numpy as np
import pytest

from flowpipe import CheckpointError
from flowpipe.parallel import launch

from . import relayout_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 300
RESUMED = ['plain', 'sharded']


def _rel(got, want):
    return max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, want))


@pytest.fixture(scope='module')
def reference(default_dtype):
    return jobs.train()


@pytest.fixture(scope='module')
def written(tmp_path_factory, default_dtype):
    root = tmp_path_factory.mktemp('written')
    return root, launch(jobs.write_all, 2, args=(str(root),), timeout=TIMEOUT)


def _copy(written, tmp_path):
    shutil.copytree(written[0], tmp_path / 'copy')
    return tmp_path / 'copy'


def _assert_continues(result, reference, before):
    """The uninterrupted run's parameters and losses; the lists written before the stop by every rank in rank
    order, then this rank's items of the later batches."""
    assert _rel(result['params'], reference['params']) < 1e-10
    np.testing.assert_allclose(result['loss'], reference['loss'], rtol=1e-10)
    merged = [ids for rank in before for ids in rank['ids']]
    assert len(result['ids']) == len(merged) + len(reference['ids']) - jobs.STOP_AT
    for got, want in zip(result['ids'], merged):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.concatenate(result['draws'][:len(merged)]),
                                  np.concatenate([draws for rank in before for draws in rank['draws']]))


@pytest.fixture(scope='module')
def by_item(default_dtype):
    return jobs.train(variant='by_item')


@pytest.mark.parametrize('name', RESUMED + ['by_item'])
def test_a_checkpoint_of_2_ranks_resumes_in_one_process(written, reference, by_item, name, tmp_path):
    kwargs = {'sharding': 'full', 'sharded': True} if name == 'sharded' else {'variant': name}
    result = jobs.train(str(_copy(written, tmp_path) / name), **kwargs)
    reference = by_item if name == 'by_item' else reference
    before = [rank[name] for rank in written[1]]
    assert [len(rank['ids']) for rank in before] == [jobs.STOP_AT] * 2
    _assert_continues(result, reference, before)
    for got, want in zip(result['ids'][2 * jobs.STOP_AT:], reference['ids'][jobs.STOP_AT:]):
        np.testing.assert_array_equal(got, want)          # one process: the later batches whole


@pytest.fixture(scope='module')
def on_three(written, tmp_path_factory):
    copy = tmp_path_factory.mktemp('three') / 'copy'
    shutil.copytree(written[0], copy)
    return launch(jobs.resume_all, 3, args=(str(copy),), timeout=TIMEOUT)


@pytest.mark.parametrize('name', RESUMED)
def test_a_checkpoint_of_2_ranks_resumes_on_3(written, reference, on_three, name):
    before = [rank[name] for rank in written[1]]
    _assert_continues(on_three[0][name], reference, before)
    for rank in (1, 2):          # the other ranks start their lists afresh
        result = on_three[rank][name]
        assert _rel(result['params'], reference['params']) < 1e-10 and result['world'] == 3
        assert len(result['ids']) == len(reference['ids']) - jobs.STOP_AT
    for batch, whole in enumerate(reference['ids'][jobs.STOP_AT:]):        # every later item once, on its rank
        parts = [on_three[0][name]['ids'][2 * jobs.STOP_AT + batch]] + [on_three[rank][name]['ids'][batch]
                                                                         for rank in (1, 2)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_dropout_under_torch_randomness_is_refused_in_one_process(written, tmp_path):
    with pytest.raises(CheckpointError, match=r"model 'net' with 'randomness': 'torch' and dropout layers '2' "
                                              r"\(Dropout p=0\.25\); the checkpoint was written on 2 ranks"):
        jobs.train(str(_copy(written, tmp_path) / 'dropout'), variant='dropout')


def test_a_variable_overwritten_per_rank_is_refused_in_one_process(written, tmp_path):
    with pytest.raises(CheckpointError, match=r"Received: 'last' differing between the checkpoint's ranks"):
        jobs.train(str(_copy(written, tmp_path) / 'last'), variant='last')
