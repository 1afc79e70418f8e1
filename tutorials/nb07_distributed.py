"""Cells of 07_distributed.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 07. Several processes

When one process is not enough, the same pipeline runs in N processes with `torch.distributed`: under
`torchrun --nproc_per_node=N train.py` on one machine, across machines with a rendezvous, or from a notebook
with `flowpipe.parallel.launch`, which this tutorial uses. Here the processes are CPU processes talking over
gloo on the loopback interface; on a GPU machine each process takes its own GPU and talks over NCCL, and
nothing in the pipeline changes.

Two facts to see: **N processes make the same update as one process on the whole batch**, and **each process
loads and computes only its share** of every batch. `docs/distributed.md` has the details (nodes, Slurm)."""),
    ('code', """
import numpy as np

from flowpipe.parallel import distributed, launch"""),
    ('md', """
## A training function

`launch` runs a function in every process. Inside, the pipeline is written as for one process:
`run(batch_size)` is the **global** batch. Each process records the items it saw (`B.indices`); the function
returns the trained weights and those items. Everything a launched function uses is imported inside it or
defined in the notebook: it travels to the processes with dill. The network has no BatchNorm
(`'batch_norm': False`): BatchNorm normalizes each process's share with its own statistics, the one part of a
step that is not exact across processes (as across replicas, see `03_devices`)."""),
    ('code', """
def train(batch_size=50, microbatch=None):
    import torch
    from flowpipe import B, D, V, Pipeline
    from flowpipe.models.torch import SimpleCNN
    from flowpipe.opensets import Digits

    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'device': 'cpu', 'microbatch': microbatch, 'batch_norm': False,
              'dtype': 'float64', 'optimizer': {'name': 'SGD', 'lr': 0.05}}
    pipeline = (Pipeline()
                .init_variable('seen', [])
                .init_variable('loss', [])
                .init_model('cnn', SimpleCNN, config=config)
                .update(V('seen', mode='a'), B.indices)
                .to_array()
                .train_model('cnn', images=B.images, labels=B.labels, fetches='loss',
                             save_to=V('loss', mode='a'))
                .print('never shown twice:', B.size)) << Digits().train
    pipeline.run(batch_size, n_iters=3, shuffle=True, seed=7, bar=True)
    model = pipeline.m('cnn')
    return {'rank': distributed.rank(), 'plan': model.device_plan(batch_size), 'loss': pipeline.v('loss'),
            'seen': pipeline.v('seen'), 'weights': [p.detach().numpy() for p in model.model.parameters()]}"""),
    ('md', """
## One process, then two

Called directly, the function runs in this process alone. `launch(train, 2)` runs it in two processes and
returns their results in rank order. (In a notebook the processes' own output — the progress bar and the
`print` action, on rank 0 only — goes to the terminal that started Jupyter, not to the cell.)"""),
    ('code', """
alone = train()
ranks = launch(train, 2, timeout=300)
print(ranks[1]['plan'])"""),
    ('md', """
Rank 1 computed 25 items of each batch of 50; rank 0 the other 25. The items are contiguous pieces of the
same global batch, and together they are exactly the batch one process saw:"""),
    ('code', """
for step in range(3):
    sizes = [len(r['seen'][step]) for r in ranks]
    together = np.concatenate([r['seen'][step] for r in ranks])
    print(f'step {step}: shard sizes {sizes}, same items as one process: '
          f'{np.array_equal(together, alone["seen"][step])}')"""),
    ('md', """
And the weights after three steps are those of one process, to floating-point reordering (float64 here, so
the difference is at the level of 1e-15). The losses each rank reports are the global batch's:"""),
    ('code', """
difference = max(np.max(np.abs(a - b)) / np.max(np.abs(b)) for a, b in zip(ranks[0]['weights'], alone['weights']))
print(f'largest relative difference from one process: {difference:.1e}')
print('losses, one process:', np.round(alone['loss'], 6))
print('losses, rank 1:     ', np.round(ranks[1]['loss'], 6))"""),
    ('md', """
## Micro-batches and uneven batches

A batch need not divide by the number of processes, and `microbatch` still splits each process's share (its
gradient is exchanged once, after the last micro-batch). A batch of 51 over 3 processes with micro-batches of 8:"""),
    ('code', """
uneven = launch(train, 3, kwargs={'batch_size': 51, 'microbatch': 8}, timeout=300)
alone_uneven = train(batch_size=51, microbatch=8)
uneven_difference = max(np.max(np.abs(a - b)) / np.max(np.abs(b))
                        for a, b in zip(uneven[2]['weights'], alone_uneven['weights']))
print(uneven[2]['plan'])
print(f'largest relative difference from one process: {uneven_difference:.1e}')"""),
    ('md', """
## Sharding the model over the processes

Above, every process holds the whole model, its gradients and its optimizer state. With `'sharding': 'full'` in
the model config each process holds only its share of them (torch's FSDP2, `docs/distributed.md`), and the
update is still that of one process on the whole batch. `save` is called by every process: the processes gather
the whole state on rank 0, which writes one file, with the optimizer state, and that file loads in one plain
process (this one) or in any number of processes. The files go to a temporary folder."""),
    ('code', """
import os
import tempfile

def train_sharded(path, sharding='full'):
    import torch
    from flowpipe import B, D, V, Pipeline
    from flowpipe.models.torch import MLP
    from flowpipe.opensets import Digits

    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'body/units': (256, 256), 'sharding': sharding,
              'dtype': 'float64', 'optimizer': 'Adam'}
    torch.manual_seed(0)
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_model('net', MLP, config=config)
                .to_array().multiply(1 / 255)
                .train_model('net', images=B.images, labels=B.labels, fetches='loss',
                             save_to=V('loss', mode='a'))) << Digits().train
    pipeline.run(64, n_iters=5, shuffle=True, seed=7)
    model = pipeline.m('net')
    model.save(path)            # every process calls it; rank 0 writes the whole state once
    return {'plan': model.device_plan(64), 'loss': pipeline.v('loss')}

folder = tempfile.mkdtemp()
sharded = launch(train_sharded, 2, args=(os.path.join(folder, 'sharded.model'),), timeout=300)
print(sharded[0]['plan'])"""),
    ('md', """
The plan names the sharding, the mesh and what this rank holds: half of each. The file loads here, in one process
without any sharding, with the same weights as one process trained on the whole batches, and with Adam's state
(its step count is 5):"""),
    ('code', """
from flowpipe.models.torch import MLP

train_sharded(os.path.join(folder, 'alone.model'), sharding=None)
restored = MLP.from_file(os.path.join(folder, 'sharded.model'))      # saved by the 2 sharded processes
alone_model = MLP.from_file(os.path.join(folder, 'alone.model'))
sharded_difference = max(np.max(np.abs(a.detach().numpy() - b.detach().numpy())) / np.max(np.abs(b.detach().numpy()))
                         for a, b in zip(restored.model.parameters(), alone_model.model.parameters()))
adam_steps = sorted({int(state['step']) for state in restored.optimizer.state.values()})
print(f'largest relative difference from one process: {sharded_difference:.1e}; Adam steps: {adam_steps}')"""),
    ('md', """
Under torchrun the same lines run as a script (`docs/distributed.md`, "Sharding", shows such a script). For checkpoints of models too big to
gather in one process, `run(..., checkpoint=Checkpoint(folder, sharded=True))` writes one shard per process
beside each checkpoint file, and `resume=True` reads them back (`docs/distributed.md`, "Saving and resuming
sharded models")."""),
    ('md', """
## When a process fails

An error in any process ends the whole job and comes back here, naming the process; nothing hangs."""),
    ('code', """
def faulty():
    distributed.setup()
    if distributed.rank() == 1:
        raise ValueError('rank 1 cannot read its data')
    distributed.barrier()          # rank 0 would wait here forever without the launcher

try:
    launch(faulty, 2, timeout=60)
except Exception as error:
    failure = error
print(type(failure).__name__, '-', str(failure).splitlines()[0])"""),
    ('md', """
## Outside the notebook

The function's body is a training script. Saved as `train.py` (with `train()` called at the bottom) it runs as
it is under `torchrun --standalone --nproc_per_node=4 train.py`, or on two machines with
`torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 train.py`.
Saving (`save_model`) writes from rank 0 only; predictions recorded per process come back in dataset order with
`distributed.gather_batches(pipeline.v('predictions'))`."""),
]
