"""Peak activation memory and time of one ResNet18 training step on CPU with microbatch None, 16 and 8.

Setting: batch 64 of 64x64 RGB images, 10 classes, float32, the model's default optimizer (Adam).

Method. Each memory setting runs in a fresh Python process (``subprocess``), so allocator caches from one
setting cannot hide the next one's peak. In that process:

1. build the model, optimizer and data;
2. run one warm-up step on the full batch with the same micro-batch size: afterwards the parameters,
   gradients, optimizer state, oneDNN caches and the allocator's own pools exist, none of which depends on
   the micro-batch;
3. reset the kernel's resident-set high-water mark (``echo 5 > /proc/self/clear_refs`` resets ``VmHWM``) and
   read the RSS before the measured step (``VmRSS`` in ``/proc/self/status``);
4. run the measured step; its peak transient memory is ``VmHWM - RSS before``: what the step needs on top of
   everything that persists between steps.

Printed beside it: the absolute peak RSS of the measured step (``VmHWM``, which includes the weights, the
optimizer state and the interpreter, so its ratio says little about activations), the RSS before the step,
and the activations themselves: the live bytes autograd saves for backward during the measured step
(``saved_tensors_hooks``; parameters excluded, a storage shared by several saved tensors counted once), peak
over the step. Caveat of the transient figure: memory the warm-up freed but the allocator kept is already in
the RSS before the step and is reused without raising ``VmHWM``, so the transient figure is a lower bound on
what a cold step would take. So each process then returns the allocator's free memory to the kernel
(glibc ``malloc_trim(0)``), resets the high-water mark again and measures one more step the same way: the
"trimmed" column, closer to what the step allocates afresh. Every setting runs in ``MEMORY_REPEATS`` fresh
processes; the medians are printed. The script needs Linux (``/proc``) and glibc.

Time: one more process builds a model with microbatch None and one with 16 and runs their steps in turns
(``ROUNDS`` rounds, median), so load from other processes hits both alike; once with torch's default thread
count and once with one thread (smaller chunks mean more, shorter kernels, and each one synchronizes the
intra-op threads, which costs most on a busy machine). The two thread settings are also alternated, each
measured ``TIME_REPEATS`` times in fresh processes, and the median ratio is printed with its range. Targets:
the step's peak transient memory with microbatch 8 is <= 30% of None; microbatch 16 takes <= 1.15x the time
of None.

The time processes also run the same step written by hand in PyTorch (zero_grad, a loop over chunks with each
loss weighted by its share, one optimizer step), with and without chunks, so the cost of smaller kernels is told
apart from flowpipe's own.

Run: ``python bench/microbatch_memory.py``.
"""
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import weakref

BATCH, SIZE, CLASSES = 64, 64, 10
SETTINGS = (None, 16, 8)
ROUNDS = 5
TIME_REPEATS = 3
MEMORY_REPEATS = 3


def _status_kib(field):
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak():
    """Reset the high-water mark ``VmHWM`` and return the current RSS, in KiB."""
    with open('/proc/self/clear_refs', 'w') as refs:
        refs.write('5')
    return _status_kib('VmRSS')


def _make_step(microbatch):
    """A ``step(images, labels)`` callable for ResNet18 with the given micro-batch size."""
    import torch
    try:
        from flowpipe.models.torch import ResNet18
    except ImportError:
        ResNet18 = None
    if ResNet18 is not None:
        model = ResNet18({'inputs/images/shape': (3, SIZE, SIZE), 'inputs/labels/classes': CLASSES,
                          'initial_block/inputs': 'images', 'microbatch': microbatch})
        return lambda images, labels: model.train(images=images, labels=labels, fetches='loss')
    from flowpipe.parallel import build_engine, make_plan
    engine = build_engine(_fallback_resnet18(), make_plan(microbatch=microbatch))
    optimizer = torch.optim.Adam(engine.parameters(), lr=1e-3)
    loss_fn = torch.nn.functional.cross_entropy
    return lambda images, labels: engine.train_step([images], [labels], loss_fn, optimizer).loss


def _hand_step(microbatch):
    """The same step written by hand in PyTorch (the accumulation loop of any training script), for reference."""
    import torch
    import torch.nn.functional as F
    from flowpipe.models.torch import ResNet18
    network = ResNet18({'inputs/images/shape': (3, SIZE, SIZE), 'inputs/labels/classes': CLASSES,
                        'initial_block/inputs': 'images'}).model
    optimizer = torch.optim.Adam(network.parameters())
    network.train()

    def step(images, labels):
        images, labels = torch.as_tensor(images), torch.as_tensor(labels)
        optimizer.zero_grad(set_to_none=True)
        for chunk, target in zip(images.split(microbatch or len(images)), labels.split(microbatch or len(images))):
            (F.cross_entropy(network(chunk), target) * (len(chunk) / len(images))).backward()
        optimizer.step()
    return step


def _fallback_resnet18():
    """A plain ResNet18 (basic blocks 2-2-2-2), used only when flowpipe.models.torch is not available."""
    from torch import nn

    def block(cin, cout, stride):
        body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        skip = (nn.Identity() if stride == 1 and cin == cout else
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.body, self.skip = body, skip

            def forward(self, x):
                return (self.body(x) + self.skip(x)).relu()
        return Block()

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [block(cin, cout, stride), block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, CLASSES))


class SavedActivations:
    """Counts the bytes autograd keeps for backward (parameters excluded, shared storages once), live peak."""

    def __init__(self):
        self.live, self.peak, self.storages = 0, 0, {}

    def pack(self, tensor):
        import torch
        if isinstance(tensor, torch.nn.Parameter):
            return tensor
        key = tensor.untyped_storage().data_ptr()
        size, count = self.storages.get(key, (0, 0))
        if count == 0:
            # a freed storage's address may come back for a new one: take the new size
            size = tensor.untyped_storage().nbytes()
            self.live += size
            self.peak = max(self.peak, self.live)
        self.storages[key] = (size, count + 1)
        return _Holder(tensor, key, self)

    def release(self, key):
        size, count = self.storages[key]
        self.storages[key] = (size, count - 1)
        if count == 1:
            self.live -= size

    @staticmethod
    def unpack(saved):
        return saved.tensor if isinstance(saved, _Holder) else saved


class _Holder:
    """Wraps one saved tensor; when autograd frees the graph, the holder goes and its bytes are released."""

    def __init__(self, tensor, key, counter):
        self.tensor = tensor
        weakref.finalize(self, counter.release, key)


def _images(batch):
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.random((batch, 3, SIZE, SIZE), dtype=np.float32), rng.integers(0, CLASSES, batch)


def child_memory(microbatch):
    """Measure one setting's memory in this (fresh) process and print a JSON line."""
    import torch
    images, labels = _images(BATCH)
    step = _make_step(microbatch)
    step(images, labels)
    before = _reset_peak()
    saved = SavedActivations()
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        step(images, labels)
    peak = _status_kib('VmHWM')
    ctypes.CDLL('libc.so.6').malloc_trim(0)
    trimmed_before = _reset_peak()
    step(images, labels)
    trimmed = _status_kib('VmHWM') - trimmed_before
    print(json.dumps({'peak_rss_mib': peak / 1024, 'before_mib': before / 1024,
                      'transient_mib': (peak - before) / 1024, 'trimmed_mib': trimmed / 1024,
                      'saved_mib': saved.peak / 2 ** 20}))


def child_time(threads):
    """Time microbatch None and 16 in turns (so load changes hit both alike) and print a JSON line."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    images, labels = _images(BATCH)
    steps = {key: _make_step(microbatch) for key, microbatch in (('none', None), ('16', 16))}
    steps.update({'hand none': _hand_step(None), 'hand 16': _hand_step(16)})
    times = {key: [] for key in steps}
    for key, step in steps.items():
        step(images, labels)
    for _ in range(ROUNDS):
        for key, step in steps.items():
            start = time.perf_counter()
            step(images, labels)
            times[key].append(time.perf_counter() - start)
    print(json.dumps({key: statistics.median(values) for key, values in times.items()}))


def _run_child(*args):
    output = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                            env={**os.environ, 'PYTHONPATH': os.getcwd()})
    return json.loads(output.stdout.strip().splitlines()[-1])


def main():
    memory = {}
    for microbatch in SETTINGS:
        rows = [_run_child('--memory', json.dumps(microbatch)) for _ in range(MEMORY_REPEATS)]
        memory[microbatch] = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    ratios = {0: [], 1: []}
    for _ in range(TIME_REPEATS):
        for threads, values in ratios.items():
            timing = _run_child('--time', str(threads))
            values.append((timing['16'] / timing['none'], timing))
    print(f'ResNet18, batch {BATCH}, {SIZE}x{SIZE} RGB, {CLASSES} classes, CPU ({os.cpu_count()} cores), one step '
          f'after a warm-up step, each setting in a fresh process')
    _print_memory(memory)
    for threads, values in ratios.items():
        label = 'default torch threads' if threads == 0 else f'{threads} torch thread'
        ordered = sorted(values, key=lambda value: value[0])
        ratio, timing = ordered[len(ordered) // 2]
        print(f'step time ({label}): None {timing["none"]:.2f} s, microbatch 16 {timing["16"]:.2f} s, ratio '
              f'{ratio:.2f} (median of {TIME_REPEATS} processes, range {ordered[0][0]:.2f}-{ordered[-1][0]:.2f}; '
              f'each the median of {ROUNDS} alternating rounds; target <= 1.15)')
        print(f'    the same in a hand-written PyTorch loop: None {timing["hand none"]:.2f} s, chunks of 16 '
              f'{timing["hand 16"]:.2f} s, ratio {timing["hand 16"] / timing["hand none"]:.2f}; '
              f'flowpipe / hand: None {timing["none"] / timing["hand none"]:.2f}, '
              f'16 {timing["16"] / timing["hand 16"]:.2f}')


def _print_memory(memory):
    none = memory[None]
    columns = (('transient_mib', 'step transient'), ('trimmed_mib', 'trimmed transient'),
               ('saved_mib', 'saved activations'), ('peak_rss_mib', 'peak RSS'))
    print(f'{"microbatch":>10}' + ''.join(f' {name + " MiB":>22} {"vs None":>7}' for _, name in columns)
          + f' {"RSS before MiB":>15}')
    for microbatch, row in memory.items():
        print(f'{str(microbatch):>10}' + ''.join(f' {row[key]:22.1f} {row[key] / none[key]:7.2f}' for key, _ in columns)
              + f' {row["before_mib"]:15.1f}')
    for key, name in columns:
        target = ' (target <= 0.30)' if key == 'transient_mib' else ''
        print(f'{name} ratio microbatch 8 / None: {memory[8][key] / none[key]:.2f}{target}')


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--memory':
        child_memory(json.loads(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == '--time':
        child_time(int(sys.argv[2]))
    else:
        main()
