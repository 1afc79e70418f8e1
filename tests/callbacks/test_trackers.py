"""MLflowLogger and WandbLogger: what they logged, read back from an MLflow file store and from W&B's offline files —
each epoch's values once, the learning rate, the configuration; rank 0 only; one tracker run across a resume."""
import glob
import os
import sys

import pytest

from flowpipe import Checkpoint
from flowpipe.callbacks import Callback, Logger, MLflowLogger, WandbLogger

from ..execution import checkpoint_cases as cases
from . import wandb_files
from .fake_run import FakeRun

RUN = {'batch_size': cases.BATCH, 'n_epochs': 6, 'shuffle': 5}      # 5 batches an epoch
EPOCHS = list(range(6))


@pytest.fixture(autouse=True)
def _no_trigger():
    yield
    cases.TRIGGER.update(at=None, error=None, where='first')


def _run(make, folder=None, crash=None):
    """Train with the loggers ``make()`` returns: uninterrupted, or with checkpoints in ``folder``, resumed after a
    crash at batch ``crash``; the loggers and the logs of each epoch the run ended (the reference)."""
    made, seen = [], []

    class Seen(Callback):
        order = 2

        def on_epoch_end(self, run, epoch):
            seen.append(dict(run.logs))

    def callbacks():
        made.append(make())
        return [made[-1], Seen()]
    if crash is None:
        train = cases.pipeline(devices=('CPU',), microbatch=None)
        train.run(**RUN, callbacks=callbacks())
        train.m('net').close()
        return made, seen
    spec = Checkpoint(folder, every=3)
    cases.TRIGGER.update(at=crash, error=cases.Crash(), where='first')
    first = cases.pipeline(devices=('CPU',), microbatch=None)
    with pytest.raises(cases.Crash):
        first.run(**RUN, checkpoint=spec, callbacks=callbacks())
    first.m('net').close()
    cases.TRIGGER.update(at=None)
    again = cases.pipeline(devices=('CPU',), microbatch=None)
    again.run(**RUN, checkpoint=spec, resume=True, callbacks=callbacks())
    again.m('net').close()
    return made, seen


def _mlflow_history(uri, run_id, name):
    from mlflow.tracking import MlflowClient
    return [(metric.step, metric.value) for metric in MlflowClient(uri).get_metric_history(run_id, name)]


def test_mlflow_logger_logs_each_epoch_once_across_a_resume_with_the_config(tmp_path):
    pytest.importorskip('mlflow')
    from mlflow.tracking import MlflowClient
    (whole,), logs = _run(lambda: MLflowLogger(tmp_path / 'whole'))
    uri = whole.tracking_uri
    assert uri == 'file:' + str(tmp_path / 'whole')
    losses = [(epoch, row['train/loss']) for epoch, row in enumerate(logs)]
    assert sorted(_mlflow_history(uri, whole.run_id, 'train/loss')) == losses
    assert sorted(_mlflow_history(uri, whole.run_id, 'lr')) == [(epoch, row['lr']) for epoch, row in enumerate(logs)]
    run = MlflowClient(uri).get_run(whole.run_id)
    assert run.data.params['run/batch_size'] == str(cases.BATCH)
    assert run.data.params['model/net/optimizer/lr'] == '0.01' and run.info.status == 'FINISHED'

    # epoch 3 ends at batch 20, 2 batches past a checkpoint: the crash comes after its values were logged
    (first, resumed), _ = _run(lambda: MLflowLogger(tmp_path / 'parts'), tmp_path / 'checkpoints', crash=20)
    assert resumed.run_id == first.run_id                                  # the same MLflow run goes on
    assert MlflowClient(resumed.tracking_uri).get_run(resumed.run_id).info.status == 'FINISHED'
    assert len(MlflowClient(resumed.tracking_uri).search_runs(
        [MlflowClient(resumed.tracking_uri).get_experiment_by_name('flowpipe').experiment_id])) == 1
    history = _mlflow_history(resumed.tracking_uri, resumed.run_id, 'train/loss')
    assert sorted(step for step, _ in history) == EPOCHS                  # epoch 3 not logged a second time
    assert sorted(history) == losses                                       # the uninterrupted run's values


def test_wandb_logger_offline_logs_each_epoch_once_across_a_resume_with_the_config(tmp_path, monkeypatch):
    pytest.importorskip('wandb')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    (whole,), logs = _run(lambda: WandbLogger(tmp_path / 'whole', mode='offline'))
    steps = wandb_files.history(tmp_path / 'whole', whole.run_id)
    assert [(step, values['train/loss'], values['lr']) for step, values in steps] == [
        (epoch, row['train/loss'], row['lr']) for epoch, row in enumerate(logs)]
    config = wandb_files.config(tmp_path / 'whole', whole.run_id)
    assert config['run/batch_size'] == str(cases.BATCH)
    assert config['model/net/optimizer/lr'] == '0.01'

    (first, resumed), _ = _run(lambda: WandbLogger(tmp_path / 'parts', mode='offline'), tmp_path / 'checkpoints',
                               crash=20)
    assert resumed.run_id == first.run_id
    assert len(wandb_files.run_folders(tmp_path / 'parts', first.run_id)) == 2      # the two parts of one run
    history = wandb_files.history(tmp_path / 'parts', resumed.run_id)
    assert [step for step, _ in history] == EPOCHS                        # epoch 3 not logged a second time
    assert [(step, values['train/loss']) for step, values in history] == [
        (epoch, row['train/loss']) for epoch, row in enumerate(logs)]


@pytest.mark.parametrize('make', [lambda folder: MLflowLogger(folder), lambda folder: WandbLogger(folder)],
                         ids=['mlflow', 'wandb'])
def test_trackers_write_nothing_off_rank_0(tmp_path, make):
    logger = make(tmp_path / 'logs')
    run = FakeRun(is_main=False)
    logger.on_run_start(run)
    for epoch in range(2):
        run.logs = {'epoch': epoch, 'train/loss': 1.0}
        logger.on_epoch_end(run, epoch)
    logger.on_run_end(run)
    assert not os.path.exists(tmp_path / 'logs') and logger.logged == 1       # counted, not written


@pytest.mark.parametrize('make, module, extra', [(MLflowLogger, 'mlflow', 'mlflow'), (WandbLogger, 'wandb', 'wandb')])
def test_trackers_without_their_package_name_the_extra(tmp_path, monkeypatch, make, module, extra):
    monkeypatch.setitem(sys.modules, module, None)          # as where the package is not installed
    with pytest.raises(ImportError, match=rf'flowpipe\[{extra}\]'):
        make(tmp_path).on_run_start(FakeRun())


def test_trackers_refuse_wrong_arguments(tmp_path):
    with pytest.raises(TypeError, match='tracking_uri'):
        MLflowLogger(3)
    with pytest.raises(ValueError, match="mode as 'offline'"):
        WandbLogger(tmp_path, mode='disabled')


class Listing(Logger):
    """A logger of one's own: what the base asks of it, listed."""

    def __init__(self, held=-1):
        super().__init__()
        self.held, self.calls = held, []

    def open(self, run, run_id):
        self.calls.append(('open', run_id))
        return run_id or 'run-1', self.held

    def write(self, epoch, logs):
        self.calls.append(('write', epoch, logs['train/loss']))

    def close(self, error):
        self.calls.append(('close', error))


def _epochs(logger, run, epochs):
    for epoch in epochs:
        run.logs = {'epoch': epoch, 'train/loss': float(epoch)}
        logger.on_epoch_end(run, epoch)


def test_a_logger_of_ones_own_writes_each_epoch_once_on_rank_0_and_goes_on_with_its_tracker_run():
    first, run = Listing(), FakeRun()
    first.on_run_start(run)
    _epochs(first, run, [0, 1])
    saved = first.state()                          # a checkpoint after epoch 1
    _epochs(first, run, [2])                       # then the run is interrupted
    run.error = KeyboardInterrupt()
    first.on_run_end(run)
    assert first.calls == [('open', None), ('write', 0, 0.0), ('write', 1, 1.0), ('write', 2, 2.0),
                           ('close', run.error)]
    run.error = None
    resumed = Listing(held=2)                      # its tracker holds epoch 2
    resumed.load_state(saved)
    resumed.on_run_start(run)
    _epochs(resumed, run, [2, 3])
    resumed.on_run_end(run)
    assert resumed.calls == [('open', 'run-1'), ('write', 3, 3.0), ('close', None)]
    again = Listing()                              # the object reused for a new run: a new tracker run
    again.load_state(saved)
    again.on_run_start(run)
    again.on_run_end(run)
    again.on_run_start(run)
    assert again.calls[-1] == ('open', None) and again.logged == -1
    other = Listing()
    other.on_run_start(FakeRun(is_main=False))
    _epochs(other, FakeRun(is_main=False), [0])
    other.on_run_end(FakeRun(is_main=False))
    assert other.calls == [] and other.logged == 0


@pytest.mark.slow
def test_trackers_in_a_job_of_two_processes_log_from_rank_0_only(tmp_path, monkeypatch):
    pytest.importorskip('mlflow')
    monkeypatch.setenv('MLFLOW_ALLOW_FILE_STORE', 'true')        # this process reads the file store too
    pytest.importorskip('wandb')
    from mlflow.tracking import MlflowClient

    from flowpipe.parallel import launch

    from . import dist_jobs
    ranks = launch(dist_jobs.train_with_trackers, 2, args=(str(tmp_path),), timeout=240)
    (mlflow_id, wandb_id), (other_mlflow, other_wandb) = ranks
    assert other_mlflow is None and other_wandb is None               # rank 1 opened no tracker run
    client = MlflowClient('file:' + str(tmp_path / 'mlruns'))
    assert [run.info.run_id for run in client.search_runs([client.get_experiment_by_name('flowpipe').experiment_id])
            ] == [mlflow_id]
    assert [step for step, _ in _mlflow_history(client.tracking_uri, mlflow_id, 'train/loss')] == [0, 1, 2]
    assert client.get_run(mlflow_id).data.params['run/world_size'] == '2'
    assert [os.path.basename(path) for path in glob.glob(str(tmp_path / 'wandb' / 'offline-run-*'))] == [
        os.path.basename(path) for path in wandb_files.run_folders(tmp_path, wandb_id)]
    assert [step for step, _ in wandb_files.history(tmp_path, wandb_id)] == [0, 1, 2]


def test_on_run_end_tells_the_error_that_ends_the_run():
    ended = []

    class Ending(Callback):
        def on_run_end(self, run):
            ended.append(run.error)
    cases.TRIGGER.update(at=3, error=cases.Crash(), where='first')
    train = cases.pipeline(devices=('CPU',), microbatch=None)
    with pytest.raises(cases.Crash):
        train.run(**RUN, callbacks=[Ending()])
    cases.TRIGGER.update(at=None)
    for _ in train.gen_batch(**RUN, callbacks=[Ending()]):
        break                                       # a loop left early: a stop, not an error
    train.m('net').close()
    assert isinstance(ended[0], cases.Crash) and ended[1] is None


def test_an_error_ends_the_mlflow_run_failed_or_killed(tmp_path):
    pytest.importorskip('mlflow')
    from mlflow.tracking import MlflowClient
    statuses = []
    for error in (None, cases.Crash(), KeyboardInterrupt()):
        logger, run = MLflowLogger(tmp_path / 'mlruns'), FakeRun()
        logger.on_run_start(run)
        run.error = error
        logger.on_run_end(run)
        statuses.append(MlflowClient(logger.tracking_uri).get_run(logger.run_id).info.status)
    assert statuses == ['FINISHED', 'FAILED', 'KILLED']


def test_an_error_ends_the_wandb_run_with_exit_code_1(tmp_path, monkeypatch):
    pytest.importorskip('wandb')
    monkeypatch.setenv('WANDB_SILENT', 'true')
    codes = []
    for error in (None, cases.Crash()):
        logger, run = WandbLogger(tmp_path / 'wandb', mode='offline'), FakeRun()
        logger.on_run_start(run)
        run.error = error
        logger.on_run_end(run)
        codes.append(wandb_files.exit_code(tmp_path / 'wandb', logger.run_id))
    assert codes == [0, 1]
