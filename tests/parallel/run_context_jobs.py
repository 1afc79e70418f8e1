"""Functions the run-context tests run in every rank (``flowpipe.parallel.launch``): engines called directly, with
where the step lies in its run given in the call (``run=``) or only set in the run loop's context variables."""
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from flowpipe.data.shards import WHOLE_BATCHES, RunContext, Shard, stepping
from flowpipe.parallel import distributed
from flowpipe.parallel.factory import build_engine
from flowpipe.parallel.plan import make_plan


def _engine(sharding=None):
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    engine = build_engine(network, make_plan('cpu', world=distributed.init(), sharding=sharding))
    return engine, torch.optim.SGD(engine.parameters(), lr=0.1)


def _shard(batch):
    """Rank ``rank``'s shard of a global batch of 4 items, global batch ``batch`` of the run."""
    rank = distributed.rank()
    return Shard(2 * rank, 2 * rank + 2, 4, rank, batch)


def _error(call):
    try:
        call()
    except (RuntimeError, ValueError) as error:
        return f'{type(error).__name__}: {error}'
    return None


def context_in_the_call(sharding=None):
    """Steps and predictions on each rank's 2 items: ranks on different global batches given in ``run=`` (an error),
    the same only set in the run loop's ``stepping`` (no error: the engine reads the call alone); the predicted loss
    with a shard in ``run=`` (the global batch's) and with one only in ``stepping`` (the rank's own); a sharded
    prediction refused under ``run=RunContext(whole_batches='split')`` and not under ``WHOLE_BATCHES`` alone."""
    engine, optimizer = _engine(sharding)
    torch.manual_seed(1 + distributed.rank())
    x, y = torch.randn(2, 3, dtype=torch.double), torch.randint(0, 2, (2,))
    step = lambda **kwargs: engine.train_step([x], [y], F.cross_entropy, optimizer, seed=0, **kwargs)  # noqa: E731
    apart = RunContext(shard=_shard(distributed.rank()))
    results = {'given': _error(lambda: step(run=apart))}
    with stepping(SimpleNamespace(shard=_shard(distributed.rank()))):
        results['context only'] = _error(step)
        outputs = engine.predict([x])
        results['loss in context only'] = engine.predicted_loss(F.cross_entropy, outputs, [y])
    together = RunContext(shard=_shard(0))
    outputs = engine.predict([x], run=together)
    results['loss given'] = engine.predicted_loss(F.cross_entropy, outputs, [y], run=together)
    results['own loss'] = float(F.cross_entropy(outputs, y))
    token = WHOLE_BATCHES.set('split')
    try:
        results['split in context only'] = _error(lambda: engine.predict([x]))
    finally:
        WHOLE_BATCHES.reset(token)
    results['split given'] = _error(lambda: engine.predict([x], run=RunContext(whole_batches='split')))
    return results
