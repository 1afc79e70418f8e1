"""Suite-wide guards: no test may leave a non-daemon thread or a process group behind."""
import threading
import time

import pytest


def _live_threads():
    return {t for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()}


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = _live_threads()
    yield
    deadline = time.monotonic() + 5.0
    leaked = _live_threads() - before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = _live_threads() - before
    assert not leaked, f"test left non-daemon threads alive: {sorted(t.name for t in leaked)}"


@pytest.fixture(autouse=True)
def no_leaked_process_group():
    yield
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        pytest.fail("test left a torch.distributed process group initialized")
