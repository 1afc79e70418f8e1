"""``MLflowLogger`` and ``WandbLogger``: a run's epochs, learning rates and configuration in MLflow or Weights & Biases.

``mlflow`` (``pip install flowpipe[mlflow]``: ``mlflow-skinny``) and ``wandb`` (``pip install flowpipe[wandb]``)
are optional dependencies, imported when the run starts.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

from ..atomic import write_text_atomically
from .logger import Logger, numeric, params

__all__ = ['MLflowLogger', 'WandbLogger']


def _need(module: str, logger: str, extra: str) -> Any:
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"Expected the {module} package for {logger}. Received: it is not installed. Install it "
                          f"with `pip install flowpipe[{extra}]`.") from error


def _check_text(owner: str, name: str, value: Any, none: bool = True) -> None:
    if not (isinstance(value, (str, os.PathLike)) or (none and value is None)):
        raise TypeError(f"Expected {owner}'s {name} as a str{' or None' if none else ''}. Received: "
                        f"{name}={value!r}")


class MLflowLogger(Logger):
    """Log each epoch's numeric values as MLflow metrics at step ``epoch``, and the run's configuration as params.

    Args:
        tracking_uri: an MLflow tracking URI (``'file:/path'``, ``'sqlite:///mlflow.db'``, ``'http://...'``) or a
            folder, which means MLflow's file store there.
        experiment: the experiment's name, created when it does not exist.
        run_name: the MLflow run's name (MLflow makes one up when ``None``).

    Rank 0 only. The MLflow run ends ``FINISHED``, ``FAILED`` (an error) or ``KILLED`` (Ctrl-C). A resumed run goes
    on with the MLflow run of its interrupted part (its id is in the logger's state) and logs the epochs after the
    last one that run holds.
    """

    def __init__(self, tracking_uri: str | os.PathLike = 'mlruns', experiment: str = 'flowpipe',
                 run_name: str | None = None):
        _check_text('MLflowLogger', 'tracking_uri', tracking_uri, none=False)
        _check_text('MLflowLogger', 'experiment', experiment, none=False)
        _check_text('MLflowLogger', 'run_name', run_name)
        super().__init__()
        tracking_uri = os.fspath(tracking_uri)
        self.folder = None if '://' in tracking_uri or tracking_uri.startswith('file:') else tracking_uri
        self.tracking_uri = 'file:' + os.path.abspath(self.folder) if self.folder else tracking_uri
        self.experiment, self.run_name = experiment, run_name
        self._client: Any = None

    def open(self, run: Any, run_id: str | None) -> tuple[str | None, int]:
        _need('mlflow', 'MLflowLogger', 'mlflow')
        if self.tracking_uri.startswith('file:'):
            # MLflow 3 keeps its file store behind this switch; a folder given here asks for that store
            os.environ.setdefault('MLFLOW_ALLOW_FILE_STORE', 'true')
        from mlflow.tracking import MlflowClient
        self._client = client = MlflowClient(self.tracking_uri)
        if run_id is not None:
            client.update_run(run_id, status='RUNNING')
            return run_id, _last_step(client, run_id)
        found = client.get_experiment_by_name(self.experiment)
        experiment = found.experiment_id if found is not None else client.create_experiment(self.experiment)
        run_id = client.create_run(experiment, run_name=self.run_name).info.run_id
        from mlflow.entities import Param
        given = [Param(name, value) for name, value in params(run).items()]
        for start in range(0, len(given), 100):     # MLflow takes at most 100 params a call
            client.log_batch(run_id, params=given[start:start + 100])
        return run_id, -1

    def write(self, epoch: int, logs: dict[str, Any]) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(name, value, now, epoch)
                                                     for name, value in numeric(logs).items()])

    def close(self, error: BaseException | None) -> None:
        status = 'FINISHED' if error is None else 'KILLED' if isinstance(error, KeyboardInterrupt) else 'FAILED'
        self._client.set_terminated(self.run_id, status=status)
        self._client = None

    def __repr__(self) -> str:
        return f"MLflowLogger({self.tracking_uri!r}, experiment={self.experiment!r})"


def _last_step(client: Any, run_id: str) -> int:
    """The last step at which MLflow run ``run_id`` holds a metric (``-1``: none)."""
    metrics = client.get_run(run_id).data.metrics
    return max((metric.step for name in metrics for metric in client.get_metric_history(run_id, name)), default=-1)


class WandbLogger(Logger):
    """Log each epoch's numeric values to Weights & Biases at step ``epoch``, and the run's configuration as its
    config.

    Args:
        folder: where W&B writes its files (its ``dir``: the run folders under ``folder/wandb``).
        project: the W&B project.
        name: the W&B run's name (W&B makes one up when ``None``).
        mode: ``'offline'`` (files only, no network: ``wandb sync`` uploads them later), ``'online'``, or ``None``:
            W&B's own setting (``WANDB_MODE``, else online).

    Rank 0 only. A resumed run goes on with the W&B run of its interrupted part (its id is in the logger's state,
    passed to ``wandb.init(id=..., resume='allow')``) from the epoch after the last one that part logged: W&B's
    offline files cannot be asked, so the logger keeps that epoch in ``folder/.flowpipe-wandb-<id>.json``.
    """

    def __init__(self, folder: str | os.PathLike = '.', project: str = 'flowpipe', name: str | None = None,
                 mode: str | None = None):
        _check_text('WandbLogger', 'folder', folder, none=False)
        _check_text('WandbLogger', 'project', project, none=False)
        _check_text('WandbLogger', 'name', name)
        if mode not in (None, 'offline', 'online'):
            raise ValueError(f"Expected WandbLogger's mode as 'offline', 'online' or None (W&B's own setting). "
                             f"Received: mode={mode!r}")
        super().__init__()
        self.folder, self.project, self.name, self.mode = os.fspath(folder), project, name, mode
        self._run: Any = None

    def open(self, run: Any, run_id: str | None) -> tuple[str | None, int]:
        wandb = _need('wandb', 'WandbLogger', 'wandb')
        os.makedirs(self.folder, exist_ok=True)
        options = {'dir': self.folder, 'project': self.project, 'name': self.name, 'mode': self.mode}
        if run_id is None:
            self._run = wandb.init(**options, config=params(run), reinit='create_new')
        else:
            self._run = wandb.init(**options, id=run_id, resume='allow', reinit='create_new')
        return self._run.id, self._held()

    def write(self, epoch: int, logs: dict[str, Any]) -> None:
        self._run.log(numeric(logs), step=epoch)
        write_text_atomically(json.dumps({'epoch': epoch}), self._ledger())

    def _ledger(self) -> str:
        return os.path.join(self.folder, f'.flowpipe-wandb-{self._run.id}.json')

    def _held(self) -> int:
        """The last epoch this logger wrote into the W&B run (``-1``: none)."""
        try:
            with open(self._ledger(), encoding='utf-8') as file:
                return int(json.load(file)['epoch'])
        except FileNotFoundError:
            return -1

    def close(self, error: BaseException | None) -> None:
        self._run.finish(exit_code=0 if error is None else 1)
        self._run = None

    def __repr__(self) -> str:
        return f"WandbLogger({self.folder!r}, project={self.project!r})"
