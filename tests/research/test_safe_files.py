"""A research's own files (research.dill, record.dill) are read without running the code they name: results and
configs of plain values read safely, a file naming other code is refused with the fix (``trusted=True``), unless
this very process wrote those bytes."""
import os

import dill
import numpy as np
import pytest

from flowpipe import UnsafeFileError
from flowpipe.research import EC, Domain, O, Research, ResearchResults
from flowpipe.research import storage
from flowpipe.research.storage import ResearchStorage


def touch(path):
    """Stands for the code a hostile file runs: it leaves a mark."""
    open(path, 'w').close()
    return {'id': 'x', 'results': {}, 'config': None}


class Marking:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return touch, (self.path,)


def add(x, y):
    return np.float64(x + y)


def forget_writing(monkeypatch):
    """From here on the research's files read as a fresh process (another notebook session) reads them."""
    monkeypatch.setattr(storage, '_WRITTEN', set())


def make(name):
    return Research(name=name, domain=Domain(x=[1, 2], y=[10, 20])).add_callable(
        'add', add, x=EC('x'), y=EC('y')).save(O('add'), 'sum')


def rows(results):
    return sorted((row['x'], row['y'], row['sum']) for row in results.rows(use_alias=False))


def _plant(path, mark):
    with open(path, 'wb') as file:
        dill.dump(Marking(str(mark)), file)


def test_the_results_of_plain_values_read_safely(tmp_path):
    name = str(tmp_path / 'r')
    research = make(name).run(n_iters=1, parallel=False, bar=False)
    assert rows(ResearchResults(name)) == rows(research.results) == [(1, 10, 11), (1, 20, 21), (2, 10, 12),
                                                                      (2, 20, 22)]
    assert ResearchStorage.read_entropy(name) == research.entropy      # the seed, from a plain text file


def test_a_hostile_record_is_refused_before_its_code_runs_and_trusted_runs_it(tmp_path):
    name = str(tmp_path / 'r')
    make(name).run(n_iters=1, parallel=False, bar=False)
    record = os.path.join(name, 'experiments', sorted(os.listdir(os.path.join(name, 'experiments')))[0],
                          'record.dill')
    mark = tmp_path / 'mark'
    _plant(record, mark)
    with pytest.raises(UnsafeFileError, match=r"(?s)Expected a research's record that loads without running code\. "
                                              r"Received: .*record\.dill.*test_safe_files\.touch.*trusted=True"):
        ResearchResults(name)
    with pytest.raises(UnsafeFileError, match='record.dill'):
        make(name).run(n_iters=1, parallel=False, bar=False)        # a research resumed there reads the records
    assert not mark.exists()
    ResearchResults(name, trusted=True)
    assert mark.exists()


def test_a_hostile_research_definition_is_refused_by_load_and_trusted_runs_it(tmp_path):
    name = str(tmp_path / 'r')
    make(name).run(n_iters=1, parallel=False, bar=False)
    mark = tmp_path / 'mark'
    _plant(os.path.join(name, 'research.dill'), mark)
    with pytest.raises(UnsafeFileError, match=r"(?s)Expected a research definition that loads without running code"
                                              r"\. Received: .*research\.dill.*test_safe_files\.touch.*"
                                              r"Research\.load\(.*trusted=True\).*ResearchResults\("):
        Research.load(name)
    assert not mark.exists()
    with pytest.raises(Exception):          # trusted: dill runs the file's code (which gives no research here)
        Research.load(name, trusted=True)
    assert mark.exists()


def test_a_research_definition_of_the_user_s_functions_loads_and_resumes_only_when_trusted(tmp_path, monkeypatch):
    name = str(tmp_path / 'r')
    first = make(name).run(n_iters=1, parallel=False, bar=False)
    forget_writing(monkeypatch)
    with pytest.raises(UnsafeFileError, match=r'research\.dill.*flowpipe\.research\.research\.Research'):
        Research.load(name)
    loaded = Research.load(name, trusted=True)
    assert rows(loaded.results) == rows(first.results)
    assert loaded.run(n_iters=1, parallel=False, bar=False).monitor.finished == 0     # resumed: nothing to run


def test_an_earlier_folder_without_a_seed_file_reads_the_seed_only_from_a_trusted_definition(tmp_path, monkeypatch):
    name = str(tmp_path / 'r')
    first = make(name).run(n_iters=1, parallel=False, bar=False)
    forget_writing(monkeypatch)
    os.remove(os.path.join(name, 'seed.txt'))       # as a folder written before the seed had a file of its own
    with pytest.raises(UnsafeFileError, match=r"(?s)research\.dill.*trusted=True"):
        make(name).run(n_iters=1, parallel=False, bar=False)
    assert ResearchStorage.read_entropy(name, trusted=True) == first.entropy
    assert Research.load(name, trusted=True).run(n_iters=1, parallel=False, bar=False).entropy == first.entropy


def test_a_definition_this_process_wrote_loads_without_trusted_and_a_changed_one_is_refused(tmp_path):
    name = str(tmp_path / 'r')
    first = make(name).run(n_iters=1, parallel=False, bar=False)
    loaded = Research.load(name)                    # written a moment ago by this process: its own functions
    assert rows(loaded.results) == rows(first.results)
    assert loaded.run(n_iters=1, parallel=False, bar=False).monitor.finished == 0
    path = os.path.join(name, 'research.dill')
    with open(path, 'rb') as file:
        data = file.read()
    with open(path, 'wb') as file:                  # the same definition, one byte of padding more
        file.write(data + b'.')
    with pytest.raises(UnsafeFileError, match=r'research\.dill.*flowpipe\.research\.research\.Research'):
        Research.load(name)


def test_the_safe_reader_rebuilds_a_record_s_config_and_nothing_else_of_the_research():
    from flowpipe.safe_pickle import allowed_names
    assert {'flowpipe.research.domain.ConfigAlias', 'flowpipe.research.domain.Alias'} <= set(allowed_names())
    assert not {'flowpipe.research.domain.Domain', 'flowpipe.research.research.Research',
                'flowpipe.research.experiment.Experiment', 'flowpipe.research.domain.Option'} & set(allowed_names())
