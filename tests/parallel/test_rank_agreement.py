"""Ranks of a launched job that differ in a model config value (the learning rate, the sharding layout) are refused
at run start, on every rank, naming the key, the values and the ranks: before any collective that could hang."""
import pytest

from flowpipe.parallel import launch

from . import sharded_jobs

pytestmark = pytest.mark.slow

ADAM = {'name': 'Adam', 'lr': 0.05}


@pytest.mark.parametrize('per_rank, message', [
    ([{'overrides': {'optimizer': ADAM}}, {'overrides': {'optimizer': {**ADAM, 'lr': 0.1}}}],
     "model 'net' optimizer/lr=0.05 on rank 0 vs model 'net' optimizer/lr=0.1 on rank 1"),
    ([{'sharding': 'full'}, {'sharding': 'grad_op'}],
     "model 'net' sharding='full' on rank 0 vs model 'net' sharding='grad_op' on rank 1"),
    ([{'sharding': 'full'}, {'sharding': None}],
     "model 'net' sharding='full' on rank 0 vs model 'net' sharding=None on rank 1")])
def test_ranks_with_another_model_config_value_are_refused_on_every_rank(per_rank, message):
    per_rank = [{'batch_size': 7, **kwargs} for kwargs in per_rank]
    errors = launch(sharded_jobs.train_refused, 2, args=(per_rank,), timeout=120)
    assert len(errors) == 2
    for error in errors:
        assert error is not None and error.startswith('Expected every rank of the distributed job to run the same')
        assert message in error
