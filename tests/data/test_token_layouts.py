"""Random token windows are drawn per item: one device, micro-batches, replicas, prefetch and 2 gloo ranks train
on the same tokens (each rank on its shard's rows of the global batch) and end with the same model; a 2-rank run
stopped and resumed in one process draws the windows the uninterrupted run drew."""
import shutil

import numpy as np
import pytest
import torch

from flowpipe.parallel import launch

from . import token_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 300


def _rel(got, want):
    return max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, want))


def _tolerance():
    return 1e-10 if torch.get_default_dtype() == torch.float64 else 1e-5


@pytest.fixture(scope='module')
def reference(default_dtype):
    return jobs.train()


@pytest.fixture(scope='module')
def ranks(tmp_path_factory, default_dtype):
    root = tmp_path_factory.mktemp('tokens')
    return root, launch(jobs.ranks_runs, 2, args=(str(root),), timeout=TIMEOUT)


def _same_tokens(result, reference, first=0):
    assert len(result['inputs']) == len(reference['inputs'][first:])
    for key in ('inputs', 'targets'):
        for got, want in zip(result[key], reference[key][first:]):
            np.testing.assert_array_equal(got, want)


def test_the_windows_differ_from_batch_to_batch_and_item_to_item(reference):
    inputs = np.concatenate(reference['inputs'])
    assert len(inputs) == jobs.BATCH * jobs.ITERS
    assert len({row.tobytes() for row in inputs}) > 0.8 * len(inputs)      # 35 draws of 394 starts: a few repeat


@pytest.mark.parametrize('layout', [{'microbatch': 2}, {'device': 'CPU:0x2'}, {'device': 'CPU:0x2', 'microbatch': 2},
                                    {'prefetch': 2}])
def test_every_layout_of_one_process_trains_on_the_same_tokens(reference, layout):
    result = jobs.train(**layout)
    _same_tokens(result, reference)
    assert _rel(result['params'], reference['params']) < _tolerance()


def test_each_rank_trains_on_its_shard_of_the_windows_of_one_process(ranks, reference):
    _, results = ranks
    whole = [result['whole'] for result in results]
    joined = {key: [np.concatenate(parts) for parts in zip(*(result[key] for result in whole))]
              for key in ('inputs', 'targets')}
    _same_tokens(joined, reference)
    assert [len(result['inputs'][0]) for result in whole] == [3, 2]
    for result in whole:
        assert result['world'] == 2 and _rel(result['params'], reference['params']) < _tolerance()


def test_a_2_rank_checkpoint_resumes_in_one_process_on_the_same_windows(ranks, reference, tmp_path):
    root, results = ranks
    assert [len(result['stopped']['inputs']) for result in results] == [jobs.STOP_AT] * 2
    shutil.copytree(root, tmp_path / 'copy')
    result = jobs.train(folder=str(tmp_path / 'copy' / 'stopped'))
    assert result['world'] == 1
    later = jobs.ITERS - jobs.STOP_AT         # the batches after the stop (the variables hold the ranks' before)
    _same_tokens({key: result[key][-later:] for key in ('inputs', 'targets')}, reference, first=jobs.STOP_AT)
    assert _rel(result['params'], reference['params']) < _tolerance()
