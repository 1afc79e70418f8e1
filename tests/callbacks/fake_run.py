"""A stand-in for the run callbacks hear from: logs to feed them, a stop flag, a pipeline with one model."""
import types

import torch


class FakeRun:
    def __init__(self, pipeline=None, is_main=True):
        self.logs, self.stopped, self.pipeline, self.is_main, self.step = {}, False, pipeline, is_main, 0

    def stop(self):
        self.stopped = True


def feed(callback, values, monitor='val/loss', run=None):
    """Announce one epoch end per value of ``monitor``; the epochs at which the run was told to stop."""
    run = run or FakeRun()
    stops = []
    for epoch, value in enumerate(values):
        run.logs = {'epoch': epoch, monitor: value}
        callback.on_epoch_end(run, epoch)
        if run.stopped:
            stops.append(epoch)
            run.stopped = False
    return stops


def one_model_pipeline(lr=1.0):
    """An object with ``m(name)`` and ``state.models`` holding a model whose optimizer has two groups."""
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    model = types.SimpleNamespace(optimizer=torch.optim.SGD([{'params': first.parameters()},
                                                             {'params': second.parameters(), 'lr': 2 * lr}], lr=lr))
    models = {'net': model}
    return types.SimpleNamespace(m=models.__getitem__, state=types.SimpleNamespace(models=models))
