"""``BaseCallback``: a callback a model calls after each of its training steps (the model config's ``callbacks``).

It is a ``Callback`` whose ``on_train_step_end(model, logs)`` hook the model calls, with the step's ``logs``
(``loss``, ``lr``, ``iteration``, ``batch_size``, ``inputs_shapes``, ``targets_shapes``); a callback written for
batchflow's protocol defines ``on_iter_end(loss, **info)`` instead, which the base calls. See
``flowpipe.models.torch.callbacks`` for the ready ones and ``docs/models.md``, "Model callbacks".
"""
from __future__ import annotations

import copy
import os
from typing import Any

from .base import Callback

__all__ = ['BaseCallback', 'STEP_INFO', 'check_stream']

#: the step's logs that ``on_iter_end`` receives as keyword arguments
STEP_INFO = ('batch_size', 'inputs_shapes', 'targets_shapes')


def check_stream(stream: Any) -> Any:
    """``stream`` as ``None``, a callable or a path (a str)."""
    if stream is None or callable(stream) or isinstance(stream, (str, os.PathLike)):
        return os.fspath(stream) if isinstance(stream, os.PathLike) else stream
    raise TypeError(f"Expected stream as None, a callable (e.g. print) or a file path. Received: "
                    f"stream={stream!r}. Pass e.g. stream=print or stream='train.log'.")


class BaseCallback(Callback):
    """A rule the model applies after each training step; subclasses define ``on_iter_end`` (or
    ``on_train_step_end``).

    Args:
        stream: where messages go: ``None`` (nowhere), a callable taking one string, or a file path.

    Attributes:
        model: the ``TorchModel`` a bound copy belongs to (``None`` for the object given in the config).
    """

    def __init__(self, stream: Any = None):
        self.stream = check_stream(stream)
        self.model: Any = None
        self.reset()

    def reset(self) -> None:
        """Forget what the callback has seen: the state of a callback that has seen no step."""
        self._written = False

    def state(self) -> dict:
        """What the callback has seen, as plain values (saved with the model)."""
        return {'written': self._written}

    def load_state(self, state: dict) -> None:
        """Continue from ``state()``."""
        self._written = bool(state['written'])

    def bind(self, model: Any) -> 'BaseCallback':
        """A fresh copy of this callback that belongs to ``model``: one callback object in a config may serve
        several models (a template used by two pipelines) without mixing their losses."""
        bound = copy.copy(self)
        bound.model = model
        bound.reset()
        return bound

    def on_train_step_end(self, model: Any, logs: dict) -> None:
        """Calls ``on_iter_end(logs['loss'], batch_size=..., inputs_shapes=..., targets_shapes=...)``."""
        self.on_iter_end(logs['loss'], **{name: logs[name] for name in STEP_INFO if name in logs})

    def on_iter_end(self, loss: float, **info: Any) -> None:
        """Act on training step ``self.model.iteration``, whose full-batch loss is ``loss``.

        ``info`` holds ``batch_size``, ``inputs_shapes`` and ``targets_shapes`` of the step.
        """
        raise NotImplementedError(f"{type(self).__name__} must define on_iter_end(loss, **info).")

    def write(self, message: str) -> None:
        """Send ``message`` to the stream, from rank 0 only; a file is truncated by the callback's first line."""
        from ..parallel import distributed
        first, self._written = not self._written, True
        if self.stream is None or not distributed.is_main():
            return
        if callable(self.stream):
            self.stream(message)
            return
        with open(self.stream, 'w' if first else 'a', encoding='utf-8') as file:
            print(message, file=file)

    def arguments(self) -> dict:
        """The constructor's arguments, for the repr (which must not change with the state: run checkpoints
        compare the pipeline's description)."""
        return {'stream': self.stream}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{key}={value!r}' for key, value in self.arguments().items())})"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state['model'] = None          # a pickled callback never drags its model along
        return state
