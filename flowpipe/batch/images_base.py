"""``ImagesBase``: what every image action shares — layouts, reading and writing components, ``p=``, and warps.

Actions read a component as torch groups of equal-shaped images (``images_data``), run their kernel on each group
(on the CPU in pieces of about 2 MB, which stay in cache) for the items ``p=`` chose, and write the result back in
the component's kind and layout.

Consecutive geometric actions (``rotate``, ``scale(preserve_shape=True)``, ``shift``, ``flip``, ``transform``)
on one component are *fused*: each multiplies a per-item map into a pending warp, and the images are resampled
once, when anything reads the component next (an action, ``batch.images``, ``B.images``, pickling). While a
warp is pending the component is not in the instance dictionary, so reading it goes through ``__getattr__``,
which resamples and stores the result. One resampling instead of several is faster and blurs less; pixels
that one step moves out of the frame and a later step brings back keep their content instead of the fill.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..expr.special import draw_for_items
from .augment_params import probability
from .base import Batch

if TYPE_CHECKING:
    import torch

    from .images_data import Groups

__all__ = ['ImagesBase', 'PendingWarp']

# Kernels import torch: they are imported inside the methods that need them, so that importing flowpipe does not.
Kernel = Callable[['torch.Tensor', np.ndarray], 'torch.Tensor']


@dataclass
class PendingWarp:
    """A component's images and the per-item maps still to be applied to them (see ``images_warp``).

    ``after`` holds pixel operations fused behind the warp: ``(op, cast)`` pairs, ``op(values, positions,
    dtype)`` changing float values of the items at ``positions`` as an action whose output dtype is ``dtype``
    would, ``cast(dtype)`` that output dtype for an input dtype.
    """
    value: Any
    maps: np.ndarray
    fill: float
    resample: str
    after: list = field(default_factory=list)


class ImagesBase(Batch):
    """Images (``images``) and their labels (``labels``), with the machinery image actions share."""
    components = ('images', 'labels')
    _channels_first: frozenset = frozenset()
    _pending: dict | None = None

    # --- pending warps ----------------------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Called only when normal lookup fails: for a component whose warp is pending, resample it now.
        pending = self.__dict__.get('_pending')
        if pending and name in pending:
            self._materialize(name)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        self._materialize_all()
        return self.__dict__.copy()

    def _materialize_all(self) -> None:
        for name in list(self._pending or ()):
            self._materialize(name)

    def _materialize(self, name: str) -> None:
        pending = self._pending.pop(name, None) if self._pending else None
        if pending is None or name in self.__dict__:   # a value assigned since replaces the pending warp
            return
        from . import images_data as data
        read = data.read(pending.value, name in self._channels_first, name)
        results = [(positions, _resample(tensor, positions, pending)) for positions, tensor in read.groups]
        self.__dict__[name] = data.write(results, read, name in self._channels_first)

    def _take_pending(self, name: str) -> PendingWarp | None:
        """The pending warp of ``name``, removed from the batch (the caller applies it), or ``None``."""
        if not self._pending or name not in self._pending:
            return None
        if name in self.__dict__:
            del self._pending[name]
            return None
        return self._pending.pop(name)

    def _defer(self, name: str, maps: np.ndarray, fill: float, resample: str) -> None:
        """Compose ``maps`` into the pending warp of component ``name`` (start one if there is none)."""
        if self._pending is None:
            self._pending = {}
        pending = self._take_pending(name)
        if pending is not None and (pending.fill != fill or pending.resample != resample or pending.after):
            self._pending[name] = pending
            self._materialize(name)
            pending = None
        if pending is None:
            pending = PendingWarp(self.__dict__.pop(name), np.tile(np.eye(3), (len(maps), 1, 1)), fill, resample)
        pending.maps = pending.maps @ maps
        self._pending[name] = pending

    def _defer_after(self, name: str, op: Callable, cast: Callable) -> bool:
        """Fuse a pixel operation behind the pending warp of ``name`` (see ``PendingWarp``); False if none."""
        if not self._is_pending(name):
            return False
        self._pending[name].after.append((op, cast))
        return True

    # --- reading and writing components -------------------------------------------------------------------------

    def _value(self, src: str) -> Any:
        if src not in self.components:
            raise ValueError(f"Expected images in component {src!r}. Received: no such component; the batch has "
                             f"{self.components!r}.")
        value = getattr(self, src)
        if value is None:
            raise ValueError(f"Expected images in component {src!r}. Received: None. Load or preload images "
                             f"first.")
        return value

    def _is_pending(self, src: str) -> bool:
        """Whether component ``src`` has a warp waiting to be applied."""
        return bool(self._pending) and src in self._pending and src not in self.__dict__

    def _check_images(self, src: str) -> None:
        """Raise unless ``src`` is a component holding images (or a pending warp of them); resamples nothing."""
        if not self._is_pending(src):
            self._value(src)

    def _read(self, src: str) -> Groups:
        from . import images_data as data
        return data.read(self._value(src), src in self._channels_first, src)

    def _store(self, dst: str, value: Any, channels_first: bool) -> ImagesBase:
        if dst not in self.components:
            self.check_component_names((dst,))
            self.components = self.components + (dst,)
        if self._pending:
            self._pending.pop(dst, None)
        setattr(self, dst, value)
        self._channels_first = (self._channels_first | {dst}) if channels_first else (self._channels_first - {dst})
        return self

    def _write(self, src: str, dst: str | None, results: list, read: Groups) -> ImagesBase:
        """Store result groups of ``src`` to ``dst`` (``src`` by default) in ``src``'s kind and layout."""
        from . import images_data as data
        first = src in self._channels_first
        return self._store(src if dst is None else dst, data.write(results, read, first), first)

    @staticmethod
    def _pairs(src: str | Sequence[str], dst: str | Sequence[str] | None) -> list[tuple[str, str]]:
        sources = [src] if isinstance(src, str) else list(src)
        targets = sources if dst is None else ([dst] if isinstance(dst, str) else list(dst))
        if len(sources) != len(targets) or not all(isinstance(name, str) for name in sources + targets):
            raise ValueError(f"Expected src and dst as component names, as many dst as src. Received: src={src!r}, "
                             f"dst={dst!r}.")
        return list(zip(sources, targets))

    def _item_seeds(self) -> np.ndarray:
        """One seed per item, drawn from the batch's generator: an action's per-item draws come from them, so
        they do not depend on how items are grouped, chunked or chosen, and repeat for every ``src`` component."""
        return draw_for_items(self, len(self), lambda n: self.random.integers(2 ** 63, size=n))

    def _chosen(self, p: float | None) -> np.ndarray | None:
        """The items ``p`` picks (one draw per action, shared by all its components); ``None`` for all."""
        return probability(p, len(self), self.random, self)

    # --- applying kernels ---------------------------------------------------------------------------------------

    def _apply(self, kernel: Kernel, src: str | Sequence[str], dst: str | Sequence[str] | None,
               p: float | None) -> ImagesBase:
        """Run ``kernel(images, positions)`` once per shape group of each ``src`` on the items ``p`` picks."""
        return self._apply_on(kernel, src, dst, self._chosen(p))

    def _apply_on(self, kernel: Kernel, src: str | Sequence[str], dst: str | Sequence[str] | None,
                  chosen: np.ndarray | None) -> ImagesBase:
        """``_apply`` with the chosen items already drawn (``None``: all)."""
        from .images_data import on_chosen
        for source, target in self._pairs(src, dst):
            read = self._read(source)
            results = []
            for positions, tensor in read.groups:
                results.extend(on_chosen(kernel, positions, tensor, chosen))
            self._write(source, target, results, read)
        return self

    def _warp(self, make_maps: Callable[[np.ndarray], np.ndarray], src: str | Sequence[str],
              dst: str | Sequence[str] | None, fill: float, resample: str) -> ImagesBase:
        """Warp by the per-item maps ``make_maps(sizes)`` gives for the ``(N, 2)`` image sizes of each source.

        Deferred and fused with the component's pending warp when ``dst`` is ``src``; done at once otherwise.
        """
        from . import images_warp as warps
        for source, target in self._pairs(src, dst):
            self._check_images(source)
            maps = make_maps(self._sizes(source))
            if target == source:
                self._defer(source, maps, float(fill), resample)
                continue
            read = self._read(source)
            results = [(positions, warps.apply_maps(tensor, maps[positions], fill, resample))
                       for positions, tensor in read.groups]
            self._write(source, target, results, read)
        return self

    def _per_size(self, kernel: Callable[..., Any], out_sizes: Callable[[np.ndarray], np.ndarray],
                  src: str | Sequence[str], dst: str | Sequence[str] | None, chosen: np.ndarray | None) -> ImagesBase:
        """Run ``kernel(images, positions, (width, height))`` once per group of items with one output size.

        ``out_sizes(sizes)`` gives every item's output ``(width, height)`` from the ``(N, 2)`` input sizes; items
        ``chosen`` leaves out keep their images.
        """
        from .images_data import take
        for source, target in self._pairs(src, dst):
            read = self._read(source)
            out = out_sizes(self._sizes(source))
            picked = np.ones(read.size, dtype=bool) if chosen is None else chosen
            results = []
            for positions, tensor in read.groups:
                keys = np.concatenate([out[positions], picked[positions, None]], axis=1)
                for key in np.unique(keys, axis=0):
                    local = np.flatnonzero((keys == key).all(axis=1))
                    part = take(tensor, local)
                    done = kernel(part, positions[local], (int(key[0]), int(key[1]))) if key[2] else part
                    results.append((positions[local], done))
            self._write(source, target, results, read)
        return self

    def _read_unwarped(self, src: str) -> Groups:
        """The component's images as groups without resampling a pending warp (which keeps every shape)."""
        from . import images_data as data
        pending = self._pending[src] if self._is_pending(src) else None
        return data.read(pending.value, src in self._channels_first, src) if pending else self._read(src)

    def _sizes(self, src: str) -> np.ndarray:
        """``(N, 2)`` ``(width, height)`` of every image of ``src`` (without resampling a pending warp)."""
        read = self._read_unwarped(src)
        sizes = np.zeros((read.size, 2), dtype=np.int64)
        for positions, tensor in read.groups:
            sizes[positions] = (tensor.shape[3], tensor.shape[2])
        return sizes


def _resample(tensor: Any, positions: np.ndarray, pending: PendingWarp) -> Any:
    """One group of a pending warp: the maps, then the fused pixel operations, in one pass of pieces."""
    from . import images_warp as warps
    maps = pending.maps[positions]
    if not pending.after:
        return warps.apply_maps(tensor, maps, pending.fill, pending.resample)
    dtypes = [tensor.dtype]
    for _, cast in pending.after:
        dtypes.append(cast(dtypes[-1]))

    def after(values: Any, items: slice) -> Any:
        for (op, _), dtype in zip(pending.after, dtypes[1:]):
            values = op(values, positions[items], dtype)
        return values
    return warps.warp(tensor, maps, fill=pending.fill, resample=pending.resample, after=after, dtype=dtypes[-1])
