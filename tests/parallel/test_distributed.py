"""Distributed jobs of 2 and 3 gloo processes on the CPU: the same parameters as one process on the whole batch,
each rank on its own shard, gathered predictions, checkpoints across world sizes (SPEC §5)."""
import numpy as np
import pytest

from flowpipe import LaunchError
from flowpipe.data.shards import shard_batches
from flowpipe.parallel import launch
from flowpipe.parallel.distributed import World
from flowpipe.parallel.plan import make_plan

from . import dist_jobs

# several processes each: run in CI (CI set) or with FLOWPIPE_SLOW=1, as the README says
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]

RUNS = [('whole', {'batch_size': 7}),                            # 46 items: 6 batches of 7, the last of 4
        ('microbatch', {'batch_size': 7, 'microbatch': 2}),
        ('small', {'batch_size': 2, 'n_epochs': 1}),               # a global batch smaller than 3 ranks
        ('prefetch', {'batch_size': 5, 'prefetch': 2, 'n_epochs': 1})]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _rel(a, b):
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b))


@pytest.fixture(scope='module')
def reference(default_dtype):
    return dist_jobs.scenarios(RUNS)


@pytest.fixture(scope='module', params=[2, pytest.param(3, marks=pytest.mark.slow)])   # 3: also in 07_distributed
def launched(request, default_dtype):
    return request.param, launch(dist_jobs.scenarios, request.param, args=(RUNS,), timeout=TIMEOUT)


@pytest.mark.parametrize('name', [name for name, _ in RUNS])
def test_parameters_equal_one_process_on_the_whole_batch(launched, reference, name):
    world, ranks = launched
    for result in ranks:
        assert result[name]['world'] == world
        assert _rel(result[name]['params'], reference[name]['params']) < 1e-10
        np.testing.assert_allclose(result[name]['loss'], reference[name]['loss'], rtol=1e-10)


@pytest.mark.parametrize('name', [name for name, _ in RUNS])
def test_each_rank_sees_only_its_contiguous_balanced_shard(launched, reference, name):
    world, ranks = launched
    batches = reference[name]['ids']
    assert all(len(result[name]['ids']) == len(batches) for result in ranks)     # same number of iterations
    for b, whole in enumerate(batches):
        base, extra = divmod(len(whole), world)
        sizes = [base + (rank < extra) for rank in range(world)]
        assert [len(result[name]['ids'][b]) for result in ranks] == sizes
        np.testing.assert_array_equal(np.concatenate([result[name]['ids'][b] for result in ranks]), whole)


@pytest.mark.parametrize('name', ['whole', 'small'])
def test_random_draws_per_item_do_not_depend_on_the_world_size(launched, reference, name):
    _, ranks = launched
    for b, whole in enumerate(reference[name]['draws']):
        np.testing.assert_array_equal(np.concatenate([result[name]['draws'][b] for result in ranks]), whole)


def test_model_repr_shows_rank_world_and_backend(launched):
    world, ranks = launched
    for rank, result in enumerate(ranks):
        assert f'distributed, rank {rank} of {world}' in result['whole']['plan']
        assert 'backend gloo' in result['whole']['plan']


def test_predictions_gathered_to_rank_0_in_dataset_order_and_a_checkpoint_loads_in_one_process(tmp_path):
    path = str(tmp_path / 'net.model')
    ranks = launch(dist_jobs.predict, 2, args=(4,), kwargs={'save_path': path}, timeout=TIMEOUT)
    alone = dist_jobs.predict(4)
    assert ranks[1]['gathered'] is None
    assert ranks[0]['gathered'].shape == (dist_jobs.N_ITEMS, dist_jobs.N_CLASSES)
    np.testing.assert_allclose(ranks[0]['gathered'], alone['gathered'], rtol=1e-10)
    assert sum(len(part) for part in ranks[1]['local']) < dist_jobs.N_ITEMS
    assert ranks[0]['files'] == ['net.model']                   # one file, written by rank 0 only
    loaded = dist_jobs.predict(4, model_path=path)               # saved by 2 processes, loaded in 1
    assert _rel(loaded['params'], ranks[0]['params']) < 1e-12
    np.testing.assert_allclose(loaded['gathered'], alone['gathered'], rtol=1e-10)
    alone_path = str(tmp_path / 'alone.model')
    dist_jobs.predict(4, save_path=alone_path)                    # saved by 1 process, loaded in 3
    back = launch(dist_jobs.predict, 3, args=(4,), kwargs={'model_path': alone_path}, timeout=TIMEOUT)
    np.testing.assert_allclose(back[0]['gathered'], alone['gathered'], rtol=1e-10)
    assert all(_rel(rank['params'], alone['params']) < 1e-12 for rank in back)


def test_shards_are_contiguous_balanced_and_empty_for_the_last_ranks_of_a_small_batch():
    index = dist_jobs.dataset(10).index
    batches = list(index.gen_batch(4, n_epochs=1))                  # 4, 4, 2
    shards = [list(shard_batches(iter(batches), rank, 3)) for rank in range(3)]
    assert [[len(s) for s in per_rank] for per_rank in shards] == [[2, 2, 1], [1, 1, 1], [1, 1, 0]]
    last = shards[2][2].shard
    assert (last.start, last.stop, last.size, last.rank) == (2, 2, 2, 2)
    np.testing.assert_array_equal(np.concatenate([s[0].indices for s in shards]), batches[0].indices)


WORLD = World(rank=1, size=2, local_rank=1, local_size=2, backend='gloo')


def test_a_plan_in_a_distributed_job_has_one_device_and_says_where_it_runs():
    plan = make_plan('cpu', microbatch=2, world=WORLD)
    assert plan.engine == 'distributed' and len(plan.devices) == 1
    text = plan.describe(5)
    assert 'distributed, rank 1 of 2 (local rank 1), backend gloo' in text
    assert 'shards [3, 2], this rank (rank 1) computes 2' in text
    assert make_plan('GPU:*', world=WORLD, num_gpus=2).primary.name == 'cuda:1'
    assert make_plan('GPU:0', world=WORLD, num_gpus=4).primary.name == 'cuda:1'
    assert make_plan(None, world=WORLD, num_gpus=0).primary.name == 'cpu:0'


@pytest.mark.parametrize('flags', [{'device': ['CPU:0', 'CPU:1']}, {'device': 'CPU:0x2'},
                                   {'device_map': {'a': 'cpu'}}, {'device_weights': [1]}])
def test_replicas_inside_a_rank_are_refused_with_a_clear_error(flags):
    with pytest.raises(ValueError, match='distributed job'):
        make_plan(**flags, world=WORLD)


def test_augmentation_of_an_item_does_not_depend_on_the_world_size():
    ranks = launch(dist_jobs.augment, 2, args=(5,), timeout=TIMEOUT)
    for b, whole in enumerate(dist_jobs.augment(5)):
        shards = [rank[b] for rank in ranks if len(rank[b])]        # the last batch of 1 leaves rank 1 idle
        np.testing.assert_allclose(np.concatenate(shards), whole, rtol=1e-6)


def test_running_stats_reach_an_idle_rank_when_one_rank_holds_the_whole_batch():
    ranks = launch(dist_jobs.batchnorm_idle, 2, timeout=TIMEOUT)
    for running_mean in ranks:
        np.testing.assert_array_equal(running_mean, dist_jobs.batchnorm_idle())


def test_a_rank_idle_in_the_step_after_the_first_synchronized_one_joins_the_bucket_rebuild():
    losses, params = dist_jobs.idle_after_a_synchronized_step()
    for rank_losses, rank_params in launch(dist_jobs.idle_after_a_synchronized_step, 2, timeout=TIMEOUT):
        np.testing.assert_allclose(rank_losses, losses, rtol=1e-12)
        assert _rel(rank_params, params) < 1e-12


def test_an_idle_rank_asked_for_outputs_returns_empty_ones_of_the_busy_ranks_shape():
    ranks = launch(dist_jobs.idle_outputs, 2, timeout=TIMEOUT)
    assert ranks == [((2, 2), 'torch.float64', True), ((0, 2), 'torch.float64', True)]


def test_predictions_of_a_rank_are_cut_into_micro_batches_as_in_one_process():
    sizes, outputs = dist_jobs.predicted_sizes()
    ranks = launch(dist_jobs.predicted_sizes, 2, timeout=TIMEOUT)
    assert sizes == [2] * 5 and [rank_sizes for rank_sizes, _ in ranks] == [[2, 2, 1], [2, 2, 1]]
    np.testing.assert_allclose(np.concatenate([rank_outputs for _, rank_outputs in ranks]), outputs, rtol=1e-12)


def test_a_predicted_loss_is_the_global_batchs_on_every_rank():
    alone = dist_jobs.predicted_losses()
    assert len(alone) == 3 and np.all(np.isfinite(alone))
    for losses in launch(dist_jobs.predicted_losses, 2, timeout=TIMEOUT):
        np.testing.assert_allclose(losses, alone, rtol=1e-12)


@pytest.mark.parametrize('world', [2, pytest.param(3, marks=pytest.mark.slow)])
def test_the_mean_of_a_batch_without_items_on_every_rank_is_nan(world):
    assert all(np.isnan(mean) for mean in launch(dist_jobs.empty_batch_mean, world, timeout=TIMEOUT))


FAILING = {'timeout': TIMEOUT, 'env': {'FLOWPIPE_DIST_TIMEOUT': 60}}     # refused at once: no timeout is waited for


@pytest.mark.parametrize('world, per_rank, message', [
    (2, [{'batch_size': 8}, {'batch_size': 9}], 'batch_size=8 on rank 0 vs batch_size=9 on rank 1'),  # 3 batches
    pytest.param(3, [{'batch_size': 4}, {'batch_size': 4}, {'batch_size': 5}],
                 'batch_size=4 on ranks [0, 1] vs batch_size=5 on rank 2', marks=pytest.mark.slow),
    (2, [{'batch_size': 4, 'n_epochs': 2}, {'batch_size': 4, 'n_epochs': 1}], 'n_epochs=2 on rank 0 vs n_epochs=1'),
    (2, [{'batch_size': 4}, {'batch_size': 4, 'n_items': 22}], 'dataset=Dataset of 23 items')])
def test_ranks_given_different_run_arguments_are_refused_at_run_start_naming_the_ranks_and_values(world, per_rank,
                                                                                                 message):
    with pytest.raises(LaunchError, match='Expected every rank of the distributed job to run the same') as info:
        launch(dist_jobs.train_with, world, args=(per_rank,), **FAILING)
    assert info.value.kind == 'ValueError' and message in info.value.message


@pytest.mark.parametrize('world, rank, number, message', [
    (2, 1, 2, 'global batch 2 on rank 0, global batch 3 on rank 1'),
    (2, 1, 5, 'global batch 5 on rank 0, the end of the run on rank 1'),        # the run's last batch: no next step
    pytest.param(3, 0, 1, 'global batch 2 on rank 0, global batch 1 on rank 1, global batch 1 on rank 2',
                 marks=pytest.mark.slow)])
def test_skip_batch_on_one_rank_only_is_named_at_the_next_exchange(world, rank, number, message):
    with pytest.raises(LaunchError, match='Expected every rank to train on the same global batch') as info:
        launch(dist_jobs.skip_on_one_rank, world, args=(rank, number), **FAILING)
    assert message in info.value.message and 'SkipBatch' in info.value.message


@pytest.mark.parametrize('built', [False, True])
def test_a_rank_that_trains_on_no_batch_while_the_others_do_is_named_on_every_rank(built):
    # the skipping rank ends its run at once: it joins the exchange the others are in (the model's build, or the
    # step's count exchange) with the run's end, instead of leaving them to a lost peer or the timeout; whichever
    # rank's error comes first names both
    with pytest.raises(LaunchError, match='Expected every rank to train on the same global batch') as info:
        launch(dist_jobs.skip_every_batch_on_one_rank, 2, args=(1, built), **FAILING)
    assert info.value.kind == 'RuntimeError' and 'SkipBatch' in info.value.message
    assert 'global batch 0 on rank 0, the end of the run on rank 1' in info.value.message


@pytest.mark.slow
@pytest.mark.parametrize('world', [2, 3])
def test_a_timed_out_collective_names_the_collective_the_step_and_the_rank_waited_for(world):
    stuck = world - 1
    with pytest.raises(LaunchError) as info:
        launch(dist_jobs.stuck_rank, world, args=(stuck, 120), timeout=TIMEOUT, env={'FLOWPIPE_DIST_TIMEOUT': 20})
    assert info.value.kind == 'TimeoutError' and info.value.rank != stuck
    assert 'the exchange of item counts of training step 2 (global batch 1 of the run) within 20 s' in str(info.value)
    assert f'rank {stuck} never reached it' in info.value.message
    if world == 3:
        other = 1 - info.value.rank
        assert f'rank {other} was in the exchange of item counts of training step 2' in info.value.message


@pytest.mark.parametrize('world, batch_size', [(2, 1), pytest.param(3, 2, marks=pytest.mark.slow)])
def test_a_shape_read_from_the_batch_builds_the_same_model_on_an_idle_rank(world, batch_size):
    alone = dist_jobs.shape_from_batch(batch_size)
    for result in launch(dist_jobs.shape_from_batch, world, args=(batch_size,), timeout=TIMEOUT):
        assert _rel(result['params'], alone['params']) < 1e-5     # float32: summed in another order than alone
        np.testing.assert_allclose(result['loss'], alone['loss'], rtol=1e-5)


@pytest.mark.parametrize('world', [2, 3])
def test_counts_exchanged_on_a_cpu_group_of_their_own_give_the_same_parameters(world):
    alone = dist_jobs.train(7, 2, n_epochs=1)                       # 23 items: 4 batches, micro-batches of 2
    for result in launch(dist_jobs.train_counting_on_own_group, world, args=(7, 2), timeout=TIMEOUT):
        # one a step, and one at the run's end (every rank ends the run alike)
        assert result['own_groups'] == 1 and result['gathers_on_own'] == len(alone['loss']) + 1 == 5
        assert _rel(result['params'], alone['params']) < 1e-10
        np.testing.assert_allclose(result['loss'], alone['loss'], rtol=1e-10)


def test_value_clipping_and_per_epoch_and_plateau_schedules_give_one_process_s_result():
    # the plateau steps on the global batch's loss, the per-epoch schedule counts the global batch's items
    overrides = {'clip_grad_value': 0.05, 'decay': [{'name': 'exp', 'gamma': 0.5, 'frequency': 'epoch'},
                                                    {'name': 'plateau', 'factor': 0.5, 'patience': 0}]}
    alone = dist_jobs.train(7, 2, n_epochs=3, overrides=overrides)
    free = dist_jobs.train(7, 2, n_epochs=3)
    assert alone['lr'] < free['lr'] * 0.5 ** 3 and _rel(alone['params'], free['params']) > 1e-3
    for result in launch(dist_jobs.train, 2, args=(7, 2, 3), kwargs={'overrides': overrides}, timeout=TIMEOUT):
        assert result['lr'] == alone['lr']
        assert _rel(result['params'], alone['params']) < 1e-10


def test_a_value_computed_on_rank_0_reaches_every_rank_and_so_does_its_error():
    errors = launch(dist_jobs.from_rank_0_failing, 2, **FAILING)
    assert errors[0] == 'ValueError: no image in this batch'
    assert errors[1].startswith('RuntimeError: Expected rank 0 to compute a value every rank shares. Received: rank 0 '
                                'failed with ValueError: no image in this batch')
