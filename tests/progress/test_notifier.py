"""batchflow's Notifier, notifier() and resource monitors on flowpipe's bar."""
import io
import time

import numpy as np
import pytest

from flowpipe import B, CPUMonitor, Dataset, I, MemoryMonitor, Monitor, Notifier, V, notifier
from flowpipe.progress import read_resource


def _text():
    return {'bar': 't', 'file': io.StringIO()}


def test_wraps_iterables_and_counts():
    stream = io.StringIO()
    assert list(Notifier('t', file=stream)(range(5))) == list(range(5))
    assert '5/5' in stream.getvalue()
    assert sum(notifier(iter(range(4)), bar=None)) == 6


def test_manual_updates_and_context_manager():
    stream = io.StringIO()
    with Notifier('t', total=3, file=stream) as ntf:
        for _ in range(3):
            ntf.update()
    assert ntf.n == 3 and '3/3' in stream.getvalue()


def test_monitors_keep_history_log_and_show_on_the_bar(tmp_path):
    container, log = [], tmp_path / 'log.txt'
    stream = io.StringIO()
    ntf = Notifier('t', monitors=['memory', container, {'source': 'cpu', 'name': 'load'}], log_file=str(log),
                   file=stream)
    for value in ntf(range(4)):
        container.append(value ** 2)
    memory, squares, load = ntf.monitors
    assert squares.history == [0, 1, 4, 9] and load.name == 'load'
    assert all(value > 0 for value in memory.history)
    assert log.read_text().splitlines()[-1].startswith('4: memory=')
    assert 'load=' in stream.getvalue()


def test_a_run_with_a_notifier_monitors_variables():
    pipeline = (Dataset(10).p.init_variable('loss', [])
                .update(V('loss', mode='a'), 100 * 2 ** (-I())))
    ntf = Notifier('t', monitors='loss', desc='fancy', graphs=['memory'], file=io.StringIO())
    pipeline.run(1, n_iters=4, notifier=ntf)
    assert ntf.monitors[0].history == [100, 50, 25, 12.5]
    assert len(ntf.graphs[0].history) == 4 and ntf.n == 4
    silent = Notifier(None, graphs=['loss'])
    pipeline.run(1, n_iters=2, notifier=silent)
    assert silent.graphs[0].history == [100, 50]    # the variable keeps growing; each run counts from 0
    pipeline.run(1, n_iters=1, notifier='t')


def test_plot_draws_every_tracked_value(tmp_path):
    plt = pytest.importorskip('matplotlib.pyplot')
    plt.switch_backend('Agg')
    ntf = Notifier(None, graphs=['memory', {'source': np.ones((3, 3)), 'name': 'image'}])
    for _ in ntf(range(2)):
        pass
    figure = ntf.plot(path=tmp_path / 'graphs.png')
    assert len(figure.axes) == 2 and (tmp_path / 'graphs.png').is_file()
    plt.close(figure)
    with pytest.warns(UserWarning, match=r"Notifier.plot\(\) drew a figure that nothing shows.*path="):
        figure = ntf.plot()
    plt.close(figure)
    with pytest.raises(ValueError, match='tracks nothing'):
        Notifier(None).plot()


def test_resource_monitors_sample_in_a_thread():
    with CPUMonitor(frequency=0.01) as cpu, Monitor(['memory', 'cpu'], frequency=0.01) as both:
        deadline = time.monotonic() + 300           # a loaded machine may delay the sampling thread
        while min(len(cpu.data['cpu']), len(both.data['memory'])) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(cpu.data['cpu']) >= 2 and len(both.times) == len(both.data['memory']) >= 2
    assert isinstance(MemoryMonitor(), Monitor)
    with pytest.raises(ValueError, match="resources among"):
        Monitor('disk')
    with pytest.raises(ValueError, match='frequency > 0'):
        CPUMonitor(frequency=0)
    assert read_resource('gpu_memory') >= 0.0


def test_starting_a_sampling_monitor_again_starts_no_second_thread():
    import threading
    monitor = CPUMonitor(frequency=0.01).start()
    try:
        assert monitor.start() is monitor
        assert sum(thread.name == 'flowpipe-monitor' for thread in threading.enumerate()) == 1
    finally:
        monitor.stop()
    assert not any(thread.name == 'flowpipe-monitor' for thread in threading.enumerate())


def test_gpu_utilisation_needs_its_library(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    with pytest.raises(ImportError, match='nvidia-ml-py'):
        read_resource('gpu')


def test_cpu_readings_are_kept_per_caller_and_dropped_with_it():
    import gc

    from flowpipe.progress import resources

    class Caller:
        pass
    caller = Caller()
    assert read_resource('cpu', key=caller) == 0.0                 # a caller's first reading: nothing to compare
    sum(i * i for i in range(100000))
    assert read_resource('cpu', key=caller) >= 0.0 and caller in resources._CPU_LAST
    before = len(resources._CPU_LAST)
    del caller
    gc.collect()
    assert len(resources._CPU_LAST) == before - 1
