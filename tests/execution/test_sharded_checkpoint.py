"""``Checkpoint(sharded=True)`` in one process: the weights and optimizer state go into a folder of shards
(torch.distributed.checkpoint) beside each file, removed with it; a crashed run resumes to the uninterrupted
result. Sharded models in several processes: tests/parallel/test_sharded_resume.py."""
import os

import pytest

from flowpipe import Checkpoint
from flowpipe.execution import checkpoint as files

from .checkpoint_cases import RUN, TRIGGER, assert_same, outcome, pipeline
from .test_checkpoint import crash_at



@pytest.fixture(autouse=True)
def no_trigger():
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')
    yield
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')


def test_a_crashed_run_resumes_from_its_shards_to_the_uninterrupted_result(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    crash_at(7, **RUN, checkpoint=Checkpoint(tmp_path, sharded=True))
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000007.flowpipe', 'checkpoint-000000007.shards']
    saved = files.read(str(tmp_path / 'checkpoint-000000007.flowpipe'))
    assert saved['models']['net']['state']['network'] is None      # the weights are in the shards only
    assert saved['shards'] == {'net': True}
    resumed = outcome(pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, sharded=True), resume=True))
    assert_same(reference, resumed)
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000015.flowpipe', 'checkpoint-000000015.shards']


def test_keep_removes_the_shards_of_the_files_it_removes(tmp_path):
    pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, every=4, keep=2, sharded=True))
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000012.flowpipe', 'checkpoint-000000012.shards',
                                            'checkpoint-000000015.flowpipe', 'checkpoint-000000015.shards']


def test_a_file_whose_shards_are_gone_is_a_clear_error(tmp_path):
    crash_at(3, **RUN, checkpoint=Checkpoint(tmp_path, sharded=True))
    for name in os.listdir(tmp_path / 'checkpoint-000000003.shards'):
        os.unlink(tmp_path / 'checkpoint-000000003.shards' / name)
    with pytest.raises(FileNotFoundError, match='Expected a folder of shards'):
        pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, sharded=True), resume=True)


def test_sharded_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match='Expected sharded as True or False'):
        Checkpoint(tmp_path, sharded='yes')
    assert files.as_checkpoint({'path': str(tmp_path), 'sharded': True}).sharded is True
