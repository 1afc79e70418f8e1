"""Randomness by item: dropout masks that do not depend on how a batch is cut (``'randomness': 'by_item'``).

Under ``'torch'`` (``flowpipe.parallel.randomness``) every piece of a step draws its masks from torch's generator
seeded for the piece: reproducible, but a mask belongs to a piece, so one device, replicas, micro-batches and ranks
draw different masks and train different models. Under ``'by_item'`` the mask of an element of an item is a pure
function of

    (step seed, module, call, global item index, element index)

computed by a counter-based hash: splitmix64's finalizer over int64 counters, in torch, on the input's device. The
step seed is the run's (``train_model`` derives it from the run's seed and the batch's place, or it is drawn from
torch's generator), the module is its qualified name in the network, the call counts the module's calls in the
piece's forward (a module used twice draws twice), and the item's index is its place in the (global) batch. So one
device, replicas, micro-batches, ranks and sharded ranks draw the same bits, and a resumed run draws what the
uninterrupted one would have.

What draws by item: ``nn.Dropout``, ``Dropout1d``, ``Dropout2d``, ``Dropout3d``, ``AlphaDropout`` and
``FeatureAlphaDropout`` modules (and subclasses that keep their ``forward``), while the engine runs a training step:
:meth:`ItemStreams.step` gives those modules a forward of their own for the step and takes it back afterwards (the
user's modules are left as they were). Their ``p``, ``inplace``, training or evaluation mode and the scaling by
``1 / (1 - p)`` (AlphaDropout's affine correction) are torch's. An input whose first axis is not the piece's items
(a sequence-first transformer), a subclass with its own ``forward``, and random operations that are not these
modules draw from torch's generator of the piece as under ``'torch'`` (a warning names such a module once, and the
plan's line names it: ``qualified``). Random *calls* in a forward (``F.dropout``, attention dropout in
``scaled_dot_product_attention`` and ``nn.MultiheadAttention``) draw by item through ``item_calls.CallDraws``.

Activation checkpointing (``flowpipe.models.torch.checkpointing``) runs a checkpointed module's forward a second time
during backward. Its dropout calls must not count as new calls: around the first forward a :class:`DrawLog` records
every draw (the stream and the first item, or torch's own dropout), and around the recomputation it hands them back
in the same order, so the recomputed masks are the first forward's bit for bit.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import math
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..torchutils import NO_CONTEXT

__all__ = ['BY_ITEM', 'RANDOMNESS', 'TORCH', 'DrawLog', 'ItemStreams', 'call_stream', 'check_randomness', 'describe_randomness',
           'dropout_modules', 'item_dropout', 'keep_mask', 'mix', 'qualified']

BY_ITEM, TORCH = 'by_item', 'torch'
RANDOMNESS = (BY_ITEM, TORCH)
#: the plan's randomness when the config does not say (see ``check_randomness``)
DEFAULT = BY_ITEM

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15            # splitmix64's increment: 2**64 / golden ratio, odd
_ELEMENT_STEP = 0xD1B54A32D192ED03       # another odd constant, for the element counter
_BITS = 53                               # the bits of a hash compared with p (a double's mantissa)
_BLOCK = 1 << 22                         # counters hashed at once: bounds the int64 scratch memory (32 MiB)
_ALPHA = 1.7580993408473766              # torch's alpha dropout constant (SELU's scale times alpha)


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores it."""
    value &= _MASK
    return value - (1 << 64) if value >> 63 else value


def mix(value: int) -> int:
    """splitmix64's finalizer on a Python int (the reference of the tensor version)."""
    value &= _MASK
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


_C1, _C2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _mix_(counters: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer in place on an int64 tensor: wrapping products, logical shifts (masked)."""
    for shift, factor in ((30, _C1), (27, _C2), (31, None)):
        counters.bitwise_xor_(counters.bitwise_right_shift(shift).bitwise_and_((1 << (64 - shift)) - 1))
        if factor is not None:
            counters.mul_(factor)
    return counters


def call_stream(seed: int, module_key: int, call: int) -> int:
    """The 64-bit stream of one call of one module in one step."""
    return mix((mix(mix(seed) ^ module_key)) + (call + 1) * _GOLDEN)


def keep_mask(stream: int, start: int, items: int, width: int, p: float, device: torch.device) -> torch.Tensor:
    """Which elements to keep: a bool ``(items, width)`` tensor on ``device`` for items ``start, start + 1, ...`` of
    the global batch, each element kept with probability ``1 - p``.

    Element ``j`` of item ``i`` is kept when the top 53 bits of ``mix(mix(stream + (i + 1) * G) + (j + 1) * E)``,
    read as an integer, are at least ``round(p * 2**53)``: the same bits on every device and for every cut.
    """
    threshold = round(p * (1 << _BITS))
    keys = torch.arange(start + 1, start + items + 1, dtype=torch.int64, device=device)
    _mix_(keys.mul_(_signed(_GOLDEN)).add_(_signed(stream)))
    elements = torch.arange(1, width + 1, dtype=torch.int64, device=device).mul_(_signed(_ELEMENT_STEP))
    out = torch.empty((items, width), dtype=torch.bool, device=device)
    rows = max(1, _BLOCK // max(width, 1))
    for first in range(0, items, rows):
        counters = _mix_(keys[first:first + rows, None] + elements)
        top = counters.bitwise_right_shift_(64 - _BITS).bitwise_and_((1 << _BITS) - 1)
        torch.ge(top, threshold, out=out[first:first + rows])
    return out


class Kind(NamedTuple):
    """How a dropout module masks: per element or per feature map (``feature``), with AlphaDropout's correction
    (``alpha``); ``dims``: the input ranks it masks by item (``None``: any rank of at least 1, 2 for features)."""

    feature: bool
    alpha: bool
    dims: tuple[int, ...] | None = None


_KINDS: dict[Callable, Kind] = {
    nn.Dropout.forward: Kind(False, False),
    nn.Dropout1d.forward: Kind(True, False, (3,)),             # (N, C, L); (C, L) is one unbatched item
    nn.Dropout2d.forward: Kind(True, False, (3, 4)),           # torch reads a 3-D input as (N, C, L)
    nn.Dropout3d.forward: Kind(True, False, (5,)),
    nn.AlphaDropout.forward: Kind(False, True),
    nn.FeatureAlphaDropout.forward: Kind(True, True),
}


def item_dropout(input: torch.Tensor, p: float, inplace: bool, kind: Kind, stream: int,  # noqa: A002 - torch's name
                 start: int) -> torch.Tensor:
    """Dropout of ``input``, whose first axis holds items ``start, start + 1, ...`` of the global batch, with the
    masks of ``stream`` (``call_stream``); as torch's dropout of ``kind`` in training mode otherwise."""
    if p == 1:
        return input.mul_(0) if inplace else input * 0
    items = input.shape[0]
    width = input.shape[1] if kind.feature else math.prod(input.shape[1:])
    noise = keep_mask(stream, start, items, width, p, input.device).to(input.dtype)
    noise = noise.reshape((items, width) + (1,) * (input.dim() - 2) if kind.feature else input.shape)
    if kind.alpha:
        scale = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
        shift = noise.add(-1).mul_(_ALPHA * scale).add_(_ALPHA * scale * p)
        noise.mul_(scale)
        return (input.mul_(noise) if inplace else input * noise).add_(shift)
    noise.div_(1 - p)
    return input.mul_(noise) if inplace else input * noise


def dropout_modules(root: nn.Module) -> list[tuple[str, nn.Module, Kind]]:
    """``(qualified name, module, kind)`` for every dropout module of ``root`` that draws by item."""
    found = []
    for name, module in root.named_modules():
        # looked up without running descriptors: a scripted module's class ``forward`` is one that fails on a class
        kind = _KINDS.get(inspect.getattr_static(type(module), 'forward', None))
        if kind is not None:
            found.append((name, module, kind))
    return found


def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), 'little')


@dataclass
class _Piece:
    """The piece a replica is running: its first item in the global batch, its size and the calls so far."""

    seed: int = 0
    start: int = 0
    size: int | None = None
    calls: dict[int, int] = field(default_factory=dict)
    quiet: int = 0          # > 0 while a dropout module runs torch's own dropout (its call is not the forward's)


class _Draw(NamedTuple):
    """One by-item dropout call: its stream and the global index of its input's first item."""

    stream: int
    start: int


_FRAMES = threading.local()     # per thread: the DrawLog frames entered (recording or replaying), innermost last


class DrawLog:
    """The dropout draws of one checkpointed forward, in call order, replayed when backward recomputes it.

    ``recording()`` wraps the first forward: every by-item dropout call in it (on this thread) appends its
    :class:`_Draw`, or ``None`` for one that ran torch's own dropout (its generator state is the checkpoint's to
    restore). ``replaying()`` wraps a recomputation (entered again for each): the calls take the recorded draws in
    order instead of counting new calls.
    """

    def __init__(self) -> None:
        self.draws: list[_Draw | None] = []
        self.replay = False
        self.position = 0

    def recording(self) -> contextlib.AbstractContextManager:
        """The context of the first forward."""
        return _entered(self, replay=False)

    def replaying(self) -> contextlib.AbstractContextManager:
        """The context of a recomputation (reusable: a second backward through the same graph replays again)."""
        return _entered(self, replay=True)

    def next(self) -> _Draw | None:
        """The next recorded draw."""
        if self.position >= len(self.draws):
            raise RuntimeError(f"Expected a recomputed forward to make the {len(self.draws)} dropout call(s) of its "
                               "first forward. Received: more calls. A checkpointed module must run the same "
                               "dropout modules each time it is called; leave it out of 'checkpoint_activations'.")
        self.position += 1
        return self.draws[self.position - 1]


@contextlib.contextmanager
def _entered(log: DrawLog, replay: bool) -> Iterator[None]:
    frames = _FRAMES.__dict__.setdefault('frames', [])
    log.replay, log.position = replay, 0
    frames.append(log)
    try:
        yield
    finally:
        frames.pop()


def _active_log() -> DrawLog | None:
    frames = getattr(_FRAMES, 'frames', None)
    return frames[-1] if frames else None


class ItemStreams:
    """The dropout modules of an engine's replicas and, during a step, their forwards that draw by item.

    Args:
        roots: one network per replica (the primary's first), each run by one thread at a time.
    """

    def __init__(self, roots: Sequence[nn.Module]):
        self._roots = list(roots)
        self._modules: list[list[tuple[str, nn.Module, Kind]]] | None = None
        self._pieces = [_Piece() for _ in self._roots]
        from .item_calls import CallDraws        # the calls' mode reads this module's masks
        self._modes = [CallDraws(self, piece, replica) for replica, piece in enumerate(self._pieces)]
        self._warned: set[str] = set()
        #: the random calls met in a training forward that do not draw by item: ``{function: module}``
        self.uncovered: dict[str, str] = {}
        #: the calls' mode watches the forward while ``watching``: from the first training step on, and after a
        #: step whose forward made no random call (``calls_seen`` still false) no longer (see ``piece``)
        self.watching, self.calls_seen = True, False

    @contextlib.contextmanager
    def step(self, seed: int) -> Iterator[None]:
        """Every dropout module draws by item inside (keyed by ``seed``); their own forwards come back on exit."""
        if self._modules is None:
            self._modules = [dropout_modules(root) for root in self._roots]
        patched = []
        try:
            for piece, modules in zip(self._pieces, self._modules):
                piece.seed, piece.size = seed, None
                for name, module, kind in modules:
                    if 'forward' not in vars(module):       # a forward set on the instance by its user stays
                        module.forward = self._forward(module, name, kind, piece)
                        patched.append(module)
            yield
            if not self.calls_seen:     # a forward without random calls: later steps run without the mode
                self.watching = False
        finally:
            for module in patched:
                del module.forward

    def piece(self, replica: int, start: int, size: int) -> TorchFunctionMode:
        """Replica ``replica`` runs the piece of ``size`` items whose first is item ``start`` of the global batch:
        the mode to run its forward (and backward) in, on its thread (``item_calls.CallDraws``). The mode sees every
        torch call of the forward, which costs time on every step; after a first training step whose forward made no
        random call (a network whose randomness is its dropout modules, or none), the steps run without it."""
        piece = self._pieces[replica]
        piece.start, piece.size = start, size
        piece.calls.clear()
        return self._modes[replica] if self.watching else NO_CONTEXT

    def uncovered_call(self, name: str, replica: int, shape: tuple[int, ...] | None) -> None:
        """A random call ``name`` of a training forward on ``replica`` drew from torch's generator: said once."""
        if name in self.uncovered:
            return
        from .item_calls import caller_module
        module = caller_module(self._roots[replica])
        self.uncovered[name] = 'the network' if module in (None, '') else repr(module)
        why = 'does not draw by item' if shape is None else (
            f"got an input of shape {shape} whose first axis is not the piece's {self._pieces[replica].size} items")
        warnings.warn(f"Expected every random call of a training forward to draw by item under 'randomness': "
                      f"'by_item'. Received: {name} in {self.uncovered[name]}, which {why}: its draws come from "
                      f"torch's generator of the piece, and the layout (devices, micro-batches, ranks) changes the "
                      f"result. Use dropout (nn.Dropout*, F.dropout*, attention dropout) on batch-first tensors, "
                      f"draw the noise outside the forward (R(...) in the pipeline), or set 'randomness': 'torch'.",
                      UserWarning, stacklevel=4)

    def _forward(self, module: nn.Module, name: str, kind: Kind, piece: _Piece) -> Callable[[torch.Tensor], Any]:
        own, key = type(module).forward, _name_key(name)

        def forward(input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's name
            if not module.training or module.p == 0:
                return own(module, input)
            log = _active_log()
            if log is not None and log.replay:
                draw = log.next()
            else:
                draw = self._draw(piece, key, name, kind, input)
                if log is not None:
                    log.draws.append(draw)
            if draw is None:
                piece.quiet += 1
                try:
                    return own(module, input)
                finally:
                    piece.quiet -= 1
            return item_dropout(input, float(module.p), module.inplace, kind, draw.stream, draw.start)
        return forward

    def _draw(self, piece: _Piece, key: int, name: str, kind: Kind, input: torch.Tensor) -> _Draw | None:  # noqa: A002
        """The draw of a new call of a module in ``piece``; ``None`` when torch's own dropout runs (outside a piece,
        or an input that does not hold the piece's items along its first axis: warned once)."""
        if piece.size is None:
            return None
        call = piece.calls.get(key, 0)
        piece.calls[key] = call + 1
        if (input.dim() < 2 if kind.feature else input.dim() < 1) or input.shape[0] != piece.size or (
                kind.dims is not None and input.dim() not in kind.dims):
            self._warn(name, input, piece.size)
            return None
        return _Draw(call_stream(piece.seed, key, call), piece.start)

    def _warn(self, name: str, input: torch.Tensor, size: int) -> None:  # noqa: A002
        if name not in self._warned:
            self._warned.add(name)
            self.uncovered[f'dropout module {name!r}'] = repr(name)
            warnings.warn(f"Expected the input of dropout module {name!r} to hold the piece's {size} items along its "
                          f"first axis under 'randomness': 'by_item'. Received: an input of shape "
                          f"{tuple(input.shape)}. Its masks come from torch's generator of the piece, the same only "
                          f"on the same layout; make the module's input batch-first (e.g. batch_first=True), or set "
                          f"'randomness': 'torch'.", UserWarning, stacklevel=3)


def check_randomness(randomness: Any, compile: Any = None) -> str:  # noqa: A002 - the plan's name
    """``randomness`` as the plan's value; ``None`` is ``DEFAULT``, or ``'torch'`` for a compiled model (a compiled
    forward would be traced anew for every step's seed)."""
    if randomness is None:
        return TORCH if compile is not None else DEFAULT
    if not isinstance(randomness, str):
        raise TypeError(f"Expected randomness as one of {list(RANDOMNESS)}. Received: {randomness!r} of type "
                        f"{type(randomness).__name__}.")
    value = randomness.lower().replace('-', '_')
    if value not in RANDOMNESS:
        raise ValueError(f"Expected randomness as 'by_item' (dropout masks drawn per item: the same on every layout) "
                         f"or 'torch' (torch's generators, one stream per piece). Received: "
                         f"randomness={randomness!r}.")
    if value == BY_ITEM and compile is not None:
        raise ValueError("Expected randomness='torch' with compile (a compiled forward would be traced anew for "
                         "every step's dropout seed). Received: randomness='by_item' and compile. Drop compile, or "
                         "set 'randomness': 'torch'.")
    return value


_BY_ITEM_LINE = ("  randomness 'by_item': dropout masks drawn per item (step seed, module, call, item), the same on "
                 "every layout")


def qualified(text: str, streams: ItemStreams | None) -> str:
    """A plan's ``text`` that no longer claims the same draws on every layout for the random calls ``streams`` met
    that do not draw by item."""
    if streams is None or not streams.uncovered:
        return text
    calls = ', '.join(f'{name} in {module}' for name, module in streams.uncovered.items())
    return text.replace(_BY_ITEM_LINE, f"{_BY_ITEM_LINE[:-len(', the same on every layout')]}, the same on every "
                        f"layout but for {calls}: drawn from torch's generator, the same only on the same layout")


def describe_randomness(randomness: str, compile: Any = None) -> list[str]:
    """The plan's line about its dropout masks."""
    if randomness == BY_ITEM:
        return [_BY_ITEM_LINE]
    why = ' (compiled)' if compile is not None else ''
    return [f"  randomness 'torch'{why}: dropout masks from torch's generators, one stream per piece: the same only "
            f"on the same layout"]
