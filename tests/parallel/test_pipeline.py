"""Pipeline parallelism (``'pipeline'``): 2 stages on 2 gloo processes and 2 stages x 2 pipelines on 4, GPipe and
1F1B, micro-batches with an uneven last chunk, Adam, two epochs: the same parameters, losses and predictions as one
process on the whole batch; each rank holds its stage only; the saved model predicts the same in one process."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import LaunchError
from flowpipe.models.torch import TorchModel
from flowpipe.parallel import launch
from flowpipe.parallel.engines.stage_placement import check_chain
from flowpipe.parallel.stages import Pipelining, check_parameters, cut

from . import pipeline_jobs

pytestmark = pytest.mark.usefixtures('default_dtype')

SUM = nn.CrossEntropyLoss(reduction='sum')          # not a mean over items: each piece adds its sum
IGNORE = nn.CrossEntropyLoss(ignore_index=0)        # normalized by the targets it counts
TWO = [('1f1b', {'batch_size': 5, 'microbatch': 2}),     # chunks [2, 2, 1]; the last batch of 3: [2, 1]
       ('gpipe', {'batch_size': 5, 'microbatch': 2, 'schedule': 'gpipe', 'loss': SUM}),
       ('ignore', {'batch_size': 6, 'microbatch': 4, 'loss': IGNORE, 'split': ['3']}),   # [4, 2]; the last [4, 1]
       ('whole', {'batch_size': 8, 'n_epochs': 1})]
FOUR = [('1f1b', {'batch_size': 7, 'microbatch': 2, 'loss': IGNORE}),   # parts [4, 3]; the last batch: [1, 1]
        ('gpipe', {'batch_size': 11, 'microbatch': 2, 'schedule': 'gpipe'})]     # the last batch of 1: [1, 0]
STAGES = [['0.bias', '0.weight'], ['2.bias', '2.weight', '4.bias', '4.weight']]         # by parameter bytes
SPLIT_AT_3 = [['0.bias', '0.weight', '2.bias', '2.weight'], ['4.bias', '4.weight']]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    return tmp_path_factory.mktemp('pipeline') / 'pipelined.model'


@pytest.fixture(scope='module')
def two(default_dtype, saved):
    runs = [(name, {**kwargs, 'save_path': str(saved)} if name == '1f1b' else kwargs) for name, kwargs in TWO]
    return launch(pipeline_jobs.scenarios, 2, args=(runs,), timeout=TIMEOUT)


def _check(ranks, reference, stage_of, stages=STAGES):
    for rank, result in enumerate(ranks):
        assert sorted(result['params']) == stages[stage_of(rank)]          # this rank holds its stage only
        for name, value in result['params'].items():
            assert _rel(value, reference['params'][name]) < 1e-10, name
        np.testing.assert_allclose(result['loss'], reference['loss'], rtol=1e-10)
        assert _rel(result['predictions'], reference['predictions']) < 1e-10
        np.testing.assert_allclose(result['predicted_losses'], reference['predicted_losses'], rtol=1e-10)


@pytest.mark.slow       # processes: run in CI or with FLOWPIPE_SLOW=1
@pytest.mark.parametrize('name', [name for name, _ in TWO])
def test_two_stages_on_two_processes_equal_one_process_on_the_whole_batch(two, name):
    kwargs = dict(TWO)[name]
    reference = pipeline_jobs.train(**kwargs)
    _check([result[name] for result in two], reference, lambda rank: rank, SPLIT_AT_3 if 'split' in kwargs else STAGES)
    held = [set(result[name]['params']) for result in two]
    assert not held[0] & held[1] and held[0] | held[1] == set(reference['params'])
    assert 'stage 1 (this rank)' in two[1][name]['plan'] and 'pipeline parallel, stage 0 of 2' in two[0][name]['plan']


@pytest.mark.slow
def test_the_saved_model_loads_in_one_process_and_predicts_what_the_stages_predicted(two, saved):
    model = TorchModel.from_file(saved)
    predictions = model.predict(x=pipeline_jobs.dataset().preloaded['x'])
    assert _rel(np.asarray(predictions), two[0]['1f1b']['predictions']) < 1e-10
    assert {name for name, _ in model.model.named_parameters()} == set(pipeline_jobs.network().state_dict())


@pytest.mark.slow       # 4 processes on a loaded machine: run in CI or with FLOWPIPE_SLOW=1
@pytest.mark.parametrize('name', [name for name, _ in FOUR])
def test_two_stages_times_two_pipelines_on_four_processes_equal_one_process(name):
    ranks = launch(pipeline_jobs.scenarios, 4, args=([(name, dict(FOUR)[name])],), timeout=TIMEOUT)
    reference = pipeline_jobs.train(**dict(FOUR)[name])
    _check([result[name] for result in ranks], reference, lambda rank: rank // 2)
    for pipeline in (0, 1):       # the ranks of a pipeline read the same items, the pipelines the global batch
        ids = [ranks[pipeline][name]['ids'], ranks[pipeline + 2][name]['ids']]
        assert all(np.array_equal(a, b) for a, b in zip(*ids))
    for batch, whole in enumerate(reference['ids']):
        parts = np.concatenate([ranks[0][name]['ids'][batch], ranks[1][name]['ids'][batch]])
        np.testing.assert_array_equal(parts, whole)


def test_a_network_is_cut_by_parameter_bytes_or_at_named_children_and_refused_when_too_short():
    children = list(pipeline_jobs.network().named_children())
    assert cut(children, Pipelining(2)) == [['0'], ['1', '2', '3', '4']]      # 48 | 99 parameters: the best cut
    assert cut(children, Pipelining(3)) == [['0'], ['1', '2'], ['3', '4']]      # 48 | 72 | 27
    assert cut(children, Pipelining(5)) == [['0'], ['1'], ['2'], ['3'], ['4']]
    assert cut(children, Pipelining(2, ('1',))) == [['0'], ['1', '2', '3', '4']]
    with pytest.raises(ValueError, match='at least as many top-level children as pipeline stages'):
        cut(children[:2], Pipelining(3))
    with pytest.raises(ValueError, match='name top-level children after the first, in call order'):
        cut(children, Pipelining(3, ('3', '1')))


def test_a_stage_without_parameters_is_refused_naming_it():
    children = list(pipeline_jobs.network().named_children())
    check_parameters(children, cut(children, Pipelining(3)))
    with pytest.raises(ValueError, match=r"Received: stage 1 of 4 holds \['1'\], without parameters"):
        check_parameters(children, cut(children, Pipelining(4)))        # [0] [1] [2] [3, 4]: a Tanh alone


class Skip(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.second(self.first(x)) + x


class Reversed(Skip):
    def forward(self, x):
        return self.first(self.second(x))


def test_a_network_that_is_not_a_chain_of_its_children_is_refused_naming_the_break():
    check_chain(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), [torch.zeros(2, 3)])
    with pytest.raises(ValueError, match="its output is not the output of its last child 'second'"):
        check_chain(Skip(), [torch.zeros(2, 3)])
    with pytest.raises(ValueError, match=r"its forward calls \['second', 'first'\]"):
        check_chain(Reversed(), [torch.zeros(2, 3)])


def test_a_chain_with_a_batch_norm_is_traced_from_a_batch_of_one_item():
    network = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).train()
    check_chain(network, [torch.zeros(1, 3)])         # the first batch's first item, as the engine passes it
    assert network.training and int(network[1].num_batches_tracked) == 0


@pytest.mark.slow
def test_a_run_checkpoint_of_a_pipelined_model_resumes_the_same_trajectory(tmp_path):
    kwargs = {'batch_size': 5, 'microbatch': 2}
    ranks = launch(pipeline_jobs.checkpointed, 2, args=(str(tmp_path / 'checkpoints'), 6), kwargs=kwargs,
                   timeout=TIMEOUT)
    _check(ranks, pipeline_jobs.train(**kwargs), lambda rank: rank)
    assert len(ranks[0]['loss']) == 10         # the losses of the batches before the stop came back with the state
    assert [result['resumed_batches'] for result in ranks] == [4, 4]      # batches 6..9 of 10, after the stop


@pytest.mark.slow
def test_ranks_of_a_pipeline_given_different_items_are_refused_at_the_first_step():
    with pytest.raises(LaunchError, match='Expected the ranks of a pipeline'):
        launch(pipeline_jobs.hidden_stages, 2, timeout=TIMEOUT)


@pytest.mark.slow
@pytest.mark.parametrize('world', [2, pytest.param(4, marks=pytest.mark.slow)])
def test_validation_through_the_stages_counts_every_item_once(world):
    reference = pipeline_jobs.validated()
    for result in launch(pipeline_jobs.validated, world, timeout=TIMEOUT):
        np.testing.assert_array_equal(result['ids'], np.arange(pipeline_jobs.N_ITEMS))
        assert result['items'] == reference['items'] == pipeline_jobs.N_ITEMS
        assert _rel(result['predictions'], reference['predictions']) < 1e-10



@pytest.mark.parametrize('stages, split, problem', [
    (2, ['nope'], 'Expected pipeline_split to name top-level children'),
    (3, ['1', '2'], 'Expected every pipeline stage to hold parameters')])
def test_one_process_refuses_a_split_the_ranks_would_refuse(stages, split, problem):
    network = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(ValueError, match=problem):
        model = TorchModel({'model': network, 'loss': 'mse', 'optimizer': 'SGD', 'pipeline': stages,
                            'pipeline_split': split})
        model.train(torch.ones(4, 3), torch.zeros(4, 1))
