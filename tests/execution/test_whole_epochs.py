"""``whole_epochs=True``: every epoch ends with its own batch, short when the batch size does not divide the
dataset, as ``DataLoader(drop_last=False)`` and Keras; epoch ends, per-epoch schedules, resume and ranks follow."""
import numpy as np
import pytest
import torch

from flowpipe import B, Checkpoint, Dataset, DatasetIndex, I, Pipeline, V
from . import checkpoint_cases as cases
from .whole_epochs_jobs import EpochEnds
from ..callbacks.test_resume import _callbacks, _ending
from ..models.test_decay import _epoch_pipeline

pytestmark = pytest.mark.usefixtures('default_dtype')


def _batches(**kwargs):
    return [list(map(int, index.indices)) for index in DatasetIndex(10).gen_batch(**kwargs)]


def test_each_epoch_ends_with_its_own_short_batch_as_dataloader():
    loader = torch.utils.data.DataLoader(range(10), batch_size=4, drop_last=False)
    expected = [batch.tolist() for _ in range(2) for batch in loader]
    assert _batches(batch_size=4, n_epochs=2, whole_epochs=True) == expected == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 2
    assert DatasetIndex(10).n_batches(4, n_epochs=2, whole_epochs=True) == 6
    # the default stays batchflow's: one stream across epochs
    assert _batches(batch_size=4, n_epochs=2)[2] == [8, 9, 0, 1]
    # a batch larger than the dataset is the whole epoch; drop_last still drops each tail
    assert _batches(batch_size=12, n_epochs=2, whole_epochs=True) == [list(range(10))] * 2
    assert _batches(batch_size=4, n_epochs=2, whole_epochs=True, drop_last=True) == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2


def test_shuffled_whole_epochs_hold_each_item_once_per_epoch_and_next_batch_follows():
    batches = _batches(batch_size=4, n_epochs=3, shuffle=7, whole_epochs=True)
    assert [len(batch) for batch in batches] == [4, 4, 2] * 3
    for epoch in range(3):
        assert sorted(sum(batches[3 * epoch:3 * epoch + 3], [])) == list(range(10))
    index = DatasetIndex(10)
    taken = [list(map(int, index.next_batch(4, shuffle=7, n_epochs=3, whole_epochs=True).indices)) for _ in range(9)]
    assert taken == batches
    with pytest.raises(StopIteration):
        index.next_batch(4, shuffle=7, n_epochs=3, whole_epochs=True)


def test_a_run_with_whole_epochs_numbers_epochs_and_calls_epoch_ends_after_each_epoch_s_last_batch():
    ends = EpochEnds()
    pipeline = (Pipeline().init_variable('sizes', []).init_variable('epochs', [])
                .update(V('sizes', mode='a'), B.size).update(V('epochs', mode='a'), I('epoch'))) << Dataset(10)
    pipeline.run(4, n_epochs=3, whole_epochs=True, callbacks=[ends], prefetch=2)
    assert pipeline.v('sizes') == [4, 4, 2] * 3
    assert pipeline.v('epochs') == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert ends.ends == [(0, 3, None), (1, 6, None), (2, 9, None)]


def test_whole_epochs_must_be_a_bool():
    with pytest.raises(TypeError, match="whole_epochs to be True or False"):
        (Pipeline() << Dataset(10)).run(4, whole_epochs='yes')


def test_a_per_epoch_schedule_steps_after_each_epoch_s_short_batch():
    done = _epoch_pipeline({'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch'}).run(4, n_epochs=3, whole_epochs=True)
    assert done.v('lrs') == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125]


def test_a_run_resumed_mid_epoch_ends_as_the_uninterrupted_one(tmp_path):
    run = {'batch_size': 12, 'n_epochs': 8, 'shuffle': 5, 'whole_epochs': True}      # 40 items: 12, 12, 12, 4
    train = cases.pipeline()
    early, best, callbacks = _callbacks(train, tmp_path / 'whole')
    train.run(**run, callbacks=callbacks)
    whole = _ending(train, early, best, tmp_path / 'whole')
    assert len(whole['outcome']['loss']) == 4 * (whole['stop'] + 1 if whole['stop'] is not None else 8)

    cases.TRIGGER.update(at=10, error=cases.Crash(), where='first')     # epoch 2's third batch
    spec = Checkpoint(tmp_path / 'checkpoints', every=3)                # the latest: after batch 9, mid-epoch 2
    try:
        first = cases.pipeline()
        with pytest.raises(cases.Crash):
            first.run(**run, checkpoint=spec, callbacks=_callbacks(first, tmp_path / 'parts')[2])
        first.m('net').close()
    finally:
        cases.TRIGGER.update(at=None, error=None, where='first')
    again = cases.pipeline()
    early, best, callbacks = _callbacks(again, tmp_path / 'parts')
    again.run(**run, checkpoint=spec, resume=True, callbacks=callbacks)
    resumed = _ending(again, early, best, tmp_path / 'parts')
    for key in ('stop', 'files', 'rows', 'lrs', 'score'):
        assert resumed[key] == whole[key], key
    cases.assert_same(resumed['outcome'], whole['outcome'])


def test_resuming_with_other_whole_epochs_is_refused(tmp_path):
    from flowpipe import CheckpointError
    train = cases.pipeline()
    train.run(12, n_iters=2, checkpoint=tmp_path / 'checkpoints', whole_epochs=True)
    train.m('net').close()
    again = cases.pipeline()
    with pytest.raises(CheckpointError, match='whole_epochs'):
        again.run(12, n_iters=2, checkpoint=tmp_path / 'checkpoints', resume=True)


@pytest.mark.slow
def test_two_ranks_split_each_epoch_s_short_batch_and_train_as_one_process():
    from flowpipe.parallel import launch

    from . import whole_epochs_jobs
    alone = whole_epochs_jobs.train()
    ranks = launch(whole_epochs_jobs.train, 2, timeout=240)
    # 23 items in batches of 7: 7, 7, 7, 2 an epoch, each epoch's items once
    sizes = [len(ids) for ids in alone['ids']]
    assert sizes == [7, 7, 7, 2] * 3
    assert [end[:2] for end in alone['ends']] == [(0, 4), (1, 8), (2, 12)]
    for rank, result in enumerate(ranks):
        assert result['rank'] == rank and result['ends'][:2] == alone['ends'][:2]
        for got, expected in zip(result['ends'], alone['ends']):
            assert got[:2] == expected[:2] and got[2] == pytest.approx(expected[2], rel=1e-10)
        for got, expected in zip(result['params'], alone['params']):
            np.testing.assert_allclose(got, expected, rtol=1e-9)
    # the short batch of 2 is split like any other: one item each
    for whole, first, second in zip(alone['ids'], ranks[0]['ids'], ranks[1]['ids']):
        assert np.array_equal(np.concatenate([first, second]), whole)
        assert len(first) - len(second) in (0, 1)
