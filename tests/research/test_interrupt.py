"""Ctrl-C stops a research: the caller raises KeyboardInterrupt, its workers are gone, and a rerun finishes."""
import os
import signal
import subprocess
import sys

import pytest

from .test_grid import GRID, _env, _finished, _wait

pytestmark = pytest.mark.slow


def test_sigint_stops_everything(tmp_path):
    psutil = pytest.importorskip('psutil')
    folder = str(tmp_path / 'grid')
    caller = subprocess.Popen([sys.executable, GRID, folder, '2', '2.0'], env=_env(), stderr=subprocess.PIPE,
                              text=True)
    try:
        assert _wait(lambda: len(psutil.Process(caller.pid).children()) >= 2 and len(_finished(folder)) >= 1)
        workers = psutil.Process(caller.pid).children(recursive=True)
        caller.send_signal(signal.SIGINT)
        _, err = caller.communicate(timeout=900)
    finally:
        if caller.poll() is None:
            caller.kill()
    assert caller.returncode != 0 and 'KeyboardInterrupt' in err
    def alive():
        return [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    # the workers are stopped before the caller exits; the resource tracker follows it when its pipe closes
    assert _wait(lambda: not alive(), 30), [p.cmdline() for p in alive()]
    assert len(_finished(folder)) < 8
    assert all(os.path.exists(os.path.join(folder, 'experiments', key, 'record.dill')) for key in _finished(folder))
