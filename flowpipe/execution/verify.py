"""``python -m flowpipe verify``: replay the next steps of a run checkpoint on another layout and measure how far
its parameters go from those one process on one device reaches.

The checkpoint is read, not written: both replays resume from its file (``run(resume=file)`` without
``checkpoint=``) with the run arguments its fingerprint holds, run ``steps`` batches, and stop. Each replay
builds the checkpoint's models with the layout given (``pipeline.resumed_layout.resumed_with``): the reference on ``'cpu'``
without micro-batches, the other on ``device`` and ``microbatch`` (and, in ranks, ``stages`` pipeline stages),
both in ``dtype`` (the model's ``dtype`` key, and torch's default dtype while they run).

The exit status compares the largest relative deviation with a tolerance: ``--tolerance`` (a finite number >= 0),
else ``default_tolerance``: ``8 * eps * pieces * steps``, with ``eps`` the dtype's machine epsilon, ``pieces`` the
number of partial gradients a batch is summed from on the layout (``layout_pieces``) and ``steps`` the batches
replayed, a bound on the rounding a reordered sum adds at each step. ``--bitwise`` asks for the same bits. When the
layout fails, a third and fourth replay under hooks (``flowpipe.execution.divergence``) name the first module whose
activations or gradients differ.
"""
from __future__ import annotations

import argparse
import ast
import math
import os
import runpy
import sys
from typing import Any, Callable

import torch

from . import checkpoint as files
from .divergence import Divergence, Recorder, RootCall, first_divergence
from .nodes import CheckpointError
from ..pipeline.resumed_layout import resumed_with

__all__ = ['DTYPES', 'add_verify', 'default_tolerance', 'diagnose', 'layout_pieces', 'load_pipeline', 'replay',
           'run_verify', 'verify']

DTYPES = ('float32', 'float64')
_LAUNCH_TIMEOUT = 3600.0        # seconds for a launched replay (and each of its collectives)


def _split(source: str) -> tuple[str, str]:
    """``'file.py:name'`` as ``(file, name)``; ``name`` is ``'pipeline'`` when not given."""
    path, _, name = source.rpartition(':')
    return (path, name or 'pipeline') if path.endswith('.py') else (source, 'pipeline')


def load_pipeline(source: str) -> Any:
    """A fresh pipeline from ``'file.py:name'`` (``name`` defaults to ``pipeline``): the file runs (not as
    ``__main__``) and ``name`` is a pipeline bound to its dataset, or a function returning one."""
    path, name = _split(source)
    if not path.endswith('.py') or not os.path.isfile(path):
        raise FileNotFoundError(f"Expected --pipeline as FILE.py:NAME, a Python file that exists. Received: "
                                f"{source!r}. Give the file that defines the checkpoint's pipeline.")
    namespace = runpy.run_path(path, run_name='flowpipe_verify')
    if name not in namespace:
        raise ValueError(f"Expected {path} to define {name!r}. Received: a file without it. Name the pipeline "
                         f"after the colon: --pipeline {path}:NAME.")
    found = namespace[name]
    from ..pipeline.pipeline import Pipeline
    pipeline = found() if callable(found) and not isinstance(found, Pipeline) else found
    if not isinstance(pipeline, Pipeline) or pipeline.dataset is None:
        raise TypeError(f"Expected {name!r} in {path} to be a pipeline bound to its dataset, or a function returning "
                        f"one. Received: {type(pipeline).__name__}. Define it as template << dataset.")
    return pipeline


def _run_args(saved: dict) -> dict:
    """The run arguments the checkpoint's fingerprint holds (as its resume must be given them)."""
    args = {}
    for name, text in saved['fingerprint']['run'].items():
        if name == 'world_size':
            continue
        try:
            args[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise CheckpointError(f"Expected run arguments that are plain values to replay. Received: {name}={text} "
                                  "in the checkpoint. Replay it with run(..., resume=) in a script.") from None
    return args


def replay(path: str, source: str, steps: int, layout: dict, dtype: str,
           trusted: bool = False) -> tuple[dict[str, list], int]:
    """Run ``steps`` batches of the checkpoint file ``path`` from where it stopped, its models built with
    ``layout`` in ``dtype``; ``({model name: parameters}, batches run)``. The file is read safely unless
    ``trusted`` (``flowpipe.safe_pickle``)."""
    saved = files.read(path, trusted)
    pipeline = load_pipeline(source)
    args = _run_args(saved)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    done = 0
    try:
        with resumed_with(**layout, dtype=dtype):
            batches = pipeline.gen_batch(args.pop('batch_size'), **args,
                                         resume=files.Checkpoint(path, trusted=trusted))
            try:
                for done, _ in enumerate(batches, start=1):
                    if done == steps:
                        break
            finally:
                batches.close()
        params = {name: _parameters(pipeline.m(name)) for name, payload in saved['models'].items()
                  if payload is not None}
    finally:
        torch.set_default_dtype(previous)
    return params, done


def _parameters(model: Any) -> list[torch.Tensor]:
    """The model's parameters whole (``_whole``); a pipelined model's gathered from its stages on rank 0 (every
    rank calls this; the others get ``[]``)."""
    named = list(model.model.named_parameters())
    if not any(param.device.type == 'meta' for _, param in named):
        return [_whole(param) for _, param in named]
    state = model.engine.state_dict()
    return [state[name].detach().to('cpu', torch.float64).clone() for name, _ in named] if state else []


def _whole(param: torch.Tensor) -> torch.Tensor:
    """A parameter as a float64 CPU tensor; a sharded one's whole tensor (gathered: every rank calls this)."""
    gather = getattr(param, 'full_tensor', None)
    return (param if gather is None else gather()).detach().to('cpu', torch.float64).clone()


def _relative(got: list, want: list) -> float:
    scale = max(float(tensor.abs().max()) for tensor in want) or 1.0
    return max(float((a - b).abs().max()) for a, b in zip(got, want)) / scale


def layout_pieces(batch_size: int, devices: int, ranks: int = 1, microbatch: int | None = None) -> int:
    """How many partial gradients a batch of ``batch_size`` is summed from on ``devices`` devices in each of
    ``ranks`` data-parallel ranks, with micro-batches of ``microbatch`` items (``None``: one piece a device)."""
    parts = max(1, devices * ranks)
    if not microbatch:
        return parts
    return parts * max(1, math.ceil(math.ceil(batch_size / parts) / microbatch))


def default_tolerance(dtype: str, pieces: int, steps: int) -> float:
    """``8 * eps * pieces * steps``: the tolerance of ``verify`` when ``--tolerance`` is not given."""
    return 8 * torch.finfo(getattr(torch, dtype)).eps * max(1, pieces) * max(1, steps)


def _layouts(device: Any, microbatch: int | None, stages: int | None) -> tuple[dict, dict]:
    one = {'device': 'cpu', 'microbatch': None, 'device_weights': None, 'device_map': None, 'sharding': None,
           'pipeline': None}
    return one, {**one, 'device': device, 'microbatch': microbatch, 'pipeline': stages}


def _checkpoint_file(checkpoint: str) -> str:
    path = files.latest(os.fspath(checkpoint)) if os.path.exists(checkpoint) else None
    if path is None:
        raise FileNotFoundError(f"Expected a run checkpoint file or a folder holding one. Received: {checkpoint!r}. "
                                "Give the checkpoint=... folder of the run, or one of its .flowpipe files.")
    return path


def recorded_replay(path: str, source: str, steps: int, layout: dict, dtype: str,
                    trusted: bool = False) -> list[RootCall]:
    """``replay`` under a ``Recorder``: every root call of the replay, with its modules' activations and gradients."""
    with Recorder() as recorder:
        replay(path, source, steps, layout, dtype, trusted)
    return recorder.calls


def diagnose(checkpoint: str, source: str, steps: int, device: Any, microbatch: int | None = None,
             dtype: str = 'float64', ranks: int = 1, stages: int | None = None, trusted: bool = False,
             tolerance: float = 0.0) -> Divergence | None:
    """Replay as ``verify`` does, under hooks: the first module whose activations or gradients differ by more
    than ``tolerance`` (``flowpipe.execution.divergence``), ``None`` when none does."""
    path = _checkpoint_file(checkpoint)
    one, layout = _layouts(device, microbatch, stages)
    reference = recorded_replay(path, source, steps, one, dtype, trusted)
    if ranks == 1:
        other = recorded_replay(path, source, steps, layout, dtype, trusted)
    else:
        from ..parallel import launch
        file, name = _split(source)
        results = launch(recorded_replay, ranks, args=(path, f'{os.path.abspath(file)}:{name}', steps, layout,
                                                      dtype, trusted), timeout=_LAUNCH_TIMEOUT)
        other = [call for calls in results for call in calls]
    return first_divergence(reference, other, tolerance)


def verify(checkpoint: str, source: str, steps: int, device: Any, microbatch: int | None = None,
           dtype: str = 'float64', ranks: int = 1, stages: int | None = None, trusted: bool = False) -> dict[str, Any]:
    """Replay ``steps`` batches of ``checkpoint`` (a file, or a folder: its newest) on ``device``/``microbatch``
    (in ``ranks`` gloo processes started by ``flowpipe.parallel.launch`` when more than 1, in pipelines of ``stages``
    stages: the models' ``'pipeline'``, ``None`` for none) and in one process on ``'cpu'``; ``{'path', 'steps',
    'batch_size', 'deviations': {model: largest relative deviation}, 'identical': {model: same bits}}``. The
    checkpoint is read safely (``flowpipe.safe_pickle``) unless ``trusted``, which runs the code it names."""
    path = _checkpoint_file(checkpoint)
    one, layout = _layouts(device, microbatch, stages)
    reference, count = replay(path, source, steps, one, dtype, trusted)
    if ranks == 1:
        other, _ = replay(path, source, steps, layout, dtype, trusted)
    else:
        from ..parallel import launch
        file, name = _split(source)             # the ranks may start elsewhere
        source = f'{os.path.abspath(file)}:{name}'
        other, _ = launch(replay, ranks, args=(path, source, steps, layout, dtype, trusted),
                          timeout=_LAUNCH_TIMEOUT)[0]
    batch_size = ast.literal_eval(files.read(path, trusted)['fingerprint']['run']['batch_size'])
    return {'path': path, 'steps': count, 'batch_size': batch_size,
            'deviations': {name: _relative(other[name], reference[name]) for name in reference},
            'identical': {name: len(other[name]) == len(reference[name]) and all(
                torch.equal(a, b) for a, b in zip(other[name], reference[name])) for name in reference}}


# ----- the command line -----

def _dtype(text: str) -> str:
    if text not in DTYPES:
        raise argparse.ArgumentTypeError(f"Expected --dtype float32 or float64. Received: {text!r}.")
    return text


def _count(option: str) -> Callable[[str], int]:
    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"Expected {option} as an int >= 1. Received: {text!r}.")
        return value
    return read


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"Expected --tolerance as a finite number >= 0 (a relative deviation such "
                                         f"as 1e-10). Received: {text!r}. Leave it out for the default tolerance "
                                         "of the dtype and the layout, or give --bitwise for the same bits.")
    return value


def add_verify(parser: argparse.ArgumentParser, device: Callable[[str], Any]) -> None:
    """The options of ``python -m flowpipe verify`` (``device``: how ``--device`` is read)."""
    parser.add_argument('checkpoint', help="a run checkpoint file, or its folder (the newest file)")
    parser.add_argument('--pipeline', required=True, metavar='FILE.py:NAME',
                        help="the Python file defining the checkpoint's pipeline bound to its dataset (or a function "
                             "returning it) as NAME (default: pipeline); it runs with __name__ != '__main__'")
    parser.add_argument('--steps', type=_count('--steps'), default=1, help='batches to replay (default: 1)')
    parser.add_argument('--device', type=device, required=True,
                        help="the layout to check: 'CPU:0x4', 'GPU:0', or a comma-separated list 'CPU:0,CPU:1'")
    parser.add_argument('--microbatch', type=int, default=None, help='items per micro-batch (default: off)')
    parser.add_argument('--ranks', type=_count('--ranks'), default=1,
                        help='replay in this many gloo processes, each on --device (one device) (default: 1)')
    parser.add_argument('--stages', type=_count('--stages'), default=None,
                        help="with --ranks: the models' 'pipeline', pipeline stages per pipeline (default: none)")
    parser.add_argument('--dtype', type=_dtype, default='float64',
                        help='float32 or float64, for the models and torch\'s default dtype (default: float64)')
    parser.add_argument('--trusted', action='store_true',
                        help='read the checkpoint with dill, running any code it names (variables of your own classes); '
                             'by default it is read safely and such a file is refused')
    parser.add_argument('--tolerance', type=_tolerance, default=None,
                        help='exit with status 1 when the deviation is above this finite number >= 0 (default: '
                             '8 * eps * pieces * steps, eps the dtype\'s machine epsilon, pieces the partial '
                             'gradients a batch is summed from on the layout)')
    parser.add_argument('--bitwise', action='store_true',
                        help='exit with status 1 unless the replay gives the same bits as one process')


def run_verify(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``python -m flowpipe verify``: print each model's deviation and the largest; the exit status."""
    from ..errors import LaunchError, UnsafeFileError
    from ..parallel import make_plan
    try:
        plan = make_plan(args.device, args.microbatch)
    except (ValueError, TypeError) as error:      # DeviceError is a ValueError
        print(f'{parser.prog}: error: {error}', file=sys.stderr)
        return 2
    if args.stages is not None and args.ranks % args.stages:
        print(f"{parser.prog}: error: Expected --ranks a multiple of --stages (pipelines of that many ranks). "
              f"Received: --ranks {args.ranks}, --stages {args.stages}. Give --ranks {args.stages} or a multiple.",
              file=sys.stderr)
        return 2
    if args.ranks > 1 and len(plan.devices) > 1:
        print(f"{parser.prog}: error: Expected one device per rank with --ranks {args.ranks}. Received: --device "
              f"{args.device!r}, {len(plan.devices)} devices. Give --device cpu, or --ranks 1.", file=sys.stderr)
        return 2
    run = (args.checkpoint, args.pipeline, args.steps, args.device, args.microbatch, args.dtype, args.ranks,
           args.stages, args.trusted)
    try:
        result = verify(*run)
    except UnsafeFileError as error:
        print(f'{parser.prog} verify: error: {error} Here: add --trusted.', file=sys.stderr)
        return 2
    except (OSError, ValueError, TypeError, CheckpointError, LaunchError) as error:
        print(f'{parser.prog} verify: error: {error}', file=sys.stderr)
        return 2
    where = f"{args.ranks} ranks, each " if args.ranks > 1 else ''
    where = f"{args.ranks // args.stages} pipeline(s) of {args.stages} stages, " + where if args.stages else where
    print(f"replayed {result['steps']} step(s) of {result['path']} in {args.dtype}: {where}device={args.device!r}, "
          f"microbatch={args.microbatch} against one process on cpu")
    for name, deviation in result['deviations'].items():
        print(f"  model {name!r}: largest relative deviation of the parameters {deviation:.3g}")
    largest = max(result['deviations'].values(), default=0.0)
    print(f'largest relative deviation: {largest:.3g}')
    tolerance, why = args.tolerance, '--tolerance'
    if tolerance is None:
        data_ranks = args.ranks // (args.stages or 1)
        pieces = layout_pieces(result['batch_size'], len(plan.devices), data_ranks, args.microbatch)
        tolerance = default_tolerance(args.dtype, pieces, result['steps'])
        why = f"8 * eps * pieces * steps: eps {torch.finfo(getattr(torch, args.dtype)).eps:.3g} of {args.dtype}, " \
              f"{pieces} piece(s) a batch, {result['steps']} step(s)"
    identical = all(result['identical'].values())
    if args.bitwise:
        print(f"bit-identical: {'yes' if identical else 'no'} (--bitwise)")
        failed = not identical
    else:
        print(f'tolerance: {tolerance:.3g} ({why})')
        failed = not largest <= tolerance            # a nan deviation fails too
    if not failed:
        return 0
    try:
        found = diagnose(*run, tolerance=0.0 if args.bitwise else tolerance)
    except (OSError, ValueError, TypeError, CheckpointError, LaunchError) as error:
        print(f'first divergence: not found ({error})')
        return 1
    print(f'first divergence: {found}' if found is not None else
          'first divergence: no module activation or gradient of the replayed forwards differs beyond the '
          'tolerance (the difference lies elsewhere: the optimizer, buffers, or forwards whose pieces could not '
          'be placed on the items of one process)')
    return 1
