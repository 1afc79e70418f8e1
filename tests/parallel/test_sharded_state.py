"""``flowpipe.parallel.sharded_state`` on MLPs sharded with torch's ``fully_shard`` in gloo processes: a state
gathered on 2 ranks loads in one process and on 3 ranks (predictions, then Adam steps, equal); shards written by
2 ranks with DCP load on 3 ranks and in one process."""
import numpy as np
import pytest
import torch

from flowpipe.parallel import launch, sharded_state

from . import sharded_state_jobs as sharded_jobs

pytestmark = pytest.mark.slow
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _close(got, want):
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-10, atol=1e-13)


@pytest.fixture(scope='module')
def gathered():
    return launch(sharded_jobs.train_and_gather, 2, args=(3,), timeout=TIMEOUT)


def test_the_whole_state_is_gathered_on_rank_0_only(gathered):
    assert gathered[1]['model'] == {} and gathered[1]['optimizer'] == {}
    model, optim = gathered[0]['model'], gathered[0]['optimizer']
    reference, _ = sharded_jobs.network(shard=False)
    assert list(model) == list(reference.state_dict())
    assert all(value.device.type == 'cpu' and value.shape == reference.state_dict()[key].shape
               for key, value in model.items())
    assert sorted(optim['state']) == list(range(len(model)))         # numbered as Optimizer.state_dict() numbers
    assert optim['param_groups'][0]['params'] == list(range(len(model)))
    assert float(optim['state'][0]['step']) == 3.0


@pytest.mark.parametrize('world', [1, 3])
def test_a_state_gathered_on_2_ranks_loads_in_one_process_and_on_3(gathered, world):
    model, optim = gathered[0]['model'], gathered[0]['optimizer']
    args = (model, optim, 2)
    results = [sharded_jobs.load_and_step(*args)] if world == 1 else launch(
        sharded_jobs.load_and_step, world, args=args, timeout=TIMEOUT)
    for result in results:
        np.testing.assert_array_equal(result['predictions'], gathered[0]['predictions'])
    # two more Adam steps from the loaded state: one process unsharded is the reference
    reference = sharded_jobs.load_and_step(*args)['params']
    _close(results[0]['params'], reference)


def test_an_optimizer_that_has_not_stepped_gives_its_own_state():
    net, optimizer = sharded_jobs.network(shard=False)
    assert sharded_state.full_optimizer_state(net, optimizer) == optimizer.state_dict()
    assert not optimizer.state            # torch's gathering helper would have stepped it to make its state


def test_optimizer_state_of_another_network_is_refused(gathered):
    _, optimizer = sharded_jobs.network(shard=False)
    net = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="Expected an optimizer over the module's own parameters"):
        sharded_state.parameter_names(net, optimizer)


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp('shards') / ('checkpoint-000000003' + sharded_state.SHARDS_SUFFIX))
    return folder, launch(sharded_jobs.train_and_save_shards, 2, args=(folder, 3), timeout=TIMEOUT)


@pytest.mark.parametrize('world', [1, 3])
def test_shards_written_by_2_ranks_load_on_3_and_in_one_process(shards, world):
    folder, written = shards
    assert sorted(name for name in __import__('os').listdir(folder) if name.endswith('.distcp')) == [
        '__0_0.distcp', '__1_0.distcp']
    results = [sharded_jobs.load_shards_and_step(folder, 2)] if world == 1 else launch(
        sharded_jobs.load_shards_and_step, world, args=(folder, 2), timeout=TIMEOUT)
    for result in results:
        np.testing.assert_array_equal(result['predictions'], written[0]['predictions'])
    reference = sharded_jobs.load_shards_and_step(folder, 2)['params']
    if world == 3:
        _close(results[0]['params'], reference)


def test_a_folder_without_shards_is_a_clear_error(tmp_path):
    net, optimizer = sharded_jobs.network(shard=False)
    with pytest.raises(FileNotFoundError, match='Expected a folder of shards'):
        sharded_state.load_shards(str(tmp_path), {'net': sharded_state.sharded_state(net, optimizer)})


# model files of flowpipe models sharded by the 'sharding' config key

@pytest.fixture(scope='module', params=['full', 'grad_op'])
def saved_model(tmp_path_factory, request):
    path = str(tmp_path_factory.mktemp('model') / 'sharded.model')
    return path, launch(sharded_jobs.save_sharded_model, 2, args=(path, request.param), timeout=TIMEOUT)


@pytest.mark.parametrize('world', [1, 3])
def test_a_model_saved_on_2_sharded_ranks_loads_in_one_process_and_on_3(saved_model, world):
    path, saved = saved_model
    loaded = [sharded_jobs.load_model_file(path)] if world == 1 else launch(
        sharded_jobs.load_model_file, world, args=(path,), timeout=TIMEOUT)
    np.testing.assert_allclose(loaded[0]['predictions'], saved[0]['predictions'], rtol=1e-12, atol=1e-14)
    # the optimizer state came too: one more epoch from the file ends where the saving job's next epoch ended
    assert loaded[0]['optimizer_steps'] == saved[0]['optimizer_steps'] == [10]
    for rank in loaded:
        for got, want in zip(rank['params'], saved[0]['params']):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_a_sharded_checkpoint_of_2_ranks_is_resumed_by_a_job_of_3(tmp_path):
    folder = str(tmp_path / 'checkpoints')
    written = launch(sharded_jobs.run_with_sharded_checkpoints, 2, args=(folder,), timeout=TIMEOUT)
    assert written[0] == ['checkpoint-000000005.flowpipe', 'checkpoint-000000005.shards']
    # the run had ended: resumed on 3 ranks it trains no more and writes nothing new (continuing a stopped run on
    # another number of ranks: tests/parallel/test_relayout_resume.py)
    resumed = launch(sharded_jobs.run_with_sharded_checkpoints, 3, args=(folder, True), timeout=TIMEOUT)
    for names in resumed:          # the folder's lock file shows while rank 0 still holds it
        assert [name for name in names if name.startswith('checkpoint-')] == written[0]
