"""Pipeline parallelism's flags and how a network is cut into stages.

The model config keys ``'pipeline'`` (the number of stages), ``'pipeline_split'`` (the top-level children each stage
after the first starts at) and ``'pipeline_schedule'`` (``'1f1b'``, the default, or ``'gpipe'``) are checked once
into the plan's frozen :class:`Pipelining` by :func:`make_pipelining`. In a distributed job the network's top-level
children, which its ``forward`` must call one after another (a chain), are cut into that many consecutive stages:
at the named children, or by parameter bytes as ``device_map='auto'`` balances parts (:func:`cut`). Each rank of a
pipeline holds its stage only (``engines.pipeline``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ['SCHEDULES', 'Pipelining', 'check_parameters', 'cut', 'make_pipelining', 'no_shards']

#: schedule name -> what it does, for the plan
SCHEDULES = {'1f1b': "one forward, one backward: a stage keeps at most as many micro-batches' activations as there "
                     "are stages",
             'gpipe': "every micro-batch's forward, then every backward: every micro-batch's activations alive at "
                      "once"}


@dataclass(frozen=True)
class Pipelining:
    """How a distributed job pipelines a model.

    Attributes:
        stages: the number of stages (ranks per pipeline).
        split: the names of the top-level children stages 2, 3... start at, or ``None`` to balance parameter bytes.
        schedule: ``'1f1b'`` or ``'gpipe'``.
    """

    stages: int
    split: tuple[str, ...] | None = None
    schedule: str = '1f1b'

    def describe(self, parts: Sequence[Sequence[str]] | None = None, stage: int | None = None) -> list[str]:
        """Readable lines: the stages, where they are cut (``parts``: each stage's children, once known) and the
        schedule."""
        cut_at = (f'cut at {", ".join(self.split)}' if self.split else 'cut by parameter bytes over the top-level '
                  'children')
        lines = [f'  pipeline: {self.stages} stages, {cut_at}; schedule {self.schedule!r}: {SCHEDULES[self.schedule]}']
        for index, names in enumerate(parts or ()):
            mine = ' (this rank)' if index == stage else ''
            lines.append(f'    stage {index}{mine}: {", ".join(names)}')
        return lines


def make_pipelining(stages: Any, split: Any = None, schedule: Any = None) -> Pipelining | None:
    """The checked flags, or ``None`` without a pipeline (``stages`` ``None``, ``False`` or 1 and nothing else)."""
    if stages is None or stages is False:
        if split is not None or schedule is not None:
            raise ValueError(f"Expected 'pipeline' (the number of stages) with pipeline_split or pipeline_schedule. "
                             f"Received: pipeline={stages!r}, pipeline_split={split!r}, "
                             f"pipeline_schedule={schedule!r}. Set 'pipeline', or drop the others.")
        return None
    if isinstance(stages, bool) or not isinstance(stages, numbers.Integral) or stages < 1:
        raise ValueError(f"Expected 'pipeline' as a positive int, the number of stages. Received: pipeline={stages!r}.")
    name = 'gpipe' if isinstance(schedule, str) and schedule.lower() == 'gpipe' else schedule
    if name is None or isinstance(name, str) and name.lower() == '1f1b':
        name = '1f1b'
    if name not in SCHEDULES:
        raise ValueError(f"Expected pipeline_schedule among {sorted(SCHEDULES)}. Received: "
                         f"pipeline_schedule={schedule!r}.")
    names = _check_split(split, int(stages))
    if int(stages) == 1 and names is None:
        return None
    return Pipelining(int(stages), names, name)


def _check_split(split: Any, stages: int) -> tuple[str, ...] | None:
    if split is None:
        return None
    names = (split,) if isinstance(split, str) else split
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f'Expected pipeline_split as a list of top-level child names, one per stage after the first. '
                        f'Received: pipeline_split={split!r}.')
    if len(names) != stages - 1 or len(set(names)) != len(names):
        raise ValueError(f'Expected {stages - 1} distinct child names in pipeline_split (where stages 2..{stages} '
                         f'start) for pipeline={stages}. Received: pipeline_split={list(names)!r}.')
    return tuple(names)


def cut(children: Sequence[tuple[str, Any]], pipelining: Pipelining) -> list[list[str]]:
    """The names of each stage's children: ``children`` (``(name, module)`` in call order) cut at
    ``pipelining.split``, or into consecutive runs balancing parameter (and buffer) bytes as ``device_map='auto'``
    does (``model_parallel.balanced_groups``: the largest stage as small as it can be; each at least one child).

    Raises:
        ValueError: fewer children than stages, or a split name that is not a child (or out of order).
    """
    names = [name for name, _ in children]
    stages = pipelining.stages
    if len(names) < stages:
        raise ValueError(f'Expected at least as many top-level children as pipeline stages. Received: '
                         f'pipeline={stages} and the children {names}. Use fewer stages, or a network with more '
                         f'top-level children (an nn.Sequential of its layers).')
    if pipelining.split is not None:
        starts = [names.index(name) if name in names else -1 for name in pipelining.split]
        if -1 in starts or starts != sorted(starts) or 0 in starts:
            raise ValueError(f'Expected pipeline_split to name top-level children after the first, in call order. '
                             f'Received: pipeline_split={list(pipelining.split)!r}; the children are {names}.')
    else:         # as device_map='auto' balances parts: the largest stage as small as it can be
        from .model_parallel import balanced_groups
        sizes = [sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
                 for _, module in children]
        groups = balanced_groups(sizes, stages)
        starts = [index for index in range(1, len(groups)) if groups[index] != groups[index - 1]]
    bounds = [0, *starts, len(names)]
    return [names[bounds[i]:bounds[i + 1]] for i in range(stages)]


def check_parameters(children: Sequence[tuple[str, Any]], parts: Sequence[Sequence[str]]) -> None:
    """Raise ``ValueError`` for a stage (``parts``: ``cut``'s) whose children (``(name, module)``) hold no
    parameters: its rank's optimizer would have nothing to step."""
    modules = dict(children)
    for index, part in enumerate(parts):
        if not any(True for name in part for _ in modules[name].parameters()):
            raise ValueError(f'Expected every pipeline stage to hold parameters (each rank builds its optimizer on '
                             f'its stage). Received: stage {index} of {len(parts)} holds {list(part)}, without '
                             f'parameters; the stages are {[list(p) for p in parts]}. Use fewer stages, or '
                             f'pipeline_split naming children that give each stage parameters.')


def no_shards(stages: int) -> ValueError:
    """The error for a sharded run checkpoint (``Checkpoint(sharded=True)``) of a pipelined model, written or
    resumed: its file holds the stages' weights gathered, which resume on any layout."""
    return ValueError(f"Expected a run checkpoint whose file holds a pipelined model's weights (Checkpoint(sharded="
                      f"False), the default: rank 0 gathers every stage, and the file resumes on any layout). "
                      f"Received: Checkpoint(sharded=True) shards to write or read for a model with pipeline="
                      f"{stages}, whose stages torch.distributed.checkpoint does not lay out here. Drop sharded=True; "
                      f"to go on pipelined from a sharded checkpoint, resume it on its own layout and write a "
                      f"checkpoint without sharded=True first.")
