"""Functions the sharded state tests run in every rank (``flowpipe.parallel.launch``) and in one process alone:
an MLP sharded with torch's ``fully_shard`` (each ``Linear`` and the root), trained with Adam in float64.

Every function returns plain data (numpy arrays), so a test compares ranks with one process.
"""
import copy

import numpy as np
import torch
from torch import nn

from flowpipe.parallel import distributed, sharded_state

N_FEATURES, N_CLASSES = 6, 4


def network(shard):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(N_FEATURES, 9), nn.Tanh(), nn.Linear(9, 7), nn.Tanh(),
                        nn.Linear(7, N_CLASSES)).double()
    if shard:
        from torch.distributed.fsdp import fully_shard
        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(net)
    return net, torch.optim.Adam(net.parameters(), lr=0.01)


def batch(seed):
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(size=(10, N_FEATURES)))
    return x, torch.from_numpy(rng.integers(0, N_CLASSES, size=10))


def step(net, optimizer, seed):
    """One Adam step on the whole batch ``seed`` (each rank the same batch: the averaged gradient is the batch's)."""
    x, y = batch(seed)
    optimizer.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(x), y).backward()
    optimizer.step()


def predict(net):
    with torch.no_grad():
        out = net(batch(99)[0])
    return (out.full_tensor() if hasattr(out, 'full_tensor') else out).numpy().copy()


def full_params(net):
    state = sharded_state.full_model_state(net) if distributed.world_size() > 1 else net.state_dict()
    return {key: value.numpy().copy() for key, value in state.items()}


def train_and_gather(n_steps):
    """Train the sharded MLP ``n_steps`` steps; the whole model and optimizer state (rank 0) and predictions."""
    distributed.init()
    net, optimizer = network(shard=True)
    for seed in range(n_steps):
        step(net, optimizer, seed)
    model, optim = sharded_state.full_model_state(net), sharded_state.full_optimizer_state(net, optimizer)
    return {'model': model, 'optimizer': optim, 'predictions': predict(net)}


def load_and_step(model, optim, n_more):
    """Load a whole state (every rank given it) into a fresh MLP (sharded when in a job), predict, then step on."""
    model, optim = copy.deepcopy(model), copy.deepcopy(optim)      # an optimizer may keep the given tensors
    shard = distributed.world_size() > 1
    if shard:
        distributed.init()
    net, optimizer = network(shard=shard)
    if shard:
        sharded_state.load_full_model_state(net, model)
        sharded_state.load_full_optimizer_state(net, optimizer, optim)
    else:
        net.load_state_dict(model)
        optimizer.load_state_dict(optim)
    predictions = predict(net)
    for seed in range(100, 100 + n_more):
        step(net, optimizer, seed)
    return {'predictions': predictions, 'params': full_params(net)}


def train_and_save_shards(folder, n_steps):
    """Train the sharded MLP, write its shards (DCP) to ``folder``; the predictions."""
    distributed.init()
    net, optimizer = network(shard=True)
    for seed in range(n_steps):
        step(net, optimizer, seed)
    sharded_state.save_shards(folder, {'net': sharded_state.sharded_state(net, optimizer)})
    return {'predictions': predict(net)}


def load_shards_and_step(folder, n_more):
    """Read shards into a fresh MLP (sharded when in a job, whatever the writers' number), predict, step on."""
    shard = distributed.world_size() > 1
    if shard:
        distributed.init()
    net, optimizer = network(shard=shard)
    states = {'net': sharded_state.sharded_state(net, optimizer, with_optimizer=True)}
    sharded_state.load_shards(folder, states)
    sharded_state.load_sharded_state(net, optimizer, states['net'])
    predictions = predict(net)
    for seed in range(100, 100 + n_more):
        step(net, optimizer, seed)
    return {'predictions': predictions, 'params': full_params(net)}


# the model files of flowpipe models sharded by the 'sharding' config key

def _predict_and_train(source):
    """Predict every item (gathered on rank 0), then train one more epoch; the predictions and whole parameters."""
    from flowpipe import B, Pipeline, V

    from .dist_jobs import dataset
    from .sharded_jobs import full
    predictor = (source.init_variable('p', []).predict_model('net', x=B.x, save_to=V('p', mode='a'))) << dataset()
    predictor.run(4)
    predictions = distributed.gather_batches(predictor.v('p'))
    trainer = Pipeline().import_model('net', predictor).train_model('net', x=B.x, y=B.y) << dataset()
    trainer.run(5, n_epochs=1, shuffle=True, seed=6)
    model = trainer.m('net')
    return {'predictions': predictions, 'params': [full(p) for p in model.model.parameters()],
            'optimizer_steps': sorted({int(s['step']) for s in model.optimizer.state.values()})}


def save_sharded_model(path, sharding='full'):
    """Train a flowpipe model sharded by ``sharding`` one epoch, save it to ``path`` (every rank calls save), then
    predict and train on (``_predict_and_train``)."""
    from flowpipe import B, Pipeline

    from .dist_jobs import dataset
    from .sharded_jobs import config
    trainer = Pipeline().init_model('net', config=config(sharding)).train_model('net', x=B.x, y=B.y) << dataset()
    trainer.run(5, n_epochs=1, shuffle=True, seed=5)
    trainer.m('net').save(path)
    return _predict_and_train(Pipeline().import_model('net', trainer))


def load_model_file(path):
    """Load a model file (sharded as its config says, over this job's ranks), then ``_predict_and_train``."""
    from flowpipe import Pipeline
    return _predict_and_train(Pipeline().load_model('net', path))


def run_with_sharded_checkpoints(folder, resume=False):
    """Train a sharded flowpipe model one epoch with ``Checkpoint(folder, sharded=True)``; the folder's names."""
    import os

    from flowpipe import B, Checkpoint, Pipeline

    from .dist_jobs import dataset
    from .sharded_jobs import config
    trainer = Pipeline().init_model('net', config=config('full')).train_model('net', x=B.x, y=B.y) << dataset()
    trainer.run(5, n_epochs=1, shuffle=True, seed=5, checkpoint=Checkpoint(folder, sharded=True), resume=resume)
    return sorted(os.listdir(folder))
