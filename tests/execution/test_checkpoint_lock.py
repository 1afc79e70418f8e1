"""One run at a time writes into a checkpoint folder: a second one, in this process or another, is refused
before it reads or removes anything; the lock of a process that died is taken over."""
import os
import subprocess
import sys

import pytest

from flowpipe import FolderInUseError
from flowpipe.parallel import launch

from .checkpoint_cases import RUN, TRIGGER, Crash, assert_same, outcome, pipeline, run_into
from .test_checkpoint import no_trigger  # noqa: F401 - autouse: every test starts and ends without a trigger


def _files(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder)) if (folder / name).is_file()}


def test_a_second_run_into_the_folder_of_a_running_one_is_refused_and_removes_nothing(tmp_path):
    running = pipeline().gen_batch(**RUN, checkpoint=tmp_path)
    for _ in range(4):
        next(running)                               # the checkpoint of batch 3 is written
    before = _files(tmp_path)
    assert 'checkpoint-000000003.flowpipe' in before
    for resume in (False, True):
        with pytest.raises(FolderInUseError, match=rf"run checkpoints in '{tmp_path}'.*another run of this process "
                                                   rf"\(pid {os.getpid()}\).*another folder"):
            pipeline().run(**RUN, checkpoint=tmp_path, resume=resume)
    assert _files(tmp_path) == before
    for _ in running:                               # the first run goes on to its end, then frees the folder
        pass
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000015.flowpipe']
    pipeline().run(**RUN, checkpoint=tmp_path, resume=True)


def test_a_run_that_raises_frees_its_folder(tmp_path):
    TRIGGER.update(at=5, error=Crash('batch 5'))
    with pytest.raises(Crash):
        pipeline().run(**RUN, checkpoint=tmp_path)
    TRIGGER.update(at=None, error=None)
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000005.flowpipe']
    pipeline().run(**RUN, checkpoint=tmp_path, resume=True)


def test_another_process_holds_the_folder_until_it_dies_and_its_lock_is_taken_over(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    code = ("import sys; from tests.execution.checkpoint_cases import RUN, pipeline; "
            "batches = pipeline().gen_batch(**RUN, checkpoint=sys.argv[1]); [next(batches) for _ in range(2)]; "
            "print('running', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, 'PYTHONPATH': os.getcwd()})
    try:
        assert child.stdout.readline() == 'running\n'       # the child's run holds the folder
        with pytest.raises(FolderInUseError, match=rf"run checkpoints in '{tmp_path}'.*held by pid {child.pid} on "
                                                   r"host .*another folder"):
            pipeline().run(**RUN, checkpoint=tmp_path, resume=True)
    finally:
        child.kill()
        child.wait()
    with pytest.warns(UserWarning, match=rf"took over the lock .* of pid {child.pid} on host"):
        resumed = pipeline().run(**RUN, checkpoint=tmp_path, resume=True)
    assert_same(reference, outcome(resumed))


def test_a_file_system_without_locks_is_said_and_the_run_goes_on(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, 'No locks available')
    monkeypatch.setattr(fcntl, 'flock', no_locks)
    with pytest.warns(UserWarning, match=rf"{tmp_path}' cannot lock files .*not detected"):
        pipeline().run(**RUN, checkpoint=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ['checkpoint-000000015.flowpipe']


@pytest.mark.slow        # several processes: in CI or with FLOWPIPE_SLOW=1
def test_every_rank_of_a_job_into_a_held_folder_raises_naming_the_holder(tmp_path):
    running = pipeline().gen_batch(**RUN, checkpoint=tmp_path)
    for _ in range(2):
        next(running)                               # the checkpoint of batch 1 is written
    before = _files(tmp_path)
    errors = launch(run_into, 2, args=(str(tmp_path / 'sub'),), timeout=240)
    assert errors == ['done', 'done']               # another folder: no lock in the way
    errors = launch(run_into, 2, args=(str(tmp_path),), timeout=240)
    for error in errors:
        assert f"run checkpoints in '{tmp_path}'" in error and f'held by pid {os.getpid()} on host' in error
    assert errors[0].startswith('FolderInUseError') and 'rank 0 failed with FolderInUseError' in errors[1]
    assert _files(tmp_path) == before
    running.close()


def test_a_checkpoint_folder_that_is_an_existing_file_is_named(tmp_path):
    from flowpipe import Dataset, Pipeline
    (tmp_path / 'ck').write_text('notes')
    with pytest.raises(ValueError, match=r'Expected a folder for the run checkpoints\. Received: .*an existing file'):
        (Pipeline() << Dataset(4)).run(batch_size=2, n_epochs=1, checkpoint=str(tmp_path / 'ck'))
    assert (tmp_path / 'ck').read_text() == 'notes'
