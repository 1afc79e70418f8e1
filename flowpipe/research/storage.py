"""Where a research keeps what its experiments send back: ``ResearchStorage``.

With ``dump_results`` the research's folder holds::

    research.dill                      the research (for Research.load(name, trusted=True))
    seed.txt                           its seed's entropy (a run again under the name draws the same seeds)
    domain.txt                         the domain's description: a run under the name with another is refused
    research.log                       the research's log
    stdout.txt, stderr.txt             the experiments' output (redirect 1 or 3)
    experiments/<id>/record.dill       results, config, log, exception: written atomically, last
    experiments/<id>/config.dill       the config
    experiments/<id>/experiment.log    the experiment's log
    experiments/<id>/stdout.txt ...    its output (redirect 2 or 3), and any file a unit wrote into EP()

A record with no exception marks a finished experiment: a research run again under the same name skips it.
Records are read safely (``flowpipe.safe_pickle``) unless ``trusted``; ``research.dill`` holds the research's
own functions, so only a trusted reader opens it, and a run again under the name reads its seed from ``seed.txt``.
A definition this process wrote itself is trusted without being told (``read_definition``): its bytes, checked by
their SHA-256 digest, hold nothing this process did not already have.
Without ``dump_results`` all of it stays in memory (``experiments_stdout``, ``experiments_stderr``).
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import time
from typing import Any

import dill

from .. import safe_pickle
from ..atomic import dump_atomically, write_bytes_atomically, write_text_atomically
from ..errors import UnsafeFileError
from .results import ResearchResults, load_records

__all__ = ['ResearchStorage']


class ResearchStorage:
    """The research's results and logs, in its folder (``dump``) or in memory.

    Args:
        name: the research's folder.
        dump: whether to write to the folder.
        redirect_stdout, redirect_stderr: 0 none, 1 common file, 2 per experiment, 3 both.
        loglevel: 'info' or 'debug'.
        trusted: read the folder's records with dill, running any code they name (``ResearchResults``).
    """

    def __init__(self, name: str, dump: bool, redirect_stdout: int, redirect_stderr: int, loglevel: str = 'info',
                 trusted: bool = False):
        self.name, self.dump, self.loglevel, self.trusted = name, dump, loglevel, trusted
        self.redirect = {'stdout': redirect_stdout, 'stderr': redirect_stderr}
        self.results = ResearchResults(name, dump_results=dump, trusted=trusted)
        self.experiments_stdout: dict[str, str] = {}
        self.experiments_stderr: dict[str, str] = {}
        self.log: list[str] = []
        if dump:
            os.makedirs(os.path.join(name, 'experiments'), exist_ok=True)

    def finished(self) -> set[str]:
        """The ids of experiments with a record and no exception (a rerun skips them)."""
        if not self.dump:
            return set()
        return {key for key, record in load_records(self.name, self.trusted).items() if not record.get('exception')}

    def check_same(self, description: str) -> None:
        """Refuse a folder that holds another research's experiments (other options: their results would mix in
        this research's table, and their finished ids would be skipped); keep this research's ``description``."""
        if not self.dump:
            return
        path = os.path.join(self.name, 'domain.txt')
        stored = None
        if os.path.exists(path):
            with open(path, encoding='utf-8') as file:
                stored = file.read()
        elif not os.listdir(os.path.join(self.name, 'experiments')):
            write_text_atomically(description, path)
            return
        if stored != description:
            held = f"a research over the domain\n{stored}" if stored is not None else \
                "experiments of a research whose domain it does not record"
            raise ValueError(f"Expected the folder {self.name!r} to hold this research's experiments (a research run "
                             f"again under its name resumes). Received: {held}while this research's domain is\n"
                             f"{description}Run it under a new name (Research(name=...) or run(name=...)), resume "
                             f"the stored one with Research.load({self.name!r}, trusted=True).run(...), or delete the folder "
                             f"first (Research.remove({self.name!r})).")

    def info(self, message: str) -> None:
        """Add a line to the research's log (and its file)."""
        line = f'{time.strftime("%y-%m-%d %H:%M:%S")} - INFO - {message}'
        self.log.append(line)
        if self.dump:
            with open(os.path.join(self.name, 'research.log'), 'a', encoding='utf-8') as file:
                file.write(line + '\n')

    def save_research(self, research: Any) -> None:
        """Write the research's seed (plain text) and definition, for ``Research.load``."""
        if self.dump:
            write_text_atomically(f'{research.entropy}\n', os.path.join(self.name, 'seed.txt'))
            try:
                data = dill.dumps(research, protocol=pickle.HIGHEST_PROTOCOL)
                write_bytes_atomically(data, os.path.join(self.name, 'research.dill'))
                _WRITTEN.add(hashlib.sha256(data).digest())
            except Exception as error:               # a unit that does not pickle: results are still kept
                self.info(f"The research's definition could not be saved ({type(error).__name__}: {error}); "
                          "Research.load will read the results only.")

    def path(self, experiment_id: str) -> str | None:
        """The folder of an experiment (``EP()``), ``None`` without ``dump``."""
        return os.path.join(os.path.abspath(self.name), 'experiments', experiment_id) if self.dump else None

    def write(self, record: dict) -> None:
        """Keep one experiment's record: its outputs first, the record last (atomically)."""
        key = record['id']
        for stream in ('stdout', 'stderr'):
            text, mode = record[stream], self.redirect[stream]
            if not self.dump:
                if mode in (2, 3) and text:
                    getattr(self, f'experiments_{stream}')[key] = text
                continue
            if mode in (1, 3) and text:
                with open(os.path.join(self.name, f'{stream}.txt'), 'a', encoding='utf-8') as file:
                    file.write(text)
            if mode in (2, 3):
                write_text_atomically(text, os.path.join(self.name, 'experiments', key, f'{stream}.txt'))
        if not self.dump:
            if not record.get('exception'):
                self.results.put(key, record['results'], record['config'])
            return
        folder = os.path.join(self.name, 'experiments', key)
        dump_atomically(record['config'], os.path.join(folder, 'config.dill'))
        write_text_atomically(''.join(line + '\n' for line in record['log']), os.path.join(folder, 'experiment.log'))
        if record.get('exception'):
            write_text_atomically(record['exception'], os.path.join(folder, 'error.txt'))
        dump_atomically(record, os.path.join(folder, 'record.dill'))

    @staticmethod
    def read_entropy(name: str, trusted: bool = False) -> int | None:
        """The seed entropy of the research saved under ``name`` (``None`` when there is none): from ``seed.txt``,
        or in a folder written before it, from ``research.dill`` (read safely unless ``trusted``)."""
        seed = os.path.join(name, 'seed.txt')
        if os.path.exists(seed):
            with open(seed, encoding='utf-8') as file:
                return int(file.read())
        path = os.path.join(name, 'research.dill')
        if not os.path.exists(path):
            return None
        try:
            return getattr(read_definition(path, trusted), 'entropy', None)
        except UnsafeFileError as error:
            raise safe_pickle.unsafe(error, path, "a research definition holding the seed to resume with",
                                     RESUME) from None
        except Exception:
            return None


#: how to resume a research whose definition names other code
RESUME = ("trusted=True (Research.load(name, trusted=True).run(...), or Research(..., trusted=True)); or run under a "
          "new name")


#: the SHA-256 digests of the research definitions this process wrote (``ResearchStorage.save_research``)
_WRITTEN: set[bytes] = set()


def read_definition(path: str, trusted: bool = False) -> Any:
    """The research definition in ``path``: read with dill where ``trusted`` or where this process wrote these very
    bytes (they hold only what it had: its own functions), read safely otherwise (``UnsafeFileError`` where it
    names code)."""
    with open(path, 'rb') as file:
        data = file.read()
    own = hashlib.sha256(data).digest() in _WRITTEN
    return safe_pickle.load(io.BytesIO(data), trusted or own)
