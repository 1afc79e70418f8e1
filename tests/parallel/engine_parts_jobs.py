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
