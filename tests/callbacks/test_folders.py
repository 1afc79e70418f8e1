"""What callbacks write into their folders: never a file another run or the user wrote, and one run at a time."""
import csv
import os
import types
import warnings

import numpy as np
import pytest

from flowpipe import B, FolderInUseError, Pipeline, V
from flowpipe.callbacks import CSVLogger, ModelCheckpoint, Validate

from ..execution import checkpoint_cases as cases
from .fake_run import FakeRun


def _run_of(written):
    """A run whose only model's ``save`` writes the text ``written[0]`` (what a file holds tells who wrote it)."""
    def save(path):
        with open(path, 'w') as file:
            file.write(written[0])
    models = {'net': types.SimpleNamespace(save=save)}
    return FakeRun(types.SimpleNamespace(state=types.SimpleNamespace(models=models)))


def _epochs(callback, run, values, first=0, monitor='val/loss'):
    for epoch, value in enumerate(values, first):
        run.logs = {'epoch': epoch, 'step': epoch + 1, monitor: value}
        callback.on_epoch_end(run, epoch)


def _contents(folder):
    return {name: (folder / name).read_text() for name in sorted(os.listdir(folder)) if name.endswith('.model')}


def test_a_fresh_model_checkpoint_keeps_the_files_it_did_not_write(tmp_path):
    written = ['first run']
    run = _run_of(written)
    first = ModelCheckpoint(tmp_path, save_top_k=2)
    first.on_run_start(run)
    _epochs(first, run, [1.0, 0.5])
    first.on_run_end(run)
    (tmp_path / 'epoch-0002.model').write_text('my own file')
    before = _contents(tmp_path)

    written[0] = 'second run'
    second = ModelCheckpoint(tmp_path, save_top_k=1)
    second.on_run_start(run)
    with pytest.warns(UserWarning, match='epoch-0000-v1.model instead'):
        _epochs(second, run, [0.9, 0.8, 0.7, 0.6])
    second.on_run_end(run)
    after = _contents(tmp_path)
    assert {name: after[name] for name in before} == before      # the first run's best files and the user's
    assert sorted(set(after) - set(before)) == ['epoch-0003.model']  # the second run's best; its others removed
    assert second.best_path == str(tmp_path / 'epoch-0003.model') and after['epoch-0003.model'] == 'second run'


def test_a_resumed_model_checkpoint_removes_only_what_its_run_wrote_after_the_checkpoint(tmp_path):
    written = ['the run']
    run = _run_of(written)
    best = ModelCheckpoint(tmp_path, save_top_k=2)
    best.on_run_start(run)
    _epochs(best, run, [1.0])
    state = best.state()                           # a checkpoint after epoch 0
    _epochs(best, run, [0.5], first=1)             # epoch 1's file, written after it
    best.on_run_end(run)                           # the run ends in an error
    (tmp_path / 'epoch-0002.model').write_text('my own file')

    again = ModelCheckpoint(tmp_path, save_top_k=2)
    again.load_state(state)
    again.on_run_start(run)
    assert _contents(tmp_path) == {'epoch-0000.model': 'the run', 'epoch-0002.model': 'my own file'}
    with warnings.catch_warnings():
        warnings.simplefilter('error')             # no name clash: epoch 1's name is free again
        _epochs(again, run, [0.5], first=1)        # decides about epoch 1 again
    again.on_run_end(run)
    assert sorted(_contents(tmp_path)) == ['epoch-0000.model', 'epoch-0001.model', 'epoch-0002.model']


def _csv(path):
    with open(path, newline='') as file:
        return list(csv.DictReader(file))


def test_a_second_csv_logger_run_appends_its_rows_marked_with_its_run(tmp_path):
    run = FakeRun()
    first = CSVLogger(tmp_path)
    first.on_run_start(run)
    _epochs(first, run, [3.0, 2.0])
    state = first.state()
    _epochs(first, run, [1.0], first=2)
    first.on_run_end(run)
    second = CSVLogger(tmp_path)
    second.on_run_start(run)
    _epochs(second, run, [5.0])
    second.on_run_end(run)
    rows = _csv(tmp_path / 'metrics.csv')
    assert [(row['run'], row['epoch'], row['val/loss']) for row in rows] == [
        (first.run, '0', '3.0'), (first.run, '1', '2.0'), (first.run, '2', '1.0'), (second.run, '0', '5.0')]
    assert first.run != second.run

    resumed = CSVLogger(tmp_path)                  # the first run, resumed from its checkpoint after epoch 1
    resumed.load_state(state)
    resumed.on_run_start(run)
    _epochs(resumed, run, [1.5], first=2)
    resumed.on_run_end(run)
    rows = _csv(tmp_path / 'metrics.csv')
    assert [(row['run'], row['epoch'], row['val/loss']) for row in rows] == [
        (second.run, '0', '5.0'), (first.run, '0', '3.0'), (first.run, '1', '2.0'), (first.run, '2', '1.5')]


def test_csv_logger_keeps_a_file_of_other_columns_and_refuses_one_it_cannot_read(tmp_path):
    (tmp_path / 'metrics.csv').write_text('epoch,note\n0,"kept, as it was"\n')
    run = FakeRun()
    logger = CSVLogger(tmp_path)
    logger.on_run_start(run)
    _epochs(logger, run, [1.0])
    logger.on_run_end(run)
    assert [dict(row) for row in _csv(tmp_path / 'metrics.csv')] == [
        {'run': '', 'epoch': '0', 'note': 'kept, as it was', 'step': '', 'val/loss': ''},
        {'run': logger.run, 'epoch': '0', 'note': '', 'step': '1', 'val/loss': '1.0'}]
    (tmp_path / 'other.csv').write_bytes(b'a,b\n1,2,3\n')
    (tmp_path / 'binary.csv').write_bytes(b'\xff\xfe\x00')
    for name in ('other.csv', 'binary.csv'):
        before = (tmp_path / name).read_bytes()
        with pytest.raises(ValueError, match=rf"{name}' to be a CSV file.*Move that file away"):
            CSVLogger(tmp_path, name).on_run_start(run)
        assert (tmp_path / name).read_bytes() == before


def test_a_second_run_into_the_folders_of_a_running_one_is_refused(tmp_path):
    def callbacks(train):
        val = (Pipeline().import_model('net', train).init_variable('losses', [])
               .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << train.dataset
        return [Validate(val, batch_size=20, metrics={'loss': lambda p: float(np.mean(p.v('losses')))}),
                ModelCheckpoint(tmp_path / 'best'), CSVLogger(tmp_path / 'logs')]
    train = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    running = train.gen_batch(**cases.RUN, callbacks=callbacks(train))
    for _ in range(6):                             # epoch 0 has ended: its best file and its row are written
        next(running)
    written = {path: open(path, 'rb').read() for path in (tmp_path / 'best' / 'epoch-0000.model',
                                                          tmp_path / 'logs' / 'metrics.csv')}
    other = cases.pipeline(devices=('CPU',), microbatch=None, augment=False)
    for index, folder in ((1, 'best'), (2, 'logs')):
        one = callbacks(other)[index]
        with pytest.raises(FolderInUseError, match=rf"in '{tmp_path / folder}'.*another run of this process "
                                                   rf"\(pid {os.getpid()}\).*another folder"):
            other.run(**cases.RUN, callbacks=[callbacks(other)[0], one])
    assert {path: open(path, 'rb').read() for path in written} == written
    running.close()                                # the first run ends: the folders are free again
    with pytest.warns(UserWarning, match='epoch-0000-v1.model instead'):
        other.run(**cases.RUN, callbacks=callbacks(other))
    assert len(_csv(tmp_path / 'logs' / 'metrics.csv')) == 1 + 3
    train.m('net').close()
    other.m('net').close()
