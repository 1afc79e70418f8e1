"""Cells of 01_pipelines.ipynb (see make_notebooks.py)."""

TITLE = '01. Datasets, batches, named expressions and pipelines'

CELLS = [
    ('md', """
# 01. Datasets, batches, named expressions and pipelines

This tutorial walks through the pieces a flowpipe program is made of:

1. an **index** and a **dataset**, and how batches are drawn from them;
2. **batches** with named components and `@action` methods;
3. **named expressions** (`B`, `C`, `V`, `D`, `F`, `R`, `I`...) that stand for values known only while a batch
   is processed;
4. a lazy **pipeline** of image actions on `Digits`, the small data set shipped inside flowpipe
   (1,797 handwritten digits, 8x8 pixels, no download).

It runs in a few seconds on a CPU. The reference for everything here is `docs/pipelines.md`. To run the
notebooks, install flowpipe first (`pip install -e .` in the repository root)."""),
    ('code', """
import numpy as np

from flowpipe import B, C, D, F, I, R, V, Batch, Dataset, DatasetIndex, ImagesBatch, Pipeline, action
from flowpipe.opensets import Digits"""),
    ('md', """
## Indices and batch generation

A `DatasetIndex` is an ordered array of unique item ids. `gen_batch` yields sub-indices lazily. Without
`drop_last`, a batch may take the tail of one epoch and the head of the next, and only the very last batch may
be short:"""),
    ('code', """
index = DatasetIndex(10)
epoch_batches = [batch.indices.tolist() for batch in index.gen_batch(4, n_epochs=2)]
epoch_batches"""),
    ('md', """
With `drop_last=True` each epoch's incomplete tail is dropped, so batches never cross epochs:"""),
    ('code', """
[batch.indices.tolist() for batch in index.gen_batch(4, n_epochs=2, drop_last=True)]"""),
    ('md', """
`shuffle=True` draws a new permutation every epoch; an int `shuffle=` is also the seed, so the order is
reproducible (and it is the same order a pipeline run with `shuffle=7` uses):"""),
    ('code', """
first = [batch.indices.tolist() for batch in index.gen_batch(4, shuffle=7, n_epochs=1)]
second = [batch.indices.tolist() for batch in index.gen_batch(4, shuffle=7, n_epochs=1)]
assert first == second
first"""),
    ('md', """
## Datasets and splits

A `Dataset` couples an index with a batch class and, optionally, data held in memory (`preloaded`). Extra
keyword arguments become dataset attributes, readable in pipelines through `D`. `split` makes `train`, `test`
(and `validation`) sub-datasets; each part keeps the index order."""),
    ('code', """
points = np.arange(20, dtype=np.float32).reshape(10, 2)
toy = Dataset(10, preloaded={'points': points, 'labels': np.arange(10) % 2}, num_classes=2)
toy.split(0.8, shuffle=0)
print(toy, len(toy.train), len(toy.test), toy.test.num_classes)
toy.test.indices"""),
    ('md', """
`create_batch` makes a batch of chosen items; components are plain attributes. A batch owns a copy of its
slice, so changing it never changes the dataset."""),
    ('code', """
batch = toy.create_batch([0, 3, 4])
batch.points *= 0
print(batch, batch.points.tolist(), batch.labels)
assert toy.preloaded['points'][3].tolist() == [6.0, 7.0]"""),
    ('md', """
## Batch classes and actions

A batch class declares its usual components, and an `@action` method becomes usable in a pipeline. An action
returns the batch (or a new one)."""),
    ('code', """
class PointsBatch(Batch):
    components = ('points', 'labels')

    @action
    def scale(self, factor=1.0):
        self.points = self.points * factor
        return self


points_set = Dataset(10, batch_class=PointsBatch, preloaded=(points, np.arange(10) % 2), num_classes=2)
batch = points_set.create_batch([1, 2]).scale(10)
batch.points"""),
    ('md', """
## The Digits data set

`Digits()` is itself a dataset of `ImagesBatch` (1,797 images), with two subsets: `train` (1,437 images) and
`test` (360). Images are `uint8`
arrays of shape `(8, 8, 1)` (height, width, channels) with values 0-255; `image_shape` is the shape of one
image in the current layout."""),
    ('code', """
digits = Digits()
batch = digits.train.create_batch(digits.train.indices[:8])
print(digits)
print(batch.images.shape, batch.images.dtype, batch.image_shape, batch.labels)"""),
    ('md', """
## Named expressions

A pipeline is declared before any batch exists, so action arguments that depend on the batch, the config or
the run are written as named expressions and evaluated for every batch:

| expression | value while a batch is processed |
|---|---|
| `B.labels`, `B('labels')`, `B()` | a component or attribute of the batch, the batch itself |
| `C('size', default=8)` | a config option of the pipeline |
| `V('seen')` | a pipeline variable |
| `D.num_classes`, `D()` | an attribute of the dataset, the dataset itself |
| `F(func)(*args)` | `func(*args)` with evaluated arguments |
| `R('uniform', -15, 15)` | a draw from the batch's seeded generator |
| `I('c')`, `I('m')`, `I('r')` | the 0-based batch number, the number of batches, their ratio |

Expressions compose: `B.labels.sum()`, `V('n') + 1`, `B.images[0]`, `B.labels == 3`.

Variables are declared with `init_variable` and written by `update` (or an action's `save_to=`). The mode of
the target says how: `'w'` write, `'a'` append, `'e'` extend, `'u'` update a dict or a set."""),
    ('code', """
counting = (digits.train.p
            .init_variable('seen', 0)
            .init_variable('sizes', [])
            .init_variable('labels_met', set())
            .update(V('seen'), V('seen') + B.size)
            .update(V('sizes', mode='a'), B.size)
            .update(V('labels_met', mode='u'), F(set)(B.labels.tolist()))
            .update(V('ratio'), I('r')))
counting.run(500)
print(counting.v('seen'), counting.v('sizes'), counting.v('ratio'), sorted(counting.v('labels_met')))"""),
    ('md', """
The run above made three batches of one epoch (500 + 500 + 437): `run` defaults to one epoch, the last batch
is short because `drop_last` is off, and `I('r')` is 1.0 on the last batch.

Variables survive between runs of the same pipeline until `reset('variables')`:"""),
    ('code', """
counting.run(500)
print(counting.v('seen'))
counting.reset('variables')
print(counting.v('seen'))"""),
    ('md', """
## A pipeline of image actions

`ImagesBatch` actions: `resize`, `crop`, `flip`, `rotate`, `multiply`, `add`, `normalize`, `to_array`,
`load` (image files), and batchflow's augmentations (`scale`, `shift`, `pad`, `elastic_transform`, `salt`,
noise, filters, ...: `docs/images.md`). Sizes are `(width, height)` like PIL. Geometric actions keep `uint8` images `uint8`;
`to_array` changes the dtype and layout (channels first by default) but does not rescale, so scale with
`multiply(1 / 255)` or `normalize(mean, std)`.

Random actions draw from the batch's generator, so a run with a seed is reproducible. `C(...)` reads the
pipeline's config, set with `<<`. The template is bound to no dataset: `template << dataset << config` makes a
new pipeline and leaves the template untouched."""),
    ('code', """
template = (Pipeline()
            .init_variable('means', [])
            .resize(C('size'))
            .rotate(angle=(-15, 15), p=0.5)
            .flip('lr', p=C('flip_p', default=0.0))
            .to_array()
            .multiply(1 / 255)
            .update(V('means', mode='a'), B.images.mean(), use_lock=True))

augment = template << digits.train << {'size': (16, 16)}
batch = augment.next_batch(32, shuffle=True, seed=5)
print(batch.images.shape, batch.images.dtype, batch.image_shape)
print(f"{batch.images.min():.2f} .. {batch.images.max():.2f}")"""),
    ('md', """
`next_batch` keeps an iterator in the pipeline (infinite unless `n_epochs` or `n_iters` is given). `run` and
`gen_batch` start a new iteration, one epoch by default. Runs with the same seed draw the same shuffles and
the same random angles, with or without prefetch. With `prefetch`, batches are processed ahead in worker threads
and finish in any order; `use_lock=True` (on `update` above) makes an action run for one batch at a time in batch
order, so `means` is appended in the same order in both runs:"""),
    ('code', """
first = (template << digits.train << {'size': (16, 16)}).run(128, shuffle=True, seed=3)
second = (template << digits.train << {'size': (16, 16)}).run(128, shuffle=True, seed=3, prefetch=2)
assert first.v('means') == second.v('means')
print(len(first.v('means')), np.round(first.v('means')[:3], 4))"""),
    ('md', """
`gen_batch` yields the processed batches to your own loop; leaving the loop early stops the workers:"""),
    ('code', """
shapes = []
for batch in augment.gen_batch(64, n_iters=3, prefetch=2):
    shapes.append(batch.images.shape)
shapes"""),
    ('md', """
## Composition

Every chained call and every operator returns a new pipeline with fresh variables:

- `p << dataset`, `p << {'key': value}`: bind a dataset, merge a config;
- `p1 + p2`: the actions of `p1`, then those of `p2`;
- `p * 3`: repeat the actions for every batch; `p @ 0.5`: apply them to a batch with probability 0.5;
- `p.before.<builtin>(...)`, `p.after.<builtin>(...)`: run once at the start, at the end of every run."""),
    ('code', """
preprocess = Pipeline().resize((12, 12)).to_array()
brighten = Pipeline().add(0.05, clip=(0, 1)) @ 0.5
counter = Pipeline().init_variable('batches', 0).after.update(V('done'), True)
combined = (preprocess + Pipeline().multiply(1 / 255) + brighten + counter.update(V('batches'), V('batches') + 1))
combined = combined << digits.test
combined.run(100, seed=0)
print(combined.v('batches'), combined.v('done'))
print(combined)"""),
    ('md', """
A lazy run stores its arguments in a new pipeline; `run()` without arguments then uses them:"""),
    ('code', """
lazy = combined.run(90, n_epochs=2, drop_last=True, lazy=True)
lazy.run()
lazy_batches = lazy.v('batches')
lazy_batches"""),
    ('md', """
Next: `02_training.ipynb` trains a network on these images."""),
]
