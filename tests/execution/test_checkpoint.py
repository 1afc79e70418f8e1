"""Checkpoints: a run stopped at batch k and resumed ends exactly as the run that was never stopped."""
import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from flowpipe import B, Checkpoint, CheckpointError, Dataset, F, I, Pipeline, V, safe_pickle
from flowpipe.execution import checkpoint as files
from flowpipe.models.torch import TorchModel

from . import checkpoint_cases as cases
from .checkpoint_cases import RUN, TRIGGER, Crash, assert_same, outcome, pipeline



@pytest.fixture(autouse=True)
def no_trigger():
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')
    yield
    TRIGGER.update(at=None, error=None, delay=0.0, where='first')


def crash_at(at, error=None, where='first', **run):
    TRIGGER.update(at=at, error=error or Crash(f'batch {at}'), where=where)
    with pytest.raises(type(TRIGGER['error'])):
        pipeline(**run.pop('make', {})).run(**run)
    TRIGGER.update(at=None, error=None)


def numbers(folder):
    return sorted(int(name.split('-')[1].split('.')[0]) for name in os.listdir(folder) if name.endswith('.flowpipe'))


@pytest.mark.parametrize('prefetch', [0, 4])
@pytest.mark.parametrize('where', ['first', 'last'])
def test_a_crashed_run_resumes_to_the_uninterrupted_result(tmp_path, prefetch, where):
    reference = outcome(pipeline().run(**RUN, prefetch=prefetch))
    crash_at(7, where=where, **RUN, prefetch=prefetch, checkpoint=tmp_path)
    assert numbers(tmp_path) == [7]                          # the last completed batch's, and only it (keep=1)
    resumed = outcome(pipeline().run(**RUN, prefetch=prefetch, checkpoint=tmp_path, resume=True))
    assert_same(reference, resumed)
    assert numbers(tmp_path) == [15]


def test_prefetch_may_change_between_the_crash_and_the_resume(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    crash_at(4, **RUN, prefetch=3, checkpoint=tmp_path)
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path, resume=True)))


def test_float64_one_device_and_the_global_torch_generator(tmp_path):
    """No seed given: shuffling off, dropout from step seeds drawn from torch's global generator."""
    make = {'devices': ('cpu',), 'microbatch': None, 'dtype': torch.float64, 'augment': False}
    run = {'batch_size': 8, 'n_epochs': 2}
    torch.manual_seed(1)
    reference = outcome(pipeline(**make).run(**run))
    torch.manual_seed(1)
    crash_at(6, make=make, **run, checkpoint=tmp_path)
    torch.manual_seed(123)                                   # the checkpoint restores the generator's state
    assert_same(reference, outcome(pipeline(**make).run(**run, checkpoint=tmp_path, resume=True)))


def test_ctrl_c_writes_the_last_completed_batch_and_stops_the_workers(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    crash_at(5, KeyboardInterrupt(), **RUN, prefetch=4, checkpoint=Checkpoint(tmp_path, every=100))
    assert numbers(tmp_path) == [5]
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path, resume=True)))


def test_on_interrupt_false_keeps_only_the_periodic_checkpoints(tmp_path):
    crash_at(5, KeyboardInterrupt(), **RUN, checkpoint={'path': tmp_path, 'every': 2, 'on_interrupt': False})
    assert numbers(tmp_path) == [4]


def test_ctrl_c_in_the_middle_of_a_batch_keeps_the_checkpoint_before_it(tmp_path):
    """Batch 5 has trained when the interrupt comes: a checkpoint now would hold half of it."""
    reference = outcome(pipeline().run(**RUN))
    crash_at(5, KeyboardInterrupt(), where='last', **RUN, checkpoint=Checkpoint(tmp_path, every=2))
    assert numbers(tmp_path) == [4]
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path, resume=True)))


def test_every_and_keep(tmp_path):
    pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, every=4, keep=2))
    assert numbers(tmp_path) == [12, 15]                     # 4, 8, 12, then the end of the run


def test_every_counts_the_run_s_batches_across_a_resume(tmp_path):
    crash_at(5, KeyboardInterrupt(), **RUN, checkpoint=Checkpoint(tmp_path, every=4, keep=10))
    assert numbers(tmp_path) == [4, 5]                         # 4, then the interrupt's
    pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, every=4, keep=10), resume=True)
    assert numbers(tmp_path) == [4, 5, 8, 12, 15]              # the same batches as a run never interrupted


def test_a_run_resumed_from_an_older_checkpoint_replaces_the_files_after_it(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    pipeline().run(**RUN, checkpoint=Checkpoint(tmp_path, keep=20))
    assert numbers(tmp_path) == list(range(1, 16))
    crash_at(10, **RUN, checkpoint=tmp_path, resume=str(tmp_path / 'checkpoint-000000008.flowpipe'))
    assert numbers(tmp_path) == [10]           # keep=1: the resumed run's newest; 11 to 15 were the first run's
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path, resume=True)))


def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    reference = outcome(pipeline().run(**RUN))
    real_dump, calls = safe_pickle.dump, []

    def dump_then_die(payload, file, *args):
        calls.append(1)
        if len(calls) == 4:
            file.write(b'half a checkpoint')
            raise Crash('killed while writing')
        real_dump(payload, file, *args)
    monkeypatch.setattr(safe_pickle, 'dump', dump_then_die)
    with pytest.raises(Crash, match='while writing'):
        pipeline().run(**RUN, checkpoint=tmp_path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ['checkpoint-000000003.flowpipe']     # no temporary file left either
    assert files.read(str(tmp_path / 'checkpoint-000000003.flowpipe'))['batches'] == 3
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path, resume=True)))


def test_a_full_disk_names_the_checkpoint_and_keeps_the_previous_one(tmp_path, monkeypatch):
    real_dump, calls, before = safe_pickle.dump, [], {}

    def dump_until_the_disk_is_full(payload, file, *args):
        calls.append(1)
        if len(calls) == 4:
            before['bytes'] = (tmp_path / 'checkpoint-000000003.flowpipe').read_bytes()
            file.write(b'the part that fitted')
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_dump(payload, file, *args)
    monkeypatch.setattr(safe_pickle, 'dump', dump_until_the_disk_is_full)
    with pytest.raises(OSError) as caught:
        pipeline().run(**RUN, checkpoint=tmp_path)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    note = '\n'.join(caught.value.__notes__)
    assert str(tmp_path / 'checkpoint-000000004.flowpipe') in note
    assert f"previous checkpoint {tmp_path / 'checkpoint-000000003.flowpipe'} is intact" in note
    assert os.listdir(tmp_path) == ['checkpoint-000000003.flowpipe']     # the temporary file is removed
    assert (tmp_path / 'checkpoint-000000003.flowpipe').read_bytes() == before['bytes']


def test_a_different_pipeline_or_run_is_refused(tmp_path):
    crash_at(3, **RUN, checkpoint=tmp_path)
    other = pipeline().update(V('loss'), V('loss'))
    with pytest.raises(CheckpointError, match=r"action #8: \(none\) → update"):
        other.run(**RUN, checkpoint=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match="batch_size: 8 → 4"):
        pipeline().run(**{**RUN, 'batch_size': 4}, checkpoint=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match=r"config lr: \(not given\) → 1"):
        (pipeline() << {'lr': 1}).run(**RUN, checkpoint=tmp_path, resume=True)


def test_a_run_that_does_not_resume_refuses_a_folder_with_checkpoints(tmp_path):
    crash_at(3, **RUN, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="empty checkpoint folder.*resume=True"):
        pipeline().run(**RUN, checkpoint=tmp_path)
    assert numbers(tmp_path) == [3]


def _counter():
    yield 1


def test_a_variable_that_does_not_pickle_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="variable 'counter' of type generator"):
        pipeline().update(V('counter'), F(_counter)()).run(**RUN, checkpoint=tmp_path)
    assert not os.listdir(tmp_path)


def test_a_corrupt_checkpoint_is_named(tmp_path):
    (tmp_path / 'checkpoint-000000002.flowpipe').write_bytes(b'not a pickle')
    with pytest.raises(CheckpointError, match="cannot be read.*Delete it"):
        pipeline().run(**RUN, checkpoint=tmp_path, resume=True)


def test_resume_without_a_checkpoint_starts_from_the_beginning(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    assert_same(reference, outcome(pipeline().run(**RUN, checkpoint=tmp_path / 'new', resume=True)))
    finished = pipeline().run(**RUN, checkpoint=tmp_path / 'new', resume=True)   # a finished run: nothing to do
    assert finished.v('loss') == reference['loss']


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="checkpoint=path with resume=True"):
        pipeline().run(**RUN, resume=True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pipeline().run(**RUN, resume=str(tmp_path / 'missing'))
    with pytest.raises(ValueError, match="every as an int >= 1"):
        pipeline().run(**RUN, checkpoint={'path': tmp_path, 'every': 0})
    with pytest.raises(TypeError, match="checkpoint= as a folder path"):
        pipeline().run(**RUN, checkpoint=3)


def test_pipelines_a_checkpoint_cannot_hold_are_refused_before_any_batch(tmp_path):
    dataset = Dataset(10)
    recut = (Pipeline().init_variable('n', 0).rebatch(4).update(V('n'), V('n') + B.size)) << dataset
    with pytest.raises(CheckpointError, match="without rebatch"):
        recut.run(2, checkpoint=tmp_path)
    joined = (Pipeline().join(Pipeline() << dataset).call(print)) << dataset
    with pytest.raises(CheckpointError, match="without join or merge"):
        joined.run(2, checkpoint=tmp_path)
    assert recut.v('n') == 0 and not os.listdir(tmp_path)


def _fine_tuning(start):
    """``load_model`` then training: the file is loaded by the first batch only, later batches train on."""
    dataset = pipeline().dataset
    return (Pipeline().init_variable('loss', []).init_variable('draws', []).load_model('net', str(start))
            .call(cases.interrupt, I('c'), 'first')
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset


def test_a_model_from_load_model_resumes_with_its_trained_weights(tmp_path):
    config = {'model': cases.network(), 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'loss': 'ce',
              'optimizer': {'name': 'SGD', 'lr': 0.1}}
    TorchModel(config).save(tmp_path / 'start.pt')
    reference = outcome(_fine_tuning(tmp_path / 'start.pt').run(**RUN))
    TRIGGER.update(at=6, error=Crash('batch 6'))
    with pytest.raises(Crash):
        _fine_tuning(tmp_path / 'start.pt').run(**RUN, checkpoint=tmp_path / 'checkpoints')
    TRIGGER.update(at=None, error=None)
    resumed = _fine_tuning(tmp_path / 'start.pt').run(**RUN, checkpoint=tmp_path / 'checkpoints', resume=True)
    assert_same(reference, outcome(resumed))


def test_gen_batch_checkpoints_when_the_loop_asks_for_the_next_batch(tmp_path):
    seen = [batch.indices.tolist() for batch in pipeline().gen_batch(**RUN)]
    first = []
    for batch in pipeline().gen_batch(**RUN, prefetch=2, checkpoint=tmp_path):
        first.append(batch.indices.tolist())
        if len(first) == 4:
            break
    assert numbers(tmp_path) == [4]
    rest = [batch.indices.tolist() for batch in pipeline().gen_batch(**RUN, checkpoint=tmp_path, resume=True)]
    assert first + rest == seen


@pytest.mark.slow     # a killed process: run in CI or with FLOWPIPE_SLOW=1
def test_a_killed_process_resumes_to_the_uninterrupted_result(tmp_path):
    """A real SIGKILL in the middle of a run (maybe in the middle of a write), then a fresh process resumes."""
    script, env = cases.__file__, {**os.environ, 'PYTHONPATH': os.getcwd()}
    folder, out = tmp_path / 'checkpoints', tmp_path / 'resumed.pt'
    child = subprocess.Popen([sys.executable, script, str(folder), str(out), '--slow'], env=env)
    try:
        deadline = time.monotonic() + 600
        while not (folder.is_dir() and any(n >= 3 for n in numbers(folder))):
            assert child.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not out.exists() and 3 <= numbers(folder)[-1] < 15
    subprocess.run([sys.executable, script, str(folder), str(out)], env=env, check=True, timeout=900)
    assert_same(outcome(pipeline().run(**RUN)), torch.load(out, weights_only=False))
