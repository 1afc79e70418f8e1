"""Built-in metrics and torchmetrics objects in a job of 2 gloo processes: one process's values, the uneven last
batch (10, 10 and 3 items: rank 0 validates 20 items, rank 1 three) included."""
import pytest

from flowpipe.parallel import launch

from . import metric_jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]


def test_built_in_metrics_on_two_ranks_are_one_process_values():
    alone = metric_jobs.validate_named()
    assert set(alone) >= {f'val/{name}' for name in metric_jobs.NAMES}
    for shard in (True, False):
        ranks = launch(metric_jobs.validate_named, 2, args=(shard,), timeout=240)
        for values in ranks:
            for name in metric_jobs.NAMES:
                assert values[f'val/{name}'] == alone[f'val/{name}'], (shard, name)


def test_torchmetrics_objects_sync_across_ranks_to_one_process_values():
    pytest.importorskip('torchmetrics')
    alone = metric_jobs.validate_named()
    assert alone['val/tm_accuracy'] == pytest.approx(alone['val/accuracy'], rel=1e-6)
    assert alone['val/tm_f1'] == pytest.approx(alone['val/f1'], rel=1e-6)
    for shard in (True, False):
        for values in launch(metric_jobs.validate_named, 2, args=(shard,), timeout=240):
            assert values['val/tm_accuracy'] == alone['val/tm_accuracy'], shard
            assert values['val/tm_f1'] == pytest.approx(alone['val/tm_f1'], rel=1e-6), shard


def test_a_rank_without_a_validation_batch_still_takes_part_in_the_sync():
    pytest.importorskip('torchmetrics')
    alone = metric_jobs.validate_named(batch_size=30)           # one batch: rank 1 validates none
    for values in launch(metric_jobs.validate_named, 2, args=(True, 30), timeout=240):
        assert values == alone
