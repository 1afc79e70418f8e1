"""The ranks' agreement at run start, with the all-gather of a job of 2 ranks played in one process."""
import pytest

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.execution.agreement import agree_on_run
from flowpipe.execution.run import RunArgs
from flowpipe.parallel import distributed
from flowpipe.parallel.distributed import World

WORLD = World(rank=0, size=2)


def _pipeline(*extra):
    pipeline = Pipeline().init_variable('ids', []).update(V('ids', mode='a'), B.indices)
    for name in extra:
        pipeline = pipeline.init_variable(name, 0)
    return pipeline << Dataset(10)


def _agree(monkeypatch, mine, other):
    """``agree_on_run`` on rank 0 of (pipeline, args, seed) ``mine`` while rank 1 runs ``other``."""
    gathered = {}
    monkeypatch.setattr(distributed, 'all_gather', lambda value: gathered.setdefault('other', [value]))
    agree_on_run(WORLD, other[0], other[1], 1, None, (other[2], False))
    monkeypatch.setattr(distributed, 'all_gather', lambda value: [value, *gathered['other']])
    return agree_on_run(WORLD, mine[0], mine[1], 1, None, (mine[2], False))


def test_ranks_that_agree_take_rank_0s_drawn_seed(monkeypatch):
    args = RunArgs(batch_size=3, shuffle=True)
    assert _agree(monkeypatch, (_pipeline(), args, 5), (_pipeline(), args, 7)) == (5, False)


def test_ranks_with_other_actions_are_refused_naming_the_first_action_that_differs(monkeypatch):
    args = RunArgs(batch_size=3)
    with pytest.raises(ValueError, match=r"action #2 init_variable\(name='a', default=0\) on rank 0 vs action #2 "
                                         r"init_variable\(name='b', default=0\) on rank 1"):
        _agree(monkeypatch, (_pipeline('a'), args, 1), (_pipeline('b'), args, 1))
    with pytest.raises(ValueError, match='3 actions on rank 0 vs 2 actions on rank 1'):
        _agree(monkeypatch, (_pipeline('a'), args, 1), (_pipeline(), args, 1))


@pytest.mark.parametrize('other, message', [({'shuffle': True}, 'shuffle=False on rank 0 vs shuffle=True on rank 1'),
                                            ({'drop_last': True}, 'drop_last=False on rank 0 vs drop_last=True'),
                                            ({'seed': 3}, 'seed=None on rank 0 vs seed=3 on rank 1')])
def test_ranks_with_other_run_arguments_are_refused_naming_them(monkeypatch, other, message):
    args = RunArgs(batch_size=3)
    with pytest.raises(ValueError, match='Expected every rank') as info:
        _agree(monkeypatch, (_pipeline(), args, 1), (_pipeline(), RunArgs(batch_size=3, **other), 1))
    assert message in str(info.value)


def test_outside_a_job_there_is_nothing_to_agree_on():
    assert agree_on_run(None, _pipeline(), RunArgs(batch_size=3), 1, None, (4, True)) == (4, True)


def test_a_device_in_the_config_may_name_each_ranks_own_gpu(monkeypatch):
    args = RunArgs(batch_size=3)
    mine, other = _pipeline() << {'device': 'cuda:0', 'lr': 0.1}, _pipeline() << {'device': 'cuda:1', 'lr': 0.1}
    assert _agree(monkeypatch, (mine, args, 4), (other, args, 4)) == (4, False)
    with pytest.raises(ValueError, match=r"config=.*'lr': 0\.1.* on rank 0 vs config=.*'lr': 0\.2.* on rank 1"):
        _agree(monkeypatch, (mine, args, 4), (_pipeline() << {'device': 'cuda:1', 'lr': 0.2}, args, 4))
