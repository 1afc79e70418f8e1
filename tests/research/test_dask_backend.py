"""``Research.run(executor=...)`` on Dask (``flowpipe/research/dask_backend.py``), against real ``LocalCluster``s on
127.0.0.1: the same table as the local pool, a killed worker recorded and rerun, an existing cluster left as it
was, devices as worker resources, and no process left behind."""
import os
import sys

import numpy as np
import pytest

from flowpipe.research import dask_backend
from flowpipe.research.dask_backend import is_dask, open_dask

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_is_dask_names_the_three_forms_without_importing_dask():
    assert is_dask('dask') and is_dask('tcp://127.0.0.1:8786') and is_dask('tls://10.0.0.5:8786')
    assert not is_dask('local') and not is_dask(None) and not is_dask(object()) and not is_dask('127.0.0.1:8786')


def test_importing_the_research_package_imports_no_dask():
    import subprocess
    code = ("import sys, flowpipe.research, flowpipe.research.scheduler, flowpipe.research.dask_backend; "
            "print(sorted(name for name in ('dask', 'distributed') if name in sys.modules))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                         env={**os.environ, 'PYTHONPATH': _ROOT}).stdout
    assert out.strip() == '[]'


def test_a_missing_distributed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'distributed', None)      # what an environment without it imports
    with pytest.raises(ImportError, match=r"flowpipe\[dask\]"):
        open_dask('dask', 2)


def test_bad_executor_forms_are_refused_before_any_cluster_starts():
    pytest.importorskip('distributed')
    with pytest.raises(ValueError, match="Expected workers to be a positive int"):
        open_dask('dask', 0)
    with pytest.raises(ValueError, match="Expected executor='dask', a scheduler address"):
        open_dask('dusk', 2)


def test_an_unknown_executor_name_lists_the_dask_forms():
    from flowpipe.research.scheduler import make_executor
    with pytest.raises(ValueError, match=r"'dask', a Dask scheduler address"):
        make_executor('dusk', 2)


def test_main_hidden_restores_the_script():
    main = sys.modules['__main__']
    before = (main.__dict__.get('__file__'), main.__dict__.get('__spec__'))
    with dask_backend.main_hidden():
        assert '__file__' not in main.__dict__ and main.__spec__ is None
    assert (main.__dict__.get('__file__'), main.__dict__.get('__spec__')) == before


# ----- against real clusters (slow) -----
def _research(name, domain=None, n_reps=1):
    from flowpipe.research import EC, Option, Research
    research = Research(name=name, domain=domain or Option('lr', [0.1, 0.2]), n_reps=n_reps)
    return research.add_callable('draw', _draw, lr=EC('lr'), device=EC('device'), save_to=['value', 'device'])


def _draw(lr, device):
    """A unit whose result depends on the experiment's seed (the torch generator run_task seeds)."""
    import torch
    return round(float(torch.randn(1)) * lr, 8), str(device)


def _table(research):
    frame = research.results.df
    return sorted(zip(frame['id'], frame['lr'], frame['iteration'], frame['value']))


def _children():
    import psutil
    return {child.pid for child in psutil.Process().children(recursive=True)
            if 'resource_tracker' not in ' '.join(child.cmdline())}


@pytest.fixture
def cluster():
    distributed = pytest.importorskip('distributed')
    with dask_backend.main_hidden():
        local = distributed.LocalCluster(host='127.0.0.1', n_workers=2, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=50)
    client = distributed.Client(local, set_as_default=False)
    yield local, client
    client.close()
    local.close()


@pytest.mark.slow
def test_a_grid_gives_the_same_table_as_the_local_pool_and_leaves_no_process(tmp_path):
    pytest.importorskip('distributed')
    before, main_file = _children(), sys.modules['__main__'].__dict__.get('__file__')
    local = _research(str(tmp_path / 'local'), n_reps=2).run(n_iters=2, workers=2, devices=['CPU:0', 'CPU:1'],
                                                             bar=False, seed=11)
    dask = _research(str(tmp_path / 'dask'), n_reps=2).run(n_iters=2, workers=2, devices=['CPU:0', 'CPU:1'],
                                                           bar=False, seed=11, executor='dask')
    assert len(_table(dask)) == 8 and _table(dask) == _table(local)
    assert set(dask.results.df['device']) <= {'CPU:0', 'CPU:1'}
    assert not any('failed' in line for line in dask.storage.log)
    assert _children() == before             # the LocalCluster's nannies and workers are gone
    assert sys.modules['__main__'].__dict__.get('__file__') == main_file      # the script is the caller's again


def _die_once(marker, lr):
    """Kill the worker process the first time the experiment with ``lr == 0.2`` runs."""
    if lr == 0.2 and not os.path.exists(marker):
        open(marker, 'w').close()
        os._exit(7)
    return lr


@pytest.mark.slow
def test_a_worker_killed_mid_experiment_is_recorded_and_the_next_run_reruns_only_it(tmp_path):
    pytest.importorskip('distributed')
    from flowpipe.research import EC, Option, Research
    name, marker = str(tmp_path / 'killed'), str(tmp_path / 'marker')

    def make():
        return Research(name=name, domain=Option('lr', [0.1, 0.2, 0.3])).add_callable(
            'step', _die_once, marker=marker, lr=EC('lr'), save_to='value')

    first = make().run(n_iters=1, workers=2, bar=False, seed=5, executor='dask')
    log = '\n'.join(first.storage.log)
    assert 'WorkerDied' in log and 'Dask worker process' in log
    assert sorted(first.results.df['value']) == [0.1, 0.3]          # the others went on
    second = make().run(n_iters=1, workers=2, bar=False, seed=5, executor='dask')
    assert 'Research is starting: 2 experiments already finished' in '\n'.join(second.storage.log)
    assert sorted(second.results.df['value']) == [0.1, 0.2, 0.3]


@pytest.mark.slow
def test_an_existing_cluster_by_address_or_client_runs_the_research_and_stays_up(tmp_path, cluster):
    local, client = cluster
    workers = set(client.scheduler_info()['workers'])
    options = {'n_iters': 2, 'workers': 2, 'devices': ['CPU:0', 'CPU:1'], 'bar': False, 'seed': 3}
    by_address = _research(str(tmp_path / 'address')).run(executor=local.scheduler_address, **options)
    by_client = _research(str(tmp_path / 'client')).run(executor=client, **options)
    assert len(_table(by_address)) == 4 and _table(by_address) == _table(by_client)
    assert client.status == 'running' and set(client.scheduler_info()['workers']) == workers
    assert client.submit(np.add, 1, 2).result() == 3


@pytest.mark.slow
def test_devices_declared_as_worker_resources_go_with_each_task(tmp_path):
    distributed = pytest.importorskip('distributed')
    with dask_backend.main_hidden():
        local = distributed.LocalCluster(host='127.0.0.1', n_workers=1, threads_per_worker=2, processes=True,
                                         dashboard_address=None, silence_logs=50,
                                         resources={'CPU:0': 1, 'CPU:1': 1})
    client = distributed.Client(local, set_as_default=False)
    try:
        executor = open_dask(client)
        from flowpipe.research.jobs import Task
        task = Task(None, [{}, {}], ['a', 'b'], [None, None], [['CPU:0', 'CPU:1'], None], 1, {}, [None, None])
        assert executor.resources_for(task) == {'CPU:0': 1, 'CPU:1': 1}
        task.devices = ['GPU:3']
        assert executor.resources_for(task) is None                # no worker declares it: no constraint
        executor.shutdown()
        research = _research(str(tmp_path / 'resources')).run(n_iters=1, workers=2, devices=['CPU:0', 'CPU:1'],
                                                               bar=False, seed=3, executor=client)
        assert sorted(research.results.df['device']) == ['CPU:0', 'CPU:1']
    finally:
        client.close()
        local.close()


@pytest.mark.slow
def test_shutdown_cancels_what_waits_and_fails_a_submit_after_it():
    pytest.importorskip('distributed')
    import time
    executor = open_dask('dask', 1)
    futures = [executor.submit(time.sleep, 30) for _ in range(3)]
    executor.shutdown(cancel_futures=True)
    assert all(future.cancelled() for future in futures)
    with pytest.raises(RuntimeError, match='after shutdown'):
        executor.submit(time.sleep, 0)


@pytest.mark.slow
def test_the_digits_grid_gives_the_same_table_on_dask_as_on_the_local_pool(tmp_path):
    pytest.importorskip('distributed')
    from tests.research import grid
    tables = []
    for executor in (None, 'dask'):
        research = grid.make_research(str(tmp_path / str(executor)))
        research.run(n_iters=grid.N_ITERS, workers=2, devices=['CPU:0', 'CPU:1'], seed=grid.SEED, bar=False,
                     executor=executor)
        tables.append(grid.table(research))
    assert len(tables[1]) == 8 * grid.N_ITERS and tables[1] == tables[0]


_INTERRUPTED = """
import sys, time
from flowpipe.research import Option, Research
def pause(lr):
    time.sleep(60)
research = Research(name=sys.argv[1], domain=Option('lr', [0.1, 0.2, 0.3])).add_callable('pause', pause, lr=0.1)
print('starting', flush=True)
research.run(n_iters=1, workers=2, bar=False, executor='dask')
"""


@pytest.mark.slow
def test_ctrl_c_stops_a_research_on_dask_and_its_cluster(tmp_path):
    pytest.importorskip('distributed')
    import signal
    import subprocess
    import time

    import psutil
    script = tmp_path / 'interrupted.py'
    script.write_text(_INTERRUPTED, encoding='utf-8')
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / 'research')], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, 'PYTHONPATH': _ROOT})
    try:
        assert process.stdout.readline().strip() == 'starting'
        deadline = time.monotonic() + 600
        tree = []
        while time.monotonic() < deadline and len(tree) < 2:      # the cluster's worker processes have started
            time.sleep(0.5)
            tree = [child for child in psutil.Process(process.pid).children(recursive=True)
                    if 'resource_tracker' not in ' '.join(child.cmdline())]
        assert len(tree) >= 2
        time.sleep(3)                                               # the tasks are running
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0 and 'KeyboardInterrupt' in err
    time.sleep(1)
    assert not [child.pid for child in tree if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]


_KILLS_ITS_WORKER = """
import os, sys
from flowpipe.research import EC, Option, Research
print('the script runs', flush=True)               # once: a worker process that ran it again would print too
def step(lr, marker):
    if lr == 0.1 and not os.path.exists(marker):
        open(marker, 'w').close()
        os._exit(7)
    return lr
research = Research(name=sys.argv[1], domain=Option('lr', [0.1, 0.2, 0.3])).add_callable(
    'step', step, lr=EC('lr'), marker=sys.argv[2], save_to='value')
research.run(n_iters=1, workers=1, bar=False, executor='dask')
print('finished', sorted(research.results.df['value']), flush=True)
"""


@pytest.mark.slow
def test_a_script_without_main_guard_survives_a_restarted_worker(tmp_path):
    pytest.importorskip('distributed')
    import subprocess
    script = tmp_path / 'no_guard.py'
    script.write_text(_KILLS_ITS_WORKER, encoding='utf-8')
    done = subprocess.run([sys.executable, str(script), str(tmp_path / 'research'), str(tmp_path / 'marker')],
                          capture_output=True, text=True, timeout=900, env={**os.environ, 'PYTHONPATH': _ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ['the script runs', 'finished [0.2, 0.3]']   # one worker, restarted once
