"""flowpipe.research.research: runs in this process (parallel=False), results, resume, ids, failures."""
import os

import pytest

from flowpipe.research import EC, Domain, O, Option, Research
from flowpipe.research.storage import ResearchStorage
from flowpipe.sampler import NumpySampler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add(x, y):
    return x + y


def make(name, **kwargs):
    return Research(name=name, domain=Domain(x=[1, 2], y=[10, 20]), **kwargs).add_callable(
        'add', add, x=EC('x'), y=EC('y')).save(O('add'), 'sum')


def rows(research):
    return sorted((row['x'], row['y'], row['iteration'], row['sum'])
                  for row in research.results.rows(use_alias=False))


def test_grid_in_process(tmp_path):
    research = make(str(tmp_path / 'r')).run(n_iters=2, parallel=False, bar=False)
    assert rows(research) == [(x, y, i, x + y) for x in (1, 2) for y in (10, 20) for i in (0, 1)]
    assert research.monitor.finished == 4 and not research.monitor.exceptions
    assert rows(Research.load(str(tmp_path / 'r'), trusted=True)) == rows(research)   # its own functions


def test_memory_results_and_table(tmp_path):
    pandas = pytest.importorskip('pandas')
    research = make(str(tmp_path / 'r')).run(n_iters=1, parallel=False, dump_results=False, bar=False)
    assert not os.path.exists(tmp_path / 'r')
    df = research.results.to_df(use_alias=False, y=20)
    assert isinstance(df, pandas.DataFrame) and sorted(df['sum']) == [21, 22]


def test_failures_are_recorded_and_retried_on_rerun(tmp_path):
    flag = tmp_path / 'fail'
    flag.write_text('1')

    def maybe_fail(x):
        if x == 2 and flag.exists():
            raise RuntimeError('x is 2')
        return x

    def build():
        return Research(name=str(tmp_path / 'r'), domain=Option('x', [1, 2, 3])).add_callable(
            'f', maybe_fail, x=EC('x'), save_to='out')

    first = build().run(parallel=False, bar=False)
    [failure] = first.monitor.exceptions
    assert failure['config']['x'] == 2 and 'RuntimeError: x is 2' in failure['traceback']
    assert sorted(row['out'] for row in first.results.rows()) == [1, 3]
    flag.unlink()
    second = build().run(parallel=False, bar=False)
    assert second.monitor.finished == 1 and sorted(row['out'] for row in second.results.rows()) == [1, 2, 3]


def test_rerun_skips_finished_experiments(tmp_path):
    calls = tmp_path / 'calls'

    def count(x):
        with open(calls, 'a') as file:
            file.write(f'{x}\n')
        return x

    def build():
        return Research(name=str(tmp_path / 'r'), domain=Option('x', [1, 2]), n_reps=2).add_callable(
            'f', count, x=EC('x'), save_to='out')

    build().run(parallel=False, bar=False)
    again = build().run(parallel=False, bar=False)
    assert again.monitor.finished == 0 and len(calls.read_text().split()) == 4
    assert len(again.results.rows()) == 4


def test_ids_are_stable_and_prefixed(tmp_path):
    first = make(str(tmp_path / 'a')).run(n_iters=1, parallel=False, bar=False, create_id_prefix=2)
    ids = {row['id'] for row in first.results.rows()}
    assert all(len(key.split('_')) == 4 and key.split('_')[0] in ('00', '01') for key in ids)
    second = make(str(tmp_path / 'b')).run(n_iters=1, parallel=False, bar=False, create_id_prefix=2)
    assert {row['id'] for row in second.results.rows()} == ids


def test_seed_is_kept_for_a_resumed_research(tmp_path):
    research = make(str(tmp_path / 'r')).run(n_iters=1, parallel=False, bar=False)
    assert ResearchStorage.read_entropy(str(tmp_path / 'r')) == research.entropy


def test_domain_update_adds_configs():
    updates = []

    def update():               # None ends the research: a 'last' update that always answers would never end
        updates.append(1)
        return Option('x', [5]) if len(updates) == 1 else None

    research = (Research(domain=Option('x', [1, 2]), n_reps=1).add_callable('f', add, x=EC('x'), y=0, save_to='s')
                .update_domain(update, when='last'))
    research.run(parallel=False, dump_results=False, bar=False)
    assert sorted(row['s'] for row in research.results.rows()) == [1, 2, 5]


def test_redirected_output_in_memory():
    research = Research().add_callable('p', print, args=['hello'])
    research.run(parallel=False, dump_results=False, bar=False, redirect_stdout=2)
    [text] = research.storage.experiments_stdout.values()
    assert text.startswith('hello\n')


def test_profile_rows():
    pytest.importorskip('pandas')
    research = Research().add_callable('f', add, x=1, y=2)
    research.run(n_iters=2, parallel=False, dump_results=False, bar=False, profile=True)
    info = research.profiler.profile_info
    assert list(info.columns) == ['experiment', 'unit', 'iter', 'total_time', 'unit_time'] and len(info) == 2


@pytest.mark.parametrize('kwargs, match', [
    ({'workers': 0}, 'workers'), ({'debug': True}, 'debug=True'), ({'detach': True}, 'detach'),
    ({'redirect_stdout': 1, 'dump_results': False}, 'redirect_stdout'), ({'executor': 'nope'}, 'executor'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Research().add_callable('f', add, x=1, y=2).run(bar=False, **{'dump_results': False, **kwargs})


def test_a_domain_of_samplers_only_needs_n_configs_and_says_so_before_anything_runs(tmp_path):
    calls = []
    endless = Research(str(tmp_path / 'r'), domain=Domain(a=NumpySampler('normal'))).add_callable(
        'f', calls.append, args=[EC('a')])
    with pytest.raises(ValueError, match=r'Expected n_configs .*n_configs=None.*n_configs=100'):
        endless.run(parallel=False, bar=False)
    assert calls == [] and not (tmp_path / 'r').exists()
    counted = Research(str(tmp_path / 'r'), domain=Domain(a=NumpySampler('normal')), n_configs=3).add_callable(
        'f', calls.append, args=[EC('a')])
    counted.run(parallel=False, bar=False)
    assert len(calls) == 3 and len(set(calls)) == 3


@pytest.mark.parametrize('kwargs, name', [({'n_reps': 0}, 'n_reps'), ({'n_configs': 0}, 'n_configs'),
                                          ({'repeat_each': 0}, 'repeat_each')])
def test_counts_below_one_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=f'{name} as an int >= 1'):
        Research(domain=Option('x', [1, 2]), **kwargs)


def test_another_research_under_an_existing_name_is_refused_and_the_same_one_resumes(tmp_path):
    name = str(tmp_path / 'r')
    first = make(name).run(n_iters=1, parallel=False, bar=False)
    other = Research(name=name, domain=Domain(x=[1, 3], y=[10, 20])).add_callable(
        'add', add, x=EC('x'), y=EC('y')).save(O('add'), 'sum')
    with pytest.raises(ValueError, match=r"(?s)Expected the folder .*r' to hold this research's experiments.*"
                                         r"x=\[1, 2\] \* y=\[10, 20\].*x=\[1, 3\].*new name.*Research.load"):
        other.run(n_iters=1, parallel=False, bar=False)
    assert rows(Research.load(name, trusted=True)) == rows(first)      # the folder is as the first research left it
    again = make(name).run(n_iters=1, parallel=False, bar=False)       # the same domain: it resumes
    assert again.monitor.finished == 0 and rows(again) == rows(first)
    assert Research.load(name, trusted=True).run(n_iters=1, parallel=False, bar=False).monitor.finished == 0
    renamed = other.run(name=str(tmp_path / 'r2'), n_iters=1, parallel=False, bar=False)
    assert sorted(row[0] for row in rows(renamed)) == [1, 1, 3, 3]


def test_results_before_run_raise():
    with pytest.raises(ValueError, match='has not run'):
        _ = Research().results


def test_df_without_pandas_names_the_extra(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == 'pandas':
            raise ImportError('no pandas')
        return real_import(name, *args, **kwargs)

    research = Research().add_callable('f', add, x=1, y=2, save_to='s')
    research.run(parallel=False, dump_results=False, bar=False)
    monkeypatch.setattr(builtins, '__import__', no_pandas)
    assert research.results.rows()[0]['s'] == 3
    with pytest.raises(ImportError, match=r"flowpipe\[pandas\]"):
        _ = research.results.df


def test_builders_and_namespace_functions_return_the_research():
    research = Research().sum([1, 2], save_to='total')
    assert isinstance(research, Research) and 'sum' in research.experiment.actions
    with pytest.raises(AttributeError, match='no attribute'):
        _ = Research().no_such_thing


def test_files_written_to_ep_are_artifacts(tmp_path):
    pytest.importorskip('pandas')
    from flowpipe.research import EP

    def write(folder):
        with open(os.path.join(folder, 'note.txt'), 'w') as file:
            file.write('hi')

    research = Research(name=str(tmp_path / 'r'), domain=Option('x', [1, 2])).add_callable('w', write, folder=EP())
    research.run(parallel=False, bar=False)
    artifacts = research.results.artifacts_to_df(name='note.txt')
    assert len(artifacts) == 2 and all(open(path).read() == 'hi' for path in artifacts['full_path'])


def test_import_is_cheap():
    import subprocess
    import sys
    code = "import sys, flowpipe.research; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                         env={**os.environ, 'PYTHONPATH': ROOT}).stdout
    assert out.split() == ['False', 'False']
