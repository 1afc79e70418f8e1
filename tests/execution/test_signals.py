"""Graceful stop: SIGTERM, SIGUSR1 and Ctrl-C during a run with a checkpoint finish the batch in flight, write its
checkpoint and stop; the resumed run ends as the uninterrupted one, bit for bit."""
import os
import signal
import subprocess
import sys
import threading
import warnings

import pytest
import torch

from flowpipe import Checkpoint, I, RunStopped
from flowpipe.execution.signals import GracefulStop

from . import signal_script
from .checkpoint_cases import RUN, assert_same, outcome, pipeline

pytestmark = pytest.mark.usefixtures('default_dtype')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENT = {'at': None, 'signals': (), 'after': []}


def send(number):
    """At batch ``SENT['at']``, send this process the signals ``SENT['signals']``, then note that the action went
    on (a second Ctrl-C must not let it)."""
    if number == SENT['at']:
        for sent in SENT['signals']:
            os.kill(os.getpid(), sent)
        SENT['after'].append(number)


@pytest.fixture(autouse=True)
def nothing_sent():
    SENT.update(at=None, signals=(), after=[])
    yield
    SENT.update(at=None, signals=(), after=[])


def signalled(at, *signals):
    SENT.update(at=at, signals=signals)
    return pipeline().call(send, I('c'))


def numbers(folder):
    return sorted(int(name.split('-')[1].split('.')[0]) for name in os.listdir(folder) if name.endswith('.flowpipe'))


def fake_scontrol(tmp_path, monkeypatch, job='4242'):
    """An ``scontrol`` on PATH that records its arguments, and a Slurm job id."""
    folder = tmp_path / 'bin'
    folder.mkdir()
    script = folder / 'scontrol'
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    script.chmod(0o755)
    monkeypatch.setenv('PATH', f'{folder}{os.pathsep}{os.environ["PATH"]}')
    monkeypatch.setenv('SLURM_JOB_ID', job)
    monkeypatch.delenv('SLURM_ARRAY_JOB_ID', raising=False)
    return tmp_path / 'scontrol.log'


def test_ctrl_c_inside_an_action_finishes_the_batch_and_writes_its_checkpoint(tmp_path):
    reference = outcome(signalled(None).run(**RUN, prefetch=2))
    with pytest.raises(KeyboardInterrupt):
        signalled(5, signal.SIGINT).run(**RUN, prefetch=2, checkpoint=Checkpoint(tmp_path, every=100))
    assert SENT['after'] == [5] and numbers(tmp_path) == [6]       # batch 5 (the sixth) completed
    SENT.update(at=None)
    assert_same(reference, outcome(signalled(None).run(**RUN, checkpoint=tmp_path, resume=True)))


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        signalled(5, signal.SIGINT, signal.SIGINT).run(**RUN, checkpoint=Checkpoint(tmp_path, every=100))
    assert SENT['after'] == [] and numbers(tmp_path) == []          # raised inside the action: nothing written


def test_handlers_are_restored_and_the_previous_one_runs_after_the_checkpoint(tmp_path):
    calls = []

    def previous(number, frame):
        calls.append((number, numbers(tmp_path)))
    before = {number: signal.signal(number, previous) for number in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        pipeline().run(**RUN, checkpoint=tmp_path / 'whole')          # a run that ends: the same handlers after
        assert signal.getsignal(signal.SIGUSR1) is previous and signal.getsignal(signal.SIGTERM) is previous
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and calls == []
        with pytest.raises(RunStopped) as stopped:
            signalled(3, signal.SIGUSR1).run(**RUN, checkpoint=Checkpoint(tmp_path, every=100))
        assert stopped.value.code == 128 + signal.SIGUSR1 and stopped.value.signal == 'SIGUSR1'
        assert not stopped.value.requeued
        assert calls == [(signal.SIGUSR1, [4])]
        assert signal.getsignal(signal.SIGUSR1) is previous and signal.getsignal(signal.SIGTERM) is previous
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_a_run_in_another_thread_warns_and_runs(tmp_path):
    reference = outcome(pipeline().run(**RUN))
    done, caught = [], []

    def target():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter('always')
            done.append(pipeline().run(**RUN, checkpoint=tmp_path))
        caught.extend(str(warning.message) for warning in seen if warning.category is RuntimeWarning)
    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert len(caught) == 1 and 'outside the main thread' in caught[0]
    assert_same(reference, outcome(done[0]))
    assert numbers(tmp_path) == [15]


def test_sigusr1_requeues_a_slurm_job_after_the_checkpoint(tmp_path, monkeypatch):
    log = fake_scontrol(tmp_path, monkeypatch)
    folder = tmp_path / 'checkpoints'
    with pytest.raises(RunStopped) as stopped:
        signalled(2, signal.SIGUSR1).run(**RUN, checkpoint=Checkpoint(folder, every=100))
    assert stopped.value.requeued and log.read_text() == 'requeue 4242\n' and numbers(folder) == [3]


def test_sigterm_requeues_only_when_asked(tmp_path, monkeypatch):
    log = fake_scontrol(tmp_path, monkeypatch)
    with pytest.raises(RunStopped) as stopped:
        signalled(2, signal.SIGTERM).run(**RUN, checkpoint=Checkpoint(tmp_path / 'one', every=100))
    assert stopped.value.code == 128 + signal.SIGTERM and not stopped.value.requeued and not log.exists()
    monkeypatch.setenv('SLURM_ARRAY_JOB_ID', '17')
    monkeypatch.setenv('SLURM_ARRAY_TASK_ID', '3')
    with pytest.raises(RunStopped) as stopped:
        signalled(2, signal.SIGTERM).run(**RUN, checkpoint=Checkpoint(tmp_path / 'two', every=100,
                                                                      requeue=('SIGUSR1', 'SIGTERM')))
    assert stopped.value.requeued and log.read_text() == 'requeue 17_3\n'


def test_no_scontrol_warns_that_the_job_is_not_requeued(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))
    monkeypatch.setenv('SLURM_JOB_ID', '5')
    with pytest.warns(RuntimeWarning, match='not requeued: no scontrol on PATH'):
        with pytest.raises(RunStopped) as stopped:
            signalled(2, signal.SIGUSR1).run(**RUN, checkpoint=Checkpoint(tmp_path / 'c', every=100))
    assert not stopped.value.requeued and numbers(tmp_path / 'c') == [3]


def test_on_interrupt_false_installs_no_handler(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        signalled(5, signal.SIGINT).run(**RUN, checkpoint=Checkpoint(tmp_path, every=2, on_interrupt=False))
    assert SENT['after'] == [] and numbers(tmp_path) == [4]


def test_bad_requeue(tmp_path):
    with pytest.raises(ValueError, match="among 'SIGUSR1' and 'SIGTERM'"):
        Checkpoint(tmp_path, requeue='SIGHUP')
    with pytest.raises(TypeError, match='signal name'):
        Checkpoint(tmp_path, requeue=10)
    assert Checkpoint(tmp_path, requeue='SIGTERM').requeue == ('SIGTERM',)


@pytest.mark.parametrize('name', ['SIGTERM', 'SIGUSR1'])
def test_a_signal_in_mid_epoch_stops_a_process_at_the_next_batch_boundary(tmp_path, name, default_dtype):
    """A real process gets the signal while batch 6 is in flight: it exits with 128 + the signal's number after
    writing checkpoint 7; the same script resumes it (requeued, for SIGUSR1 under Slurm) to the uninterrupted
    result, and a third start trains no more."""
    number = getattr(signal, name)
    log = tmp_path / 'scontrol.log'
    (tmp_path / 'bin').mkdir()
    (tmp_path / 'bin' / 'scontrol').write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (tmp_path / 'bin' / 'scontrol').chmod(0o755)
    env = {**os.environ, 'PYTHONPATH': ROOT, 'SLURM_JOB_ID': '99', 'PATH': f'{tmp_path / "bin"}:{os.environ["PATH"]}'}
    dtype = str(default_dtype).removeprefix('torch.')
    folder, out = tmp_path / 'checkpoints', tmp_path / 'out.pt'
    command = [sys.executable, signal_script.__file__, str(folder), str(out), dtype]
    child = subprocess.Popen([*command, '--at', '6'], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == 'batch 6'
        child.send_signal(number)
        child.stdin.write('go\n')
        child.stdin.flush()
        assert child.wait() == 128 + number
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert numbers(folder) == [7] and not out.exists()
    assert (log.read_text() if log.exists() else '') == ('requeue 99\n' if name == 'SIGUSR1' else '')
    reference = outcome(signal_script.pipeline().run(**RUN, prefetch=2))
    for _ in range(2):                                 # the requeued job, then one started again after it ended
        subprocess.run(command, env=env, check=True)
        assert_same(reference, torch.load(out, weights_only=False))
        assert numbers(folder) == [15]


def test_a_run_closed_in_another_thread_hands_the_next_signal_to_the_previous_handler():
    """A ``gen_batch`` generator closed outside the main thread cannot put the handlers back: the next signal
    does, and reaches the handler that was there before the run."""
    calls = []
    before = signal.signal(signal.SIGUSR1, lambda number, frame: calls.append(number))
    try:
        previous = signal.getsignal(signal.SIGUSR1)
        stop = GracefulStop()
        stop.install()
        closer = threading.Thread(target=stop.restore)
        closer.start()
        closer.join()
        assert signal.getsignal(signal.SIGUSR1) == stop._note
        os.kill(os.getpid(), signal.SIGUSR1)
        assert calls == [signal.SIGUSR1] and stop.received == []
        assert signal.getsignal(signal.SIGUSR1) is previous
        stop.restore()                                   # in the main thread now: puts back the other handlers
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_the_suite_tests_ctrl_c_when_it_was_started_with_sigint_ignored():
    """``nohup``, cron and background jobs start the suite with SIGINT ignored: its conftest takes Python's own
    handler back, so the Ctrl-C tests still raise ``KeyboardInterrupt`` (they failed with "DID NOT RAISE")."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', __file__, '-k',
                           'second_ctrl_c_stops_at_once and float32'], cwd=root, capture_output=True, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stdout[-2000:]
    assert '1 passed' in done.stdout
