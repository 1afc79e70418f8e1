"""The batch-size finder: batchflow's ``compute_optimal_batch_size`` and ``get_memory_utilization``.

Memory is a percentage of the device's memory, as in batchflow, but measured at each step's peak instead of
sampled by a thread: on CUDA devices the used memory of the device (``torch.cuda.mem_get_info``) with this
process's allocator at its peak (``max_memory_reserved`` after ``reset_peak_memory_stats``); on the CPU the
process's peak resident memory (Linux's ``VmHWM``, reset before each step through ``/proc/self/clear_refs``) over
the memory the machine or the process's cgroup gives it. Elsewhere (MPS, a CPU without that reset, devices of
mixed kinds) the finder refuses with a ``RuntimeError``. Replicas on several devices count the fullest one.

Steps go through the model's engine (``train_step``/``predict``) without its callbacks, schedules or batch
counter, on copies of ``inputs``/``targets`` repeated up to the batch size (placeholders of the configured shapes
when not given); the network's weights, the optimizer's state and the rest of the model's state are restored
afterwards. On the CPU, running out of memory kills the process instead of raising: a batch size whose peak,
extrapolated from the sizes measured, would pass 90 % of the memory is counted as too big without being run.
``frequency`` and ``time_threshold`` are batchflow's sampling options: accepted, with nothing to time here.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from .inputs import as_list

if TYPE_CHECKING:
    from .model import TorchModel

__all__ = ['MemoryRecord', 'compute_optimal_batch_size', 'get_memory_utilization']

_CPU_GUARD = 90.0      # percent of the memory a CPU trial may be predicted to reach
_MAX_DOUBLINGS = 3     # get_memory_utilization doubles n at most this often for a stable reading
_CLEAR_REFS = '/proc/self/clear_refs'   # writing 5 resets the peak resident memory (Linux 4.0 and newer)


@dataclass
class MemoryRecord:
    """Peaks of measured steps (batchflow's ``monitor``): ``data`` in percent of ``total`` bytes, per step."""
    device: str
    total: int
    data: list[float] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)
    unit: str = '%'


class _Probe:
    """Measures the peak memory of one step on the model's devices, in percent."""

    def __init__(self, devices: list[torch.device]):
        kinds = {device.type for device in devices}
        if kinds == {'cuda'}:
            self.devices = sorted(set(devices), key=str)
            self.total = min(torch.cuda.mem_get_info(device)[1] for device in self.devices)
        elif kinds == {'cpu'}:
            _reset_cpu_peak()
            self.devices, self.total = [], _cpu_memory()
        else:
            raise RuntimeError(f"Expected a model on CUDA devices or on the CPU (Linux) to measure its memory. "
                               f"Received: devices {[str(d) for d in devices]}. Find the batch size on one kind of "
                               "device.")
        self.history: list[tuple[int, int]] = []     # (batch size, peak bytes)

    @property
    def name(self) -> str:
        return ', '.join(map(str, self.devices)) or 'cpu'

    def measure(self, step: Callable[[], Any], batch_size: int) -> int:
        """The peak bytes in use while ``step()`` runs (on the fullest device)."""
        if not self.devices:
            _reset_cpu_peak()
            step()
            peak = _cpu_peak()
        else:
            before = {}
            for device in self.devices:
                torch.cuda.synchronize(device)
                free, total = torch.cuda.mem_get_info(device)
                before[device] = total - free - torch.cuda.memory_reserved(device)   # others and the context
                torch.cuda.reset_peak_memory_stats(device)
            step()
            for device in self.devices:
                torch.cuda.synchronize(device)
            peak = max(before[d] + torch.cuda.max_memory_reserved(d) for d in self.devices)
        self.history.append((batch_size, peak))
        return peak

    def too_big(self, batch_size: int) -> bool:
        """On the CPU: whether the peak of ``batch_size``, extrapolated from the sizes measured, passes the guard."""
        sizes = sorted(dict(self.history).items())
        if self.devices or len(sizes) < 2:
            return False
        (small, low), (large, high) = sizes[-2], sizes[-1]
        predicted = high + (high - low) / (large - small) * (batch_size - large)
        return 100 * predicted / self.total > _CPU_GUARD


def _reset_cpu_peak() -> None:
    try:
        with open(_CLEAR_REFS, 'w') as file:
            file.write('5')              # resets the peak resident set size (Linux 4.0 and newer)
    except OSError as error:
        raise RuntimeError(f"Expected to measure the process's peak memory on the CPU (Linux's /proc/self/clear_refs"
                           f"). Received: {error}. Find the batch size on a CUDA device, or on Linux.") from None


def _cpu_peak() -> int:
    with open('/proc/self/status') as file:
        for line in file:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    raise RuntimeError("Expected VmHWM in /proc/self/status. Received: none. Find the batch size on a CUDA device.")


def _cpu_memory() -> int:
    total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    for path in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
        try:
            with open(path) as file:
                limit = file.read().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total


class _Session:
    """Holds the model's step lock, the probe and the model's state to restore; makes the batches."""

    def __init__(self, model: 'TorchModel', method: str, inputs: Any, targets: Any):
        if method not in ('train', 'predict'):
            raise ValueError(f"Expected method='train' or 'predict'. Received: method={method!r}.")
        self.model, self.method = model, method
        self.inputs = None if inputs is None else [torch.as_tensor(np.asarray(t)) for t in as_list(inputs)]
        self.targets = None if targets is None else [torch.as_tensor(np.asarray(t)) for t in as_list(targets)]

    def __enter__(self) -> '_Session':
        self.model._step_lock.acquire()
        try:
            if self.model.engine is None and self.inputs is not None:
                self.model._build_for(self.inputs)
            self.engine = self.model._built()
            self.probe = _Probe(list(self.engine.devices))
            self.saved = self.model.state()
        except BaseException:
            self.model._step_lock.release()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.model.optimizer.zero_grad(set_to_none=True)
            self.model.load_state(self.saved)
            _free()
        finally:
            self.model._step_lock.release()

    def batch(self, size: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        inputs = [_repeat(t, size) for t in self.inputs] if self.inputs is not None else self._placeholders(size)
        if self.method == 'predict':
            return inputs, []
        if self.targets is not None:
            return inputs, [_repeat(t, size) for t in self.targets]
        return inputs, self._placeholder_targets(size, inputs)

    def _placeholders(self, size: int) -> list[torch.Tensor]:
        spec, generator = self.model.spec, torch.Generator().manual_seed(0)
        names = spec.input_names or ('images',)
        missing = [name for name in names if name not in spec.shapes]
        if missing:
            raise ValueError(f"Expected inputs= or the shape of every network input. Received: no shape for "
                             f"{missing}. Pass inputs=, or add 'inputs/{missing[0]}/shape' to the config.")
        return [torch.rand((size, *spec.shapes[name]), generator=generator) for name in names]

    def _placeholder_targets(self, size: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        spec, generator = self.model.spec, torch.Generator().manual_seed(1)
        if not spec.target_names:         # batchflow's way: the network's own predictions as targets
            return [self.engine.predict(inputs).detach().cpu()]
        return [torch.randint(0, spec.classes[name], (size,), generator=generator) if name in spec.classes
                else torch.rand((size, *spec.shapes.get(name, ())), generator=generator)
                for name in spec.target_names]

    def run(self, size: int) -> Callable[[], Any]:
        inputs, targets = self.batch(size)
        model, engine = self.model, self.engine
        if self.method == 'predict':
            return lambda: engine.predict(inputs)
        return lambda: engine.train_step(inputs, targets, model.loss_fn, model.optimizer, return_outputs=False,
                                         clip_grad_norm=model.clip_grad_norm, clip_grad_value=model.clip_grad_value,
                                         seed=0, sam=model.sam)       # SAM's second pass counts too

    def percent(self, size: int) -> float:
        """The peak of one step on ``size`` items, in percent; infinite when it runs out of memory (or, on the CPU,
        is predicted to)."""
        if self.probe.too_big(size):
            return float('inf')
        try:
            return 100 * self.probe.measure(self.run(size), size) / self.probe.total
        except RuntimeError as error:
            if not _out_of_memory(error):
                raise
            self.model.optimizer.zero_grad(set_to_none=True)
            _free()
            return float('inf')


def _repeat(tensor: torch.Tensor, size: int) -> torch.Tensor:
    repeats = -(-size // len(tensor))
    return tensor.repeat(repeats, *[1] * (tensor.dim() - 1))[:size] if repeats > 1 else tensor[:size]


def _out_of_memory(error: RuntimeError) -> bool:
    text = str(error)
    return (isinstance(error, torch.OutOfMemoryError) or "DefaultCPUAllocator: can't allocate memory" in text
            or ('CUDA' in text and 'out of memory' in text))


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def get_memory_utilization(model: 'TorchModel', batch_size: int, method: str = 'train', inputs: Any = None,
                           targets: Any = None, n: int = 20, frequency: float = 0.05, time_threshold: float = 3,
                           tail_size: int = 20, std_threshold: float = 0.1) -> dict:
    """The peak memory of ``n`` steps on ``batch_size`` items: ``{'memory': percent, 'n': steps, 'monitor':
    MemoryRecord}``, the mean of the last ``tail_size`` steps' peaks. As in batchflow, unless the config says
    ``'benchmark': False``, ``n`` doubles (up to 3 times) until their standard deviation is below
    ``std_threshold``."""
    _check_positive(batch_size=batch_size, n=n, tail_size=tail_size)
    with _Session(model, method, inputs, targets) as session:
        record = MemoryRecord(session.probe.name, session.probe.total)
        step, count = session.run(batch_size), n
        for doubling in range(_MAX_DOUBLINGS + 1):
            for _ in range(count - len(record.data)):
                peak = session.probe.measure(step, batch_size)
                record.peak_bytes.append(peak)
                record.data.append(100 * peak / session.probe.total)
            tail = record.data[-tail_size:]
            if model.spec.get('benchmark') is False or np.std(tail) < std_threshold or doubling == _MAX_DOUBLINGS:
                break
            count *= 2
        return {'memory': float(np.mean(tail)), 'n': count, 'monitor': record}


def compute_optimal_batch_size(model: 'TorchModel', method: str = 'train', inputs: Any = None, targets: Any = None,
                               start_batch_size: int = 4, max_iters: int = 25, factor: int = 2, spread: float = 0.2,
                               estimation_method: str = 'bruteforce', n: int = 4, max_memory: float = 100,
                               pbar: Any = 'n', tail_size: int = 20, frequency: float = 0.05,
                               delta_batch_size: int = 16, max_batch_size: int = 1024,
                               max_iters_estimation: int = 2) -> int:
    """The largest batch size whose step peaks at ``max_memory`` percent of the device's memory or less.

    As batchflow: an estimate, by ``'bruteforce'`` (``start_batch_size`` multiplied by ``factor`` until a step does
    not fit) or ``'predictive'`` (a line through the memory of ``max_iters_estimation`` sizes, ``delta_batch_size``
    apart, each measured over ``n`` steps, solved for ``max_memory``; the search then spans ``spread`` around it),
    then a binary search of at most ``max_iters`` steps. ``pbar``: a progress bar unless false.
    """
    _check_positive(start_batch_size=start_batch_size, max_iters=max_iters, max_memory=max_memory,
                    delta_batch_size=delta_batch_size, max_batch_size=max_batch_size)
    if not isinstance(factor, int) or factor < 2:
        raise ValueError(f"Expected factor as an int of 2 or more. Received: factor={factor!r}.")
    from tqdm.auto import tqdm
    with _Session(model, method, inputs, targets) as session, tqdm(disable=not pbar, desc='batch size') as bar:
        def fits(size: int) -> bool:
            bar.update()
            bar.set_postfix(batch_size=size)
            return session.percent(size) <= max_memory

        if estimation_method == 'bruteforce':
            low, high = _bruteforce(fits, start_batch_size, factor)
            verified = True
        elif estimation_method == 'predictive':
            table = {}
            size = start_batch_size
            for _ in range(max_iters_estimation):
                table[size] = float(np.mean([session.percent(size) for _ in range(n)]))
                if table[size] > max_memory or size + delta_batch_size > max_batch_size:
                    break
                size += delta_batch_size
            estimate = _solve(table, max_memory)
            low, high, verified = max(1, int(estimate * (1 - spread))), max(2, int(estimate * (1 + spread))), False
        else:
            raise ValueError(f"Expected estimation_method='bruteforce' or 'predictive'. Received: "
                             f"{estimation_method!r}.")
        return _binary(fits, low, high, max_iters, verified, max_memory)


def _bruteforce(fits: Callable[[int], bool], start: int, factor: int) -> tuple[int, int]:
    """A size that fits and one ``factor`` times larger that does not (or was not tried)."""
    size = start
    if fits(size):
        for _ in range(15):          # batchflow's bound on this stage
            if not fits(size * factor):
                return size, size * factor
            size *= factor
        return size, size * factor
    while size > 1:
        size = max(1, size // factor)
        if fits(size):
            return size, size * factor
    raise ValueError("Expected a batch of 1 item to fit in max_memory. Received: even one item's step passes it. "
                     "Raise max_memory, or make the model smaller.")


def _binary(fits: Callable[[int], bool], low: int, high: int, max_iters: int, verified: bool,
            max_memory: float) -> int:
    if not verified and not fits(low):
        low, high = 0, low
    for _ in range(max_iters):
        if high - low <= 1:
            break
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    if low < 1:
        raise ValueError(f"Expected a batch size whose step fits in max_memory={max_memory}%. Received: none "
                         "among those tried. Raise max_memory or max_iters.")
    return low


def _solve(table: dict[int, float], max_memory: float) -> float:
    """The batch size at ``max_memory`` on the line ``memory = item * size + base`` through the measurements."""
    sizes, memory = np.array(list(table), dtype=float), np.array(list(table.values()), dtype=float)
    if len(table) < 2 or not np.all(np.isfinite(memory)):
        raise ValueError(f"Expected two or more measured batch sizes to fit a line. Received: {table}. Raise "
                         "max_iters_estimation or max_memory, or use estimation_method='bruteforce'.")
    item, base = np.polyfit(sizes, memory, 1)
    if item <= 0:
        raise ValueError(f"Expected the memory to grow with the batch size. Received: {table} (percent per batch "
                         "size). Raise delta_batch_size, or use estimation_method='bruteforce'.")
    return max(1.0, (max_memory - base) / item)


def _check_positive(**values: Any) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"Expected {name} as a positive number. Received: {name}={value!r}.")
