"""What the tensor-parallel tests run in every rank (``flowpipe.parallel.launch``) and in one process: an MLP split
by the 'auto' plan trains with Adam, a summed loss and clipping by the norm over the (sharded) gradients."""
import torch
from torch import nn


def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3), nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 2))


def train(tp_ranks=None):
    """Three steps on the whole batch; the parameters gathered whole, each rank's local sizes and the losses."""
    from flowpipe.parallel.tensor_plan import apply_tensor_parallel, resolve_tensor_plan
    net = network()
    if tp_ranks:
        apply_tensor_parallel(net, resolve_tensor_plan(net, 'auto', len(tp_ranks)), tp_ranks)
    local = [tuple(getattr(p, '_local_tensor', p).shape) for p in net.parameters()]
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x, y = torch.randn(7, 5, generator=generator), torch.randn(7, 2, generator=generator)
        loss = ((net(x) - y) ** 2).sum()
        optimizer.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        optimizer.step()
        losses.append((float(loss.detach()), float(getattr(norm, 'full_tensor', lambda: norm)().detach())))
    params = [getattr(p, 'full_tensor', lambda: p)().detach().numpy() for p in net.parameters()]
    return {'params': params, 'local': local, 'losses': losses}


def rank_train():
    from flowpipe.parallel import distributed
    world = distributed.setup()
    return train(tuple(range(world.size)))
