"""Suite-wide guards: no test may leave a non-daemon thread, a flowpipe worker thread (``flowpipe-*``, daemons
included: replica workers, monitors) or a process group behind; and the ``default_dtype`` fixture, which runs an
exactness test module once under each of torch's float32 and float64 default dtypes."""
import gc
import signal
import threading
import time

import pytest


def pytest_configure(config):
    """A suite started with SIGINT ignored (``nohup``, cron, a background job of a non-interactive shell, some CI
    runners) still tests Ctrl-C: the session takes Python's own SIGINT handler, as an interactive start has it, so
    ``KeyboardInterrupt`` is raised in the tests and the processes they start get SIGINT's default action."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _live_threads():
    return {t for t in threading.enumerate() if t.is_alive() and t is not threading.main_thread()
            and (not t.daemon or t.name.startswith('flowpipe-'))}


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = _live_threads()
    yield
    deadline = time.monotonic() + 120.0     # a loaded machine may be slow to end them
    leaked = _live_threads() - before
    if leaked:
        gc.collect()        # an engine dropped without close() stops its workers when collected
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = _live_threads() - before
    assert not leaked, f"test left threads alive: {sorted(t.name for t in leaked)}"


@pytest.fixture(scope='module', params=['float32', 'float64'], ids=lambda name: f'default-{name}')
def default_dtype(request):
    """torch's default dtype for the module's tests (and the ranks they ``launch``: the launcher passes it on);
    an exactness module takes it with ``pytestmark = pytest.mark.usefixtures('default_dtype')``, so a change that
    breaks a step under either default fails there. Module-scoped: a module's launched jobs run once per dtype."""
    import torch
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, request.param))
    yield getattr(torch, request.param)
    torch.set_default_dtype(previous)


@pytest.fixture(autouse=True)
def no_leaked_process_group():
    yield
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        pytest.fail("test left a torch.distributed process group initialized")


def pytest_collection_modifyitems(config, items):
    """Slow tests run in CI (``CI`` set) or with ``FLOWPIPE_SLOW=1``; GPU tests only where CUDA is present."""
    import os

    import torch
    run_slow = os.environ.get('FLOWPIPE_SLOW') == '1' or bool(os.environ.get('CI'))
    has_cuda = torch.cuda.is_available()
    for item in items:
        if 'slow' in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason='slow: set FLOWPIPE_SLOW=1 to run'))
        if 'gpu' in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason='needs a CUDA device'))
