"""``R(...)`` with a size that starts with the batch's size draws one row per item: each item's rows are those of
one process on every layout — micro-batches, replicas, prefetch, 2 gloo ranks (each rank holding a shard, the last
batch of one item on rank 0, none on rank 1), and a 2-rank checkpoint resumed in one process; a draw sized from the batch that is
not per item is said once per run on the ranks. The rows are numpy's float64 whatever torch's default dtype: the
models trained on the noisy inputs, which depend on it, agree to float reordering."""
import shutil

import numpy as np
import pytest
import torch

from flowpipe.parallel import launch

from . import item_rows_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 300


def _rel(got, want):
    return max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got, want))


def _tolerance():
    return 1e-10 if torch.get_default_dtype() == torch.float64 else 1e-4


@pytest.fixture(scope='module')
def reference(default_dtype):
    return jobs.train()


@pytest.fixture(scope='module')
def ranks(tmp_path_factory, default_dtype):
    root = tmp_path_factory.mktemp('rows')
    return root, launch(jobs.ranks_runs, 2, args=(str(root),), timeout=TIMEOUT)


def _assert_rows(ids, rows, pairs, reference, first=0):
    """Batches ``first:`` of the reference: the same items, each with its rows, bit for bit."""
    for got_ids, got_rows, got_pairs, want_ids, want_rows, want_pairs in zip(
            ids, rows, pairs, reference['ids'][first:], reference['rows'][first:], reference['pairs'][first:]):
        np.testing.assert_array_equal(got_ids, want_ids)
        assert got_rows.dtype == np.float64 and np.array_equal(got_rows, want_rows)
        assert got_pairs.shape == (len(want_ids), 3) and np.array_equal(got_pairs, want_pairs)


@pytest.mark.parametrize('layout', [{'microbatch': 2}, {'device': 'CPU:0x2'}, {'device': 'CPU:0x2', 'microbatch': 1},
                                    {'prefetch': 2}])
def test_the_rows_are_those_of_one_process_on_every_layout_of_one_process(reference, layout):
    result = jobs.train(**layout)
    _assert_rows(result['ids'], result['rows'], result['pairs'], reference)
    assert len(result['ids']) == len(reference['ids']) and result['warnings'] == []
    assert _rel(result['params'], reference['params']) < _tolerance()


def test_each_rank_draws_the_rows_one_process_draws_for_its_items(ranks, reference):
    _, results = ranks
    assert [len(result['whole']['ids'][-1]) for result in results] == [1, 0]         # the last batch: one item
    joined = {key: [np.concatenate(parts) for parts in zip(*(result['whole'][key] for result in results))]
              for key in ('ids', 'rows', 'pairs')}
    _assert_rows(joined['ids'], joined['rows'], joined['pairs'], reference)
    for result in results:
        assert result['whole']['warnings'] == []
        assert _rel(result['whole']['params'], reference['params']) < _tolerance()


def test_a_draw_sized_from_the_batch_but_not_per_item_is_said_once_per_run_on_the_ranks(ranks):
    _, results = ranks
    for result in results:
        said = result['doubled']['warnings']
        assert len(said) == 1, said
        assert "R('uniform', size=B('size') * 2)" in said[0] and 'update' in said[0]
        assert 'depend on the number of ranks' in said[0] and 'size=B.x.shape' in said[0]
    alone = jobs.train(extra=jobs.R('uniform', size=jobs.B.size * 2))
    assert alone['warnings'] == []        # one process: the batch is whole, nothing depends on a layout


def test_a_checkpoint_of_2_ranks_resumes_in_one_process_with_the_same_rows(ranks, reference, tmp_path):
    root, results = ranks
    assert [len(result['stopped']['ids']) for result in results] == [jobs.STOP_AT] * 2
    shutil.copytree(root, tmp_path / 'copy')
    result = jobs.resumed(str(tmp_path / 'copy'))
    later = len(reference['ids']) - jobs.STOP_AT
    _assert_rows(result['ids'][-later:], result['rows'][-later:], result['pairs'][-later:], reference,
                 first=jobs.STOP_AT)
    assert _rel(result['params'], reference['params']) < _tolerance()
