"""Diagrams for ``make_figures.py``: how a batch is cut (drawn from a real ``DevicePlan``) and a data-parallel step.

Both need matplotlib (the ``figures`` extra) and no training; ``make_figures.py`` saves them.
"""
from __future__ import annotations

from typing import Any

from flowpipe.parallel import make_plan

CHUNK_COLORS = ('#8fb8de', '#f2b880', '#9bd19b', '#d9a0c8')
DEVICE_COLORS = ('#1f4e79', '#a0522d', '#2e7d32')


def _item(axes: Any, x: float, y: float, face: str, edge: str = 'white', width: float = 1.0) -> None:
    from matplotlib.patches import Rectangle
    axes.add_patch(Rectangle((x, y), 0.9, 0.9, facecolor=face, edgecolor=edge, linewidth=width))


def plot_batch_split(path: Any, batch_size: int = 20, microbatch: int = 8, devices: int = 3) -> list[list[int]]:
    """Batch -> micro-batches -> shards -> devices, for ``make_plan(devices, microbatch)`` on ``batch_size``;
    returns the pieces drawn as ``[start, stop, chunk, replica]``."""
    import matplotlib.pyplot as plt
    plan = make_plan([f'CPU:{i}' for i in range(devices)], microbatch)
    pieces = plan.pieces(batch_size)
    figure, axes = plt.subplots(figsize=(8.6, 5.0), dpi=100)
    chunk_of = {item: piece.chunk for piece in pieces for item in range(piece.start, piece.stop)}
    rows = {3.8: f'batch of {batch_size}', 2.5: f'microbatch={microbatch}:\nchunks {list(plan.chunk_sizes(batch_size))}',
            1.2: f'each chunk split\nover {devices} devices'}
    for y, label in rows.items():
        axes.text(-0.6, y + 0.45, label, ha='right', va='center', fontsize=8.5)
    for item in range(batch_size):
        _item(axes, item * 1.05, 3.8, CHUNK_COLORS[chunk_of[item] % 4])
        _item(axes, item * 1.05 + chunk_of[item] * 0.9, 2.5, CHUNK_COLORS[chunk_of[item] % 4])
    for piece in pieces:
        for item in range(piece.start, piece.stop):
            x = item * 1.05 + piece.chunk * 0.9 + piece.replica * 0.25
            _item(axes, x, 1.2, CHUNK_COLORS[piece.chunk % 4], DEVICE_COLORS[piece.replica % 3], 2.2)
    lane_y, lane_step = -0.5, 1.6
    for replica in range(devices):
        y = lane_y - replica * lane_step
        axes.text(-0.6, y + 0.45, f'{plan.devices[replica].name}', ha='right', va='center', fontsize=8.5,
                  color=DEVICE_COLORS[replica % 3], fontweight='bold')
        x = 0.0
        for piece in (p for p in pieces if p.replica == replica):
            for _ in range(piece.size):
                _item(axes, x, y, CHUNK_COLORS[piece.chunk % 4], DEVICE_COLORS[replica % 3], 2.2)
                x += 1.0
            axes.text(x - piece.size / 2 - 0.05, y - 0.12, f'{piece.size}/{batch_size}', ha='center', va='top',
                      fontsize=7)
            x += 1.4
    axes.text(12.5, lane_y - lane_step, 'each device runs its pieces one after another;\n'
              'a piece\'s loss is weighted by its share of the batch\n(the numbers under the pieces), so the '
              'gradients\nadd up to the full-batch gradient', ha='left', va='center', fontsize=8)
    axes.set_xlim(-6.5, batch_size * 1.05 + 4)
    axes.set_ylim(lane_y - (devices - 1) * lane_step - 0.6, 4.9)
    axes.set_aspect('equal')
    axes.set_axis_off()
    axes.set_title(f'How a batch is cut: make_plan({devices} devices, microbatch={microbatch}).pieces({batch_size})',
                   fontsize=10)
    figure.savefig(path, metadata={'Software': None}, bbox_inches='tight', pad_inches=0.1)
    plt.close(figure)
    return [[piece.start, piece.stop, piece.chunk, piece.replica] for piece in pieces]


def _box(axes: Any, x: float, y: float, text: str, color: str, width: float = 2.3) -> None:
    from matplotlib.patches import FancyBboxPatch
    axes.add_patch(FancyBboxPatch((x - width / 2, y - 0.38), width, 0.76, boxstyle='round,pad=0.05',
                                  facecolor='white', edgecolor=color, linewidth=1.8))
    axes.text(x, y, text, ha='center', va='center', fontsize=8)


def _arrow(axes: Any, start: tuple, end: tuple, color: str = '#555', text: str = '') -> None:
    axes.annotate('', xy=end, xytext=start, arrowprops={'arrowstyle': '->', 'color': color, 'lw': 1.4})
    if text:
        axes.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, text, ha='center', va='bottom',
                  fontsize=7, color=color)


def plot_replicas(path: Any, devices: int = 3) -> dict[str, int]:
    """One data-parallel step: shards, forward/backward per replica, the gradient sum, one step, the broadcast;
    returns the number of devices drawn."""
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(8.6, 3.6), dpi=100)
    ys = [1.6 - 1.1 * i for i in range(devices)]
    for i, y in enumerate(ys):
        color = DEVICE_COLORS[i % 3]
        _box(axes, 0.9, y, f'shard {i}', color, 1.3)
        role = ' (primary)' if i == 0 else ''
        _box(axes, 3.6, y, f'replica {i} on cpu:{i}{role}\nforward, weighted loss,\nbackward -> grad {i}', color)
        _arrow(axes, (1.6, y), (2.4, y))
    _box(axes, 7.0, ys[0], 'sum of grads on the primary\n= full-batch gradient', DEVICE_COLORS[0], 2.5)
    for i, y in enumerate(ys):
        _arrow(axes, (4.8, y), (5.72, ys[0] - 0.05 * i), DEVICE_COLORS[i % 3])
    _box(axes, 7.0, ys[1], '(clip the norm)\noptimizer.step() once', DEVICE_COLORS[0], 2.5)
    _arrow(axes, (7.0, ys[0] - 0.42), (7.0, ys[1] + 0.42))
    _box(axes, 7.0, ys[2], 'broadcast weights to replicas;\naverage BatchNorm statistics', DEVICE_COLORS[0], 2.5)
    _arrow(axes, (7.0, ys[1] - 0.42), (7.0, ys[2] + 0.42))
    axes.annotate('', xy=(3.6, ys[-1] - 0.45), xytext=(5.75, ys[2] - 0.25),
                  arrowprops={'arrowstyle': '->', 'color': '#555', 'lw': 1.2, 'linestyle': '--',
                              'connectionstyle': 'arc3,rad=-0.3'})
    axes.text(4.7, ys[-1] - 0.9, 'next batch: identical replicas', ha='center', fontsize=7, color='#555')
    axes.set_xlim(-0.1, 8.6)
    axes.set_ylim(ys[-1] - 1.0, ys[0] + 0.6)
    axes.set_axis_off()
    axes.set_title("One training step with device=['CPU:0', 'CPU:1', 'CPU:2']", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, metadata={'Software': None})
    plt.close(figure)
    return {'devices': devices}
