"""Sharded data parallel (FSDP2) on 2, 3 and 4 gloo processes: float64 Adam parameters equal one process on the
whole batch, with micro-batches, an uneven last batch, a global batch smaller than the world, clipping by the
global norm, and a 2 x 2 hybrid mesh (SPEC §9)."""
import os

import numpy as np
import pytest
from torch import nn

from flowpipe.parallel import launch

from . import sharded_jobs

# several processes each: CI or FLOWPIPE_SLOW=1; exact under a float32 and a float64 default dtype
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]

# 23 items: batches of 7 end with one of 2 (uneven, and smaller than 3 ranks: one rank idle)
RUNS = [('full', {'batch_size': 7, 'sharding': 'full'}),
        ('full_micro', {'batch_size': 7, 'microbatch': 2, 'sharding': 'full',
                        'overrides': {'sharding_offload': True}}),      # on the CPU: accepted, changes nothing
        ('grad_op', {'batch_size': 7, 'sharding': 'grad_op'}),
        ('grad_op_micro', {'batch_size': 5, 'microbatch': 2, 'sharding': 'grad_op'}),
        ('small', {'batch_size': 2, 'n_epochs': 1, 'sharding': 'full', 'overrides': {'sharding_units': nn.Linear}}),
        ('units', {'batch_size': 5, 'n_epochs': 1, 'sharding': 'grad_op', 'overrides': {'sharding_units': 30}}),
        ('clip', {'batch_size': 7, 'microbatch': 3, 'sharding': 'full',
                  'overrides': {'clip_grad_norm': 0.05, 'clip_grad_value': 0.2}}),
        ('sam', {'batch_size': 7, 'microbatch': 2, 'sharding': 'full', 'overrides': {'sam_rho': 0.05}}),
        ('sam_one_norm', {'batch_size': 5, 'sharding': 'grad_op',
                          'overrides': {'sam_rho': 0.05, 'sam_individual_norm': False}})]
HYBRID = [('hybrid', {'batch_size': 7, 'sharding': 'hybrid', 'overrides': {'sharding_group': 2}}),
          ('hybrid_micro', {'batch_size': 3, 'microbatch': 2, 'n_epochs': 1, 'sharding': 'hybrid',
                            'overrides': {'sharding_group': 2, 'clip_grad_norm': 0.05}})]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _rel(a, b):
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b))


def _reference(runs):
    """One process on whole batches: the same config without sharding."""
    def alone(kwargs):
        overrides = {key: value for key, value in kwargs.get('overrides', {}).items() if not key.startswith('sharding')}
        return {**kwargs, 'sharding': None, 'overrides': overrides}
    return sharded_jobs.scenarios([(name, alone(kwargs)) for name, kwargs in runs])


@pytest.fixture(scope='module')
def reference(default_dtype):
    return _reference(RUNS)


@pytest.fixture(scope='module', params=[2, 3])
def launched(request, default_dtype):
    return request.param, launch(sharded_jobs.scenarios, request.param, args=(RUNS,), timeout=TIMEOUT)


@pytest.mark.parametrize('name', [name for name, _ in RUNS])
def test_parameters_equal_one_process_on_the_whole_batch(launched, reference, name):
    world, ranks = launched
    for result in ranks:
        assert result[name]['world'] == world
        assert _rel(result[name]['params'], reference[name]['params']) < 1e-10
        np.testing.assert_allclose(result[name]['loss'], reference[name]['loss'], rtol=1e-10)


def test_the_plan_says_sharded_the_mesh_and_the_bytes_each_rank_holds(launched):
    world, ranks = launched
    for rank, result in enumerate(ranks):
        text = result['full']['plan']
        assert f'sharded data parallel, rank {rank} of {world}' in text
        assert "sharding 'full': parameters, gradients and optimizer state sharded (ZeRO-3)" in text
        assert f'mesh: 1-D, {world} ranks, each holds 1/{world} of every unit' in text
        assert 'this rank holds: parameters ' in text and 'optimizer state ' in text
        assert "sharding 'grad_op'" in result['grad_op']['plan']


def test_hybrid_on_a_2_by_2_mesh_equals_one_process():
    reference = _reference(HYBRID)
    for result in launch(sharded_jobs.scenarios, 4, args=(HYBRID,), timeout=TIMEOUT):
        for name, _ in HYBRID:
            assert _rel(result[name]['params'], reference[name]['params']) < 1e-10
        assert 'mesh: 2-D, 2 replicas x 2 shards' in result['hybrid']['plan']


@pytest.mark.parametrize('world', [3])
def test_predictions_and_an_idle_ranks_outputs_under_sharding_are_one_process_s(world):
    alone = sharded_jobs.train_and_predict()
    for result in launch(sharded_jobs.train_and_predict, world, args=('full',), timeout=TIMEOUT):
        np.testing.assert_allclose(np.concatenate(result['gathered']), np.concatenate(alone['gathered']), rtol=1e-10)
        np.testing.assert_allclose(result['loss'], alone['loss'], rtol=1e-10)
        assert result['shapes'][-1] in ((1, 3), (0, 3))       # 11 items: the last global batch of 1


def test_every_rank_skips_the_step_whose_loss_is_not_finite_on_one_rank():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        skipped, params = sharded_jobs.skip_poisoned_batch()
    assert skipped == 1 and all(np.isfinite(p).all() for p in params)
    for rank_skipped, rank_params in launch(sharded_jobs.skip_poisoned_batch, 2, args=('full',), timeout=TIMEOUT):
        assert rank_skipped == 1
        assert _rel(rank_params, params) < 1e-10


@pytest.mark.parametrize('microbatch', [None, 2])
def test_idle_ranks_leave_batchnorm_statistics_as_the_rank_that_saw_the_batch_computed_them(microbatch):
    stats, params = sharded_jobs.batchnorm_idle(microbatch=microbatch)
    for rank_stats, rank_params in launch(sharded_jobs.batchnorm_idle, 2, args=('full', microbatch),
                                          timeout=TIMEOUT):
        assert _rel(rank_stats, stats) < 1e-12
        assert _rel(rank_params, params) < 1e-10


def test_a_non_finite_gradient_in_one_ranks_shard_is_seen_by_every_rank():
    assert launch(sharded_jobs.nonfinite_on_one_shard, 2, timeout=TIMEOUT) == [(False, True), (False, True)]


def test_weight_averaging_of_a_sharded_model_is_refused_with_the_fix():
    for message in launch(sharded_jobs.averaging_refused, 2, timeout=TIMEOUT):
        assert "'weights_averaging' without 'sharding'" in message and "'sharding': None" in message


def test_an_export_of_a_sharded_model_is_refused_on_every_rank_and_its_own_file_saves(tmp_path):
    path = str(tmp_path / 'net.model')
    for message in launch(sharded_jobs.export_refused, 2, args=(path,), timeout=TIMEOUT):
        assert 'Expected a whole network to export' in message and 'TorchModel.from_file(path)' in message
    assert os.path.exists(path) and not os.path.exists(path + '.export')


def test_a_sharded_model_validated_in_blocks_of_batches_is_refused_on_every_rank_and_validates_whole():
    for message in launch(sharded_jobs.validate_sharded, 2, args=(True,), timeout=TIMEOUT):
        assert 'Expected Validate(..., shard=False) for a sharded model' in message
    losses = launch(sharded_jobs.validate_sharded, 2, args=(False,), timeout=TIMEOUT)
    assert losses[0] == losses[1] and np.isfinite(losses[0])


def test_tied_weights_in_different_units_are_refused_on_every_rank_with_the_fix_and_one_unit_trains():
    from flowpipe import LaunchError
    with pytest.raises(LaunchError, match='Expected every parameter in one sharding unit') as info:
        launch(sharded_jobs.train_tied, 2, timeout=TIMEOUT, env={'FLOWPIPE_DIST_TIMEOUT': 60})
    assert info.value.kind == 'ValueError'
    assert 'tied parameters embed.weight, out.weight' in str(info.value) and 'sharding_units=None' in str(info.value)
    ranks = launch(sharded_jobs.train_tied, 2, args=(10 ** 9,), timeout=TIMEOUT)    # no unit below the root holds them
    assert all(np.isfinite(rank['loss']).all() and len(rank['loss']) == 6 for rank in ranks)
