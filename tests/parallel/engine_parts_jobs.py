"""Functions the engine-parts tests run in every rank (``flowpipe.parallel.launch``)."""
import torch
from torch import nn

from flowpipe.parallel import distributed
from flowpipe.parallel.factory import build_engine
from flowpipe.parallel.plan import make_plan


def parts(sharding=None):
    """The class names of the parts the plan of a job (``sharding``: DDP's or FSDP's) builds its engine from."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    engine = build_engine(network, make_plan('cpu', world=distributed.init(), sharding=sharding))
    names = {'engine': type(engine).__name__, 'placement': type(engine.placement).__name__,
             'sync': type(engine.gradient_sync).__name__, 'ranks': type(engine.ranks).__name__,
             'sync ranks': engine.gradient_sync.ranks is engine.ranks}
    engine.close()
    return names


def pipeline_parts():
    """The parts of a pipelined engine (two stages of one pipeline), and its steps against one process's engine on
    the whole network: a clipped step (the norm over both stages), then a step with an inf input, which
    ``skip_nonfinite`` skips on every stage, leaving each stage's buffers (``Tracked``) as before the batch."""
    import torch.nn.functional as F
    from flowpipe.parallel.engines import Engine, OneDevice
    world = distributed.init()
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(5, 8), Tracked(8), nn.Tanh(), nn.Linear(8, 3)).double()
    whole = Engine(make_plan('cpu', microbatch=3), OneDevice(_copy(network), make_plan('cpu')))
    engine = build_engine(network, make_plan('cpu', world=world, pipeline=2, microbatch=3))
    names = {'engine': type(engine).__name__, 'placement': type(engine.placement).__name__,
             'sync': type(engine.gradient_sync).__name__, 'ranks': type(engine.ranks).__name__}
    generator = torch.Generator().manual_seed(1)
    inputs, targets = torch.randn(9, 5, generator=generator), torch.randint(0, 3, (9,), generator=generator)
    stepped = []
    for each in (engine, whole):
        each.skip_nonfinite = True
        optimizer = torch.optim.SGD(each.parameters(), lr=0.5)
        stepped.append(each.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=0.1).stepped)
        before = [buffer.clone() for buffer in each.placement.module.buffers()] if each is whole else [
            buffer.clone() for buffer in engine.placement.chain.buffers()]
        bad = inputs.clone()
        bad[4, 1] = float('inf')
        stepped.append(each.train_step([bad], [targets], F.cross_entropy, optimizer).stepped)
        after = list(each.placement.module.buffers()) if each is whole else list(engine.placement.chain.buffers())
        names.setdefault('buffers kept', []).append(
            (len(before), all(torch.equal(a, b) for a, b in zip(after, before))))
    state, expected = engine.state_dict(), whole.state_dict()
    names['stepped'] = stepped
    names['parameters'] = None if not state else [
        name for name, value in expected.items() if 'running' not in name and 'num_batches' not in name
        and not torch.allclose(state[name], value, rtol=1e-10, atol=1e-13)]
    engine.close()
    return names


def _copy(module):
    import copy
    return copy.deepcopy(module)


class Tracked(nn.Module):
    """Passes its input on; in training, adds its sum over the items to a buffer (as BatchNorm's statistics)."""

    def __init__(self, width):
        super().__init__()
        self.register_buffer('seen', torch.zeros(width, dtype=torch.float64))

    def forward(self, inputs):
        if self.training:
            self.seen.add_(inputs.detach().sum(0))
        return inputs
