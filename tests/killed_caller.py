"""A caller killed while its worker process hangs: does the worker end? (shared by the data workers' and the
research's tests)"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker_ends_with_killed_caller(folder: Path, run: str, seconds: float = 100.0) -> bool:
    """Run a script whose ``run`` line hands ``hang()`` to a worker process (which writes its pid, then blocks
    forever), SIGKILL the script once the worker hangs, and wait up to ``seconds`` for the worker to end."""
    pids = folder / 'pids'
    script = folder / 'caller.py'
    script.write_text(textwrap.dedent(f'''
        import os, threading

        def hang():
            with open({str(pids)!r}, 'a') as file:
                file.write(f'{{os.getpid()}}\\n')
            threading.Event().wait()

    ''') + run + '\n')
    path = str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', '')
    caller = subprocess.Popen([sys.executable, str(script)], cwd=folder, env={**os.environ, 'PYTHONPATH': path})
    try:
        assert _until(lambda: pids.exists() and pids.read_text().endswith('\n'), seconds * 2), 'no worker hung'
        worker = int(pids.read_text().split()[0])
        assert worker != caller.pid
    finally:
        caller.kill()
        caller.wait()
    return _until(lambda: not _running(worker), seconds)


def _until(predicate, seconds):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def _running(pid):
    """Whether process ``pid`` runs (not gone, not a zombie)."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False
