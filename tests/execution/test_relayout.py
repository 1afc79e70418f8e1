"""A run checkpoint resumes on another layout in one process (replicas, micro-batches, one device) and ends with
the parameters of the uninterrupted run; what cannot continue is refused, named: dropout under torch's generators
on another layout, a variable changed in place per rank. Across ranks: tests/parallel/test_relayout_resume.py."""
import numpy as np
import pytest
import torch

from flowpipe import C, CheckpointError
from flowpipe.execution import checkpoint as files
from flowpipe.execution.canonical import describe
from flowpipe.execution.relayout import rank_state
from flowpipe.execution.resume_changes import allowed_changes
from flowpipe.execution.run import RunArgs

from .checkpoint_cases import RUN, TRIGGER, outcome, pipeline
from .test_checkpoint import crash_at

pytestmark = pytest.mark.usefixtures('default_dtype')

TWO = {'devices': ('CPU:0', 'CPU:1'), 'microbatch': 3}
ONE = {'devices': ('CPU:0',), 'microbatch': None}
THREE = {'devices': 'CPU:0x3', 'microbatch': 2}


@pytest.fixture(autouse=True)
def no_trigger():
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')
    yield
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')


def _make(layout, via_config=False, **more):
    """The float64 pipeline without dropout on ``layout``, given in the model config or the pipeline config."""
    if not via_config:
        return {'dtype': torch.float64, 'dropout': False, **layout, **more}
    return {'dtype': torch.float64, 'dropout': False, 'devices': C('device'), 'microbatch': C('microbatch'),
            **more}


def _run(layout, via_config=False, **run):
    made = pipeline(**_make(layout, via_config))
    if via_config:
        made = made << {'device': list(layout['devices']) if isinstance(layout['devices'], tuple)
                        else layout['devices'], 'microbatch': layout['microbatch']}
    return made.run(**RUN, **run)


def _rel(got, want):
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, want))


@pytest.mark.parametrize('via_config', [False, True], ids=['model-config', 'pipeline-config'])
@pytest.mark.parametrize('written, resumed', [(TWO, ONE), (ONE, THREE)], ids=['replicas-to-one', 'one-to-replicas'])
def test_a_checkpoint_resumes_on_another_layout_to_the_uninterrupted_result(tmp_path, written, resumed, via_config):
    reference = outcome(_run(ONE))
    TRIGGER.update(at=7, error=RuntimeError('batch 7'), where='first')
    with pytest.raises(RuntimeError, match='batch 7'):
        _run(written, via_config, checkpoint=tmp_path)
    TRIGGER.update(at=None, error=None)
    with pytest.warns(UserWarning, match=r"model 'net' device: .* the new value applies"):
        done = _run(resumed, via_config, checkpoint=tmp_path, resume=True)
    plan = done.m('net').plan
    devices = [resumed['devices']] if isinstance(resumed['devices'], str) else list(resumed['devices'])
    assert len(plan.devices) == (3 if devices == ['CPU:0x3'] else len(devices))     # the resumed run's layout
    assert plan.microbatch == resumed['microbatch']
    got = outcome(done)
    assert _rel(got['parameters'], reference['parameters']) < 1e-10
    np.testing.assert_allclose(got['loss'], reference['loss'], rtol=1e-10)
    assert got['draws'] == reference['draws'] and got['iteration'] == reference['iteration']


@pytest.mark.filterwarnings('ignore:flowpipe. resuming from')
def test_dropout_under_torch_randomness_is_refused_on_another_layout(tmp_path):
    torch_randomness = {'dtype': torch.float64, 'randomness': 'torch'}
    crash_at(7, **RUN, make={**torch_randomness, **TWO}, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match=r"'randomness': 'torch' and dropout layers '2' \(Dropout p=0\.3\); "
                                              r"the checkpoint was written on one process, devices cpu:0, cpu:1, "
                                              r"microbatch=3, this run is on one process, devices cpu:0\."):
        pipeline(**torch_randomness, **ONE).run(**RUN, checkpoint=tmp_path, resume=True)
    # the checkpoint's own layout continues
    assert pipeline(**torch_randomness, **TWO).run(**RUN, checkpoint=tmp_path, resume=True).m('net').iteration == 15


def test_dropout_by_item_resumes_on_another_layout_to_the_uninterrupted_result(tmp_path):
    by_item = {'dtype': torch.float64}                  # 'randomness': 'by_item', the default
    reference = outcome(pipeline(**by_item, **ONE).run(**RUN))
    crash_at(7, **RUN, make={**by_item, **TWO}, checkpoint=tmp_path)
    with pytest.warns(UserWarning, match='the new value applies'):
        done = pipeline(**by_item, **ONE).run(**RUN, checkpoint=tmp_path, resume=True)
    assert len(done.m('net').plan.devices) == 1 and done.m('net').plan.randomness == 'by_item'
    got = outcome(done)
    assert _rel(got['parameters'], reference['parameters']) < 1e-10
    np.testing.assert_allclose(got['loss'], reference['loss'], rtol=1e-10)


def test_the_world_size_may_change_and_the_checkpoint_records_its_layout(tmp_path):
    done = _run(ONE, checkpoint=tmp_path)
    path = files.latest_in(str(tmp_path))
    saved = files.read(path)
    assert saved['layout'] == {'world_size': 1, 'models': {'net': {'devices': ['cpu:0'], 'microbatch': None,
                                                                   'device_weights': None}}}
    now = describe(done, RunArgs(**RUN), world_size=2)
    assert allowed_changes(saved['fingerprint'], now, path) == [(('run', 'world_size'), '1', '2')]


# ----- the variables each rank resumes with -----

def _saved(*ranks):
    return {'ranks': [{'variables': variables, 'random': {'rank': number}} for number, variables in enumerate(ranks)],
            'variables': ranks[0], 'random': {'rank': 0}}


INITIAL = {'loss': [], 'ids': ['start'], 'last': None}
RANK0 = {'loss': [0.5, 0.25], 'ids': ['start', 1, 2], 'last': None}
RANK1 = {'loss': [0.5, 0.25], 'ids': ['start', 3], 'last': None}


def test_the_same_number_of_ranks_takes_back_its_own_variables_and_random_states():
    assert rank_state(_saved(RANK0, RANK1), 1, 2, INITIAL) == {'variables': RANK1, 'random': {'rank': 1}}


def test_on_another_number_of_ranks_shared_values_stay_and_lists_merge_on_rank_0():
    saved = _saved(RANK0, RANK1)
    one = rank_state(saved, 0, 1, INITIAL)
    assert one == {'variables': {'loss': [0.5, 0.25], 'ids': ['start', 1, 2, 3], 'last': None}, 'random': {'rank': 0}}
    three = [rank_state(saved, rank, 3, INITIAL) for rank in range(3)]
    assert three[0]['variables'] == one['variables']
    for rank in (1, 2):      # the other ranks start their lists afresh; a rank the checkpoint lacks takes rank 0's
        assert three[rank]['variables'] == {'loss': [0.5, 0.25], 'ids': ['start'], 'last': None}
    assert [state['random'] for state in three] == [{'rank': 0}, {'rank': 1}, {'rank': 0}]
    # one process's checkpoint on several ranks: every variable on every rank
    assert rank_state(_saved(RANK0), 1, 2, INITIAL)['variables'] == RANK0


def test_a_variable_changed_in_place_per_rank_is_refused_by_name():
    total0, total1 = {**RANK0, 'total': 6, 'last': [1, 2]}, {**RANK1, 'total': 3, 'last': [3]}
    with pytest.raises(CheckpointError, match=r"Received: 'last', 'total' differing between the checkpoint's "
                                              r"ranks and changed in place per rank"):
        rank_state(_saved(total0, total1), 0, 1, {**INITIAL, 'total': 0})
    with pytest.raises(CheckpointError, match="Received: 'ids' differing"):       # not the initial list extended
        rank_state(_saved(RANK0, {**RANK1, 'ids': [3]}), 0, 3, INITIAL)


# ----- pipelined layouts: the stages of a pipeline read the same items -----

def _pipelined(stages, *ranks):
    return {**_saved(*ranks), 'layout': {'world_size': len(ranks), 'pipeline': stages, 'models': {}}}


PIPE0 = {'loss': [0.5, 0.25], 'ids': ['start', 1, 2], 'last': None}      # pipeline 0 (ranks 0 and 2)
PIPE1 = {'loss': [0.5, 0.25], 'ids': ['start', 3], 'last': None}         # pipeline 1 (ranks 1 and 3)


def test_a_pipelined_checkpoint_counts_each_pipeline_once_on_another_number_of_parts():
    saved = _pipelined(2, PIPE0, PIPE1, PIPE0, PIPE1)          # 2 pipelines of 2 stages on 4 ranks
    merged = {'loss': [0.5, 0.25], 'ids': ['start', 1, 2, 3], 'last': None}
    assert rank_state(saved, 0, 1, INITIAL)['variables'] == merged           # one process: every item once
    four = [rank_state(saved, rank, 4, INITIAL, stages=4) for rank in range(4)]   # one pipeline of 4 stages
    assert [state['variables'] for state in four] == [merged] * 4
    assert [state['random'] for state in four] == [{'rank': rank} for rank in range(4)]
    three = [rank_state(saved, rank, 3, INITIAL)['variables']['ids'] for rank in range(3)]     # DDP on 3
    assert three == [['start', 1, 2, 3], ['start'], ['start']]


def test_a_pipelined_checkpoint_on_as_many_parts_gives_each_rank_its_parts_reader():
    saved = _pipelined(2, PIPE0, PIPE1, PIPE0, PIPE1)
    ddp = [rank_state(saved, rank, 2, INITIAL) for rank in range(2)]         # DDP on 2: 2 parts, as 2 pipelines
    assert [state['variables'] for state in ddp] == [PIPE0, PIPE1]
    same = [rank_state(saved, rank, 4, INITIAL, stages=2)['random'] for rank in range(4)]     # its own layout
    assert same == [{'rank': rank} for rank in range(4)]
    # 2 DDP ranks resumed as 2 pipelines of 2 stages: each pipeline's stages take the rank of their part
    assert [rank_state(_saved(PIPE0, PIPE1), rank, 4, INITIAL, stages=2)['variables']
            for rank in range(4)] == [PIPE0, PIPE1, PIPE0, PIPE1]
    # 2 DDP ranks resumed as one pipeline of 2 stages: one part, every stage holds the merged lists
    assert [rank_state(_saved(PIPE0, PIPE1), rank, 2, INITIAL, stages=2)['variables']['ids']
            for rank in range(2)] == [['start', 1, 2, 3]] * 2


class _Plan:
    def __init__(self, stages, randomness='torch'):
        from flowpipe.parallel.mesh import Mesh
        self.devices, self.microbatch, self.device_weights = ['cpu'], 2, None
        self.mesh, self.randomness = Mesh(dp=4 // stages, pp=stages), randomness


class _Model:
    def __init__(self, stages, randomness='torch'):
        self.plan = _Plan(stages, randomness)
        self.model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))


def test_a_model_under_torch_randomness_is_refused_on_other_stages_of_the_same_world():
    from flowpipe.execution.relayout import check_random_layers, layout_of
    saved = layout_of({'net': _Model(2)}, 4, stages=2)
    assert saved['pipeline'] == 2 and saved['models']['net']['pipeline'] == 2
    check_random_layers('net', _Model(2), saved, 4)                        # the same layout: resumes
    check_random_layers('net', _Model(4, 'by_item'), saved, 4)             # masks by item: resumes
    with pytest.raises(CheckpointError, match=r"written on 4 ranks, devices cpu, microbatch=2, pipeline=2, this "
                                              r"run is on 4 ranks, devices cpu, microbatch=2, pipeline=4"):
        check_random_layers('net', _Model(4), saved, 4)
