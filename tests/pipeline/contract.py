"""Contract checks every pipeline action must pass; other test modules reuse them for their own actions.

- declaring an action returns a new pipeline and leaves the original as it was;
- nothing runs until batches are requested;
- a run with prefetch gives the same result as a run without it (same seed).
"""
from typing import Any, Callable

from flowpipe.pipeline import Pipeline


def check_returns_new_pipeline(pipeline: Pipeline, name: str, *args: Any, **kwargs: Any) -> Pipeline:
    """Declare ``name(*args, **kwargs)`` on ``pipeline``; assert a new pipeline and an untouched original."""
    actions, config, dataset = pipeline.actions, dict(pipeline.config), pipeline.dataset
    declared = getattr(pipeline, name)(*args, **kwargs)
    assert isinstance(declared, Pipeline) and declared is not pipeline
    assert declared.state is not pipeline.state
    assert pipeline.actions == actions and dict(pipeline.config) == config and pipeline.dataset is dataset
    assert len(declared.actions) == len(actions) + 1 and declared.actions[-1].name == name
    return declared


def check_lazy(build: Callable[[list], Pipeline], batch_size: int = 2) -> None:
    """``build(calls)`` makes a pipeline whose action appends to ``calls`` when it runs: only a run does."""
    calls: list = []
    pipeline = build(calls)
    assert calls == [], 'declaring the action ran it'
    pipeline.next_batch(batch_size)
    assert calls, 'the action did not run on a batch'


def check_same_with_prefetch(build: Callable[[], Pipeline], result: Callable[[Pipeline], Any],
                             batch_size: int = 2, prefetch: int = 3, seed: int = 0) -> None:
    """Runs of fresh ``build()`` pipelines with and without prefetch give equal ``result(pipeline)``."""
    plain = build().run(batch_size, shuffle=True, seed=seed)
    ahead = build().run(batch_size, shuffle=True, seed=seed, prefetch=prefetch)
    assert result(plain) == result(ahead)
