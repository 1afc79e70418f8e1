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
