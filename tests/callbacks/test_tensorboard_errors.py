"""A TensorBoard folder that can take no more events (a full disk) ends the run with its OSError, named: the
folder, the epoch and the fix; the writer is closed, and the run's end does not fail again. A folder that is an
existing file is named when the logger is made."""
import errno
import os

import pytest

from flowpipe.callbacks import TensorBoardLogger

from .fake_run import FakeRun


def test_a_full_disk_names_the_folder_and_the_epoch(tmp_path, monkeypatch):
    pytest.importorskip('tensorboard')
    from torch.utils.tensorboard import SummaryWriter
    logger, run = TensorBoardLogger(tmp_path / 'tb'), FakeRun()
    logger.on_run_start(run)
    run.logs = {'epoch': 0, 'train/loss': 1.0}
    logger.on_epoch_end(run, 0)

    def full(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(SummaryWriter, 'flush', full)
    run.logs = {'epoch': 1, 'train/loss': 0.5}
    with pytest.raises(OSError) as caught:
        logger.on_epoch_end(run, 1)
    assert caught.value.errno == errno.ENOSPC
    note = '\n'.join(caught.value.__notes__)
    assert f"Expected to write the TensorBoard events of epoch 1 into {str(tmp_path / 'tb')!r}" in note
    assert 'No space left on device' in note and 'free space there' in note
    logger.on_run_end(run)                               # the writer was closed: nothing raises again


def test_a_folder_that_is_an_existing_file_is_named(tmp_path):
    (tmp_path / 'tb').write_text('notes')
    with pytest.raises(ValueError, match=r"Expected TensorBoardLogger's folder to be a folder\. Received: folder="
                                         r".*an existing file"):
        TensorBoardLogger(tmp_path / 'tb')
    assert (tmp_path / 'tb').read_text() == 'notes'
