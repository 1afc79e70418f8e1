"""Cells of 09_research.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 09. A research: one template, a grid of configs

`template << dataset << config` makes one template run under any config. A `Research` runs it under every
config of a *domain* (here learning rate x micro-batch size, each config twice), spreads the experiments over
worker processes and devices, and collects what each one recorded into a table. This tutorial trains a small
CNN on `Digits` for 60 batches per experiment, with two workers over two logical CPU devices, then shows the
table and a plot, and runs the same research on a Dask cluster. `docs/research.md` has every argument."""),
    ('code', """
import tempfile

import matplotlib.pyplot as plt

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import SimpleCNN
from flowpipe.opensets import Digits
from flowpipe.research import Option, Research

folder = tempfile.mkdtemp()"""),
    ('md', """
## The template

The config keys a research sets are read with `C(...)`: the learning rate in the optimizer, the micro-batch size
and the device (the research gives each experiment its worker's share of `devices`). `run_later` stores the
run's arguments (3 epochs at most): each research iteration trains on one batch. `V('loss')` holds the last batch's loss; the
research records it at every iteration."""),
    ('code', """
model_config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
                'initial_block/inputs': 'images', 'body/filters': (8, 16), 'batch_norm': False,
                'optimizer': {'name': 'Adam', 'lr': C('lr')},
                'microbatch': C('microbatch'), 'device': C('device')}

template = (Pipeline()
            .init_variable('loss', None)
            .init_model('cnn', SimpleCNN, config=model_config)
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels, save_to=V('loss'))
            .run_later(64, shuffle=True, n_epochs=3)) << Digits().train"""),
    ('md', """
## The grid, two workers, two devices

`Option('lr', [...]) * Option('microbatch', [...])` crosses the two lists: 4 configs, `n_reps=2` runs each
twice (8 experiments, each with its own seed). `workers=2` runs two experiments at a time in two worker
processes; `devices=['CPU:0', 'CPU:1']` gives each worker one device. Results are written under the
research's name as each experiment ends: run again with the same name, a research skips what finished."""),
    ('code', """
domain = Option('lr', [3e-3, 3e-2]) * Option('microbatch', [16, 64])
research = (Research(name=f'{folder}/grid', domain=domain, n_reps=2)
            .add_pipeline('train', template, variables='loss'))
research.run(n_iters=60, workers=2, devices=['CPU:0', 'CPU:1'], seed=42, bar=False)

df = research.results.df
print(len(df), 'rows:', df['id'].nunique(), 'experiments x', df['iteration'].nunique(), 'iterations')
df.head()"""),
    ('md', """
## The results table

One row per experiment and iteration, with the config's values as columns. The mean loss of the last 10
batches, per config (over its two repetitions):"""),
    ('code', """
last = df[df['iteration'] >= 50]
table = last.groupby(['lr', 'microbatch'])['loss'].mean().unstack('microbatch').round(3)
table"""),
    ('md', """
The micro-batch size cuts each batch of 64 into pieces whose gradients are accumulated: it saves memory and
leaves the update as it is (the network has no BatchNorm, which would see the pieces). What differs between
two cells of a row is the seed: each experiment's comes from its config and repetition. The learning rate
changes the curves:"""),
    ('code', """
curves = df.groupby(['lr', 'microbatch', 'iteration'])['loss'].mean()
fig, ax = plt.subplots(figsize=(6, 3.2), dpi=72)
for number, ((lr, microbatch), curve) in enumerate(curves.groupby(level=['lr', 'microbatch'])):
    ax.plot(curve.index.get_level_values('iteration'), curve.values, label=f'lr={lr}, microbatch={microbatch}',
            linestyle=['-', '--'][number % 2])
ax.set_xlabel('iteration (batch)')
ax.set_ylabel('training loss')
ax.legend(fontsize=8)
fig.tight_layout()

try:                                     # under Jupyter: show it (the kernel runs matplotlib without a screen)
    import io
    from IPython.display import Image, display
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png')
    display(Image(buffer.getvalue()))
except ImportError:                      # run as a plain script
    pass
plt.close(fig)"""),
    ('code', """
best_lr = float(table.mean(axis=1).idxmin())
print('learning rate with the lowest final loss:', best_lr)"""),
    ('md', """
## The same research on a Dask cluster

`executor='dask'` starts a Dask `LocalCluster` on 127.0.0.1 with `workers` worker processes, runs the
experiments there and closes it; `executor='tcp://host:8786'` (or a `distributed.Client`) uses a running
cluster, whose workers may be on other machines: that is how a research goes past one machine. It needs the
`dask` extra (`pip install 'flowpipe[dask]'`). Each experiment's seed comes from its config, not from the
worker that runs it, so the table is the same."""),
    ('code', """
on_dask = (Research(name=f'{folder}/grid-dask', domain=domain, n_reps=2)
           .add_pipeline('train', template, variables='loss'))
on_dask.run(n_iters=60, workers=2, devices=['CPU:0', 'CPU:1'], seed=42, bar=False, executor='dask')

columns = ['id', 'lr', 'microbatch', 'iteration', 'loss']
sort = lambda frame: frame[columns].sort_values(['id', 'iteration']).reset_index(drop=True)
same_on_dask = sort(on_dask.results.df).equals(sort(df))
print('same table on Dask:', same_on_dask)"""),
]
