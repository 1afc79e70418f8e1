"""The ranks' agreement at run start, with the all-gathers of a job of 2 ranks played by 2 threads."""
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from flowpipe import B, C, Dataset, Pipeline, V
from flowpipe.execution.agreement import agree_on_run
from flowpipe.execution.run import RunArgs
from flowpipe.parallel import distributed
from flowpipe.parallel.distributed import World


def _pipeline(*extra):
    pipeline = Pipeline().init_variable('ids', []).update(V('ids', mode='a'), B.indices)
    for name in extra:
        pipeline = pipeline.init_variable(name, 0)
    return pipeline << Dataset(10)


class _Job:
    """The all-gathers of a job of 2 ranks, each rank a thread of this process."""

    def __init__(self):
        self.barrier, self.slots, self.local = threading.Barrier(2, timeout=60), [None, None], threading.local()
        self.gathers = 0

    def all_gather(self, value):
        self.slots[self.local.rank] = value
        self.barrier.wait()
        every = list(self.slots)
        self.barrier.wait()
        self.gathers += self.local.rank == 0
        return every

    def run(self, rank, pipeline, args, seed):
        self.local.rank = rank
        try:
            return agree_on_run(World(rank=rank, size=2), pipeline, args, 1, None, (seed, False))
        except ValueError as error:
            return error


def _agree(monkeypatch, mine, other, job=None):
    """``agree_on_run`` on rank 0 of (pipeline, args, seed) ``mine`` while rank 1 runs ``other``: rank 0's result;
    the error when every rank raised one."""
    job = job or _Job()
    monkeypatch.setattr(distributed, 'all_gather', job.all_gather)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(job.run, [0, 1], *zip(mine, other)))
    errors = [result for result in results if isinstance(result, ValueError)]
    assert len(errors) in (0, 2) and len({str(error) for error in errors}) <= 1     # every rank, the same message
    if errors:
        raise errors[0]
    return results[0]


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
    with pytest.raises(ValueError, match=r"config lr=0\.1 on rank 0 vs config lr=0\.2 on rank 1"):
        _agree(monkeypatch, (mine, args, 4), (_pipeline() << {'device': 'cuda:1', 'lr': 0.2}, args, 4))


def _trainer(**config):
    """A pipeline declaring a model whose config holds ``config`` below keys that fill its printed form."""
    full = {'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'loss': 'ce',
            'body': {'units': (8, 8)}, 'optimizer': {'name': 'SGD', 'lr': C('lr'), 'momentum': 0.9},
            'device': C('device'), **config}
    return (Pipeline().init_model('net', config=full).train_model('net', x=B.x, y=B.y)
            << Dataset(10) << {'lr': 0.1, 'device': 'cpu'})


@pytest.mark.parametrize('mine, other, message', [
    ({}, {'optimizer': {'name': 'SGD', 'lr': 0.5, 'momentum': 0.9}},
     "model 'net' optimizer/lr=0.1 on rank 0 vs model 'net' optimizer/lr=0.5 on rank 1"),
    ({'sharding': 'full'}, {'sharding': 'grad_op'},
     "model 'net' sharding='full' on rank 0 vs model 'net' sharding='grad_op' on rank 1"),
    ({'sharding': 'full'}, {'sharding': None},
     "model 'net' sharding='full' on rank 0 vs model 'net' sharding=None on rank 1"),
    ({'sharding': 'full'}, {}, "model 'net' sharding='full' on rank 0 vs model 'net' sharding=(not given) on rank 1"),
    ({'body': {'units': (8, 8)}}, {'body': {'units': (8, 16)}},
     "model 'net' body/units=(8, 8) on rank 0 vs model 'net' body/units=(8, 16) on rank 1")])
def test_ranks_with_another_model_config_value_are_refused_naming_the_key_values_and_ranks(monkeypatch, mine, other,
                                                                                              message):
    args = RunArgs(batch_size=3)
    with pytest.raises(ValueError, match='Expected every rank') as info:
        _agree(monkeypatch, (_trainer(**mine), args, 1), (_trainer(**other), args, 1))
    assert message in str(info.value)


def test_a_config_value_read_by_the_model_config_is_compared_evaluated(monkeypatch):
    args = RunArgs(batch_size=3)
    with pytest.raises(ValueError) as info:
        _agree(monkeypatch, (_trainer(), args, 1), (_trainer() << {'lr': 0.2}, args, 1))
    assert "config lr=0.1 on rank 0 vs config lr=0.2 on rank 1" in str(info.value)
    assert "model 'net' optimizer/lr=0.1 on rank 0 vs model 'net' optimizer/lr=0.2 on rank 1" in str(info.value)


def test_each_rank_may_name_its_own_device_in_a_model_config(monkeypatch):
    args = RunArgs(batch_size=3)
    mine, other = _trainer(), _trainer() << {'device': 'cuda:1'}
    other = other.init_model('other', config={'device': 'cuda:1', 'device_map': {'body': 'cuda:1'}})
    mine = mine.init_model('other', config={'device': 'cuda:0', 'device_map': {'body': 'cuda:0'}})
    assert _agree(monkeypatch, (mine, args, 2), (other, args, 2)) == (2, False)


def test_action_arguments_are_compared_whole(monkeypatch):
    args, long = RunArgs(batch_size=3), 'x' * 80
    with pytest.raises(ValueError, match=f"action #2 update.*{long}a.* on rank 0 vs action #2 update.*{long}b"):
        _agree(monkeypatch, (_pipeline().update(V('tag'), long + 'a'), args, 1),
               (_pipeline().update(V('tag'), long + 'b'), args, 1))


def test_two_lambdas_with_the_same_name_are_told_apart(monkeypatch):
    args = RunArgs(batch_size=3)
    with pytest.raises(ValueError, match='action #2 call'):
        _agree(monkeypatch, (_pipeline().call(lambda batch: batch.x + 1, B()), args, 1),
               (_pipeline().call(lambda batch: batch.x + 2, B()), args, 1))
    same = (_pipeline().call(lambda batch: batch.x + 1, B()), args, 1)
    assert _agree(monkeypatch, same, same) == (1, False)


def test_the_ranks_exchange_a_digest_and_their_descriptions_only_when_the_digests_differ(monkeypatch):
    args = RunArgs(batch_size=3)
    agreeing, differing = _Job(), _Job()
    _agree(monkeypatch, (_trainer(), args, 1), (_trainer(), args, 1), agreeing)
    with pytest.raises(ValueError):
        _agree(monkeypatch, (_trainer(), args, 1), (_trainer(sharding='full'), args, 1), differing)
    assert (agreeing.gathers, differing.gathers) == (1, 2)
