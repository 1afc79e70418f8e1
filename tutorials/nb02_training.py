"""Cells of 02_training.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 02. Training a model in a pipeline

A model is declared in the pipeline with `init_model`, trained batch by batch with `train_model` and used with
`predict_model`. This tutorial trains a small CNN on `Digits` (8x8 handwritten digits, upscaled to 16x16),
measures its accuracy on the test set, saves and loads it, shows the loss on the progress bar and checks that
prefetching batches does not change the result. It runs in well under a minute on two CPU cores."""),
    ('code', """
import os
import tempfile

import numpy as np
import torch

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import SimpleCNN
from flowpipe.opensets import Digits

torch.manual_seed(0)  # for the models built outside a seeded run (a seeded run sets its models' weights itself)
digits = Digits()"""),
    ('md', """
## The model config

A model is built from a config with `'/'` keys. Named expressions in it are evaluated on the first batch that
reaches a model action (a *dynamic* model), so the input shape can come from the batch as it is at that point
(`B.image_shape` is `(1, 16, 16)` after `resize` and `to_array`) and the number of classes from the dataset
(`D.num_classes`).

- `inputs/images/shape`: the shape of one input item, channels first;
- `inputs/labels/classes`: an input with classes is a target; the head gets that many outputs;
- `initial_block/inputs`: which input feeds the network;
- `optimizer`: a name or a dict (`{'name': 'Adam', 'lr': 3e-3}`), `loss`: cross-entropy for classes by default."""),
    ('code', """
model_config = {'inputs/images/shape': B.image_shape,
                'inputs/labels/classes': D.num_classes,
                'initial_block/inputs': 'images',
                'body/filters': (16, 32, 64),
                'optimizer': {'name': 'Adam', 'lr': 3e-3}}"""),
    ('md', """
## The training pipeline

`train_model('cnn', fetches='loss', images=B.images, labels=B.labels, save_to=...)` feeds the inputs by their
config names and stores the fetched loss (a float) in a variable. `V('loss_history', mode='a')` appends.
`use_lock=True` makes training run for one batch at a time, in batch order, even when batches are prepared
ahead in worker threads (`prefetch`)."""),
    ('code', """
template = (Pipeline()
            .init_variable('loss_history', [])
            .init_model('dynamic', SimpleCNN, 'cnn', config=model_config)
            .resize((16, 16))
            .rotate(angle=(-10, 10), p=C('augment', default=0.0))
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                         save_to=V('loss_history', mode='a'), use_lock=True))

train_pipeline = template << digits.train"""),
    ('md', """
`bar={'monitors': ...}` shows chosen variables on the progress bar (the last value of a list). `ready=k` on the
bar is the number of prefetched batches waiting; `ready=0` all along means the actions before training are the
bottleneck. In Jupyter the bar is a widget when ipywidgets is installed, a text bar otherwise."""),
    ('code', """
train_pipeline.run(64, shuffle=True, n_epochs=4, drop_last=True, seed=0, prefetch=2,
                   bar={'monitors': {'loss': 'loss_history'}, 'mininterval': 0.5})
losses = train_pipeline.v('loss_history')
print(f"{len(losses)} batches, loss {losses[0]:.3f} -> {losses[-1]:.3f}")"""),
    ('md', """
![The loss of this run](../img/loss_curve.png)

The model object is `train_pipeline.m('cnn')`; its `.model` is the `torch.nn.Module`. Its repr shows the
network, the optimizer and where it runs:"""),
    ('code', """
cnn = train_pipeline.m('cnn')
print(cnn)
type(cnn.model).__name__"""),
    ('md', """
## Evaluation

A second pipeline imports the trained model (`import_model` shares the object, it does not copy it), applies
the same preprocessing without augmentation and collects predicted labels with `fetches='labels'` (the argmax of
the outputs; `'proba'` gives softmax probabilities, `'predictions'` the raw outputs). `mode='e'` extends a list."""),
    ('code', """
preprocess = Pipeline().resize((16, 16)).to_array().multiply(1 / 255)

evaluate = (Pipeline()
            .init_variable('predicted', [])
            .init_variable('true', [])
            .import_model('cnn', train_pipeline)
            + preprocess
            + Pipeline()
            .predict_model('cnn', images=B.images, fetches='labels', save_to=V('predicted', mode='e'))
            .update(V('true', mode='e'), B.labels))

test_pipeline = (evaluate << digits.test).run(100)
accuracy = np.mean(np.array(test_pipeline.v('predicted')) == np.array(test_pipeline.v('true')))
print(f"test accuracy: {accuracy:.3f}")"""),
    ('md', """
## Save and load

`save(path)` writes the network, the optimizer state and the config in one file, atomically. A model can be
loaded in a pipeline with `load_model(name, model_class, path)`, or directly with `SimpleCNN.from_file(path)`.
Loading may change the device layout (`load_model(..., config={'device': ...})`)."""),
    ('code', """
folder = tempfile.mkdtemp()
path = os.path.join(folder, 'cnn.pt')
cnn.save(path)

loaded = (Pipeline()
          .init_variable('predicted', [])
          .init_variable('true', [])
          .before.load_model('cnn', SimpleCNN, path)
          + preprocess
          + Pipeline()
          .predict_model('cnn', images=B.images, fetches='labels', save_to=V('predicted', mode='e'))
          .update(V('true', mode='e'), B.labels)) << digits.test
loaded.run(100)
loaded_accuracy = np.mean(np.array(loaded.v('predicted')) == np.array(loaded.v('true')))
print(f"accuracy after loading: {loaded_accuracy:.3f}")"""),
    ('md', """
## Prefetch does not change the result

Two runs with the same seed give the same model whether batches are prepared ahead or not: the shuffle, the
random rotations (drawn from each batch's own seeded generator) and the order of training steps are the same.
The run's seed also sets the model's initial weights and the dropout masks of every training step; models built
outside a seeded run use torch's global generator, so seed it with `torch.manual_seed` too when every draw must
repeat."""),
    ('code', """
def train(prefetch):
    torch.manual_seed(0)
    pipeline = template << digits.train << {'augment': 0.5}
    pipeline.run(64, shuffle=True, n_iters=5, seed=1, prefetch=prefetch)
    return pipeline.v('loss_history')

same_with_prefetch = train(prefetch=0) == train(prefetch=3)
same_with_prefetch"""),
    ('md', """
## Checkpoints: stop and go on

A long training stops for many reasons: a crash, a pre-empted job, a Ctrl-C. `checkpoint=folder` writes, after
each completed batch, the model (weights, optimizer, scheduler), the variables, the position in the shuffled
epochs and the random states, atomically; `resume=True` goes on from the newest checkpoint. The resumed run ends
with exactly the model and loss history of a run that never stopped. Here a run is made to fail at batch 6 (the
trigger lives outside the pipeline: a checkpoint only resumes the same pipeline with the same run arguments).
`Checkpoint(folder, every=100)` or `seconds=600` writes less often; see `docs/pipelines.md#checkpoints`."""),
    ('code', """
from flowpipe import I, Checkpoint

failure = {'at': None}

def fail_at(number):
    if number == failure['at']:
        raise RuntimeError(f"the machine went away during batch {number}")

def training():
    return (template + Pipeline().call(fail_at, I('c'))) << digits.train << {'augment': 0.5}

run_args = dict(batch_size=64, shuffle=True, n_iters=10, seed=1, prefetch=2)
uninterrupted = training().run(**run_args)

checkpoints = os.path.join(folder, 'checkpoints')
failure['at'] = 6
try:
    training().run(**run_args, checkpoint=checkpoints)
except RuntimeError as error:
    print(error, '- checkpoints:', os.listdir(checkpoints))
failure['at'] = None

resumed = training().run(**run_args, checkpoint=checkpoints, resume=True)
same_after_resume = (resumed.v('loss_history') == uninterrupted.v('loss_history')
                     and all(torch.equal(a, b) for a, b in zip(resumed.m('cnn').model.parameters(),
                                                               uninterrupted.m('cnn').model.parameters())))
same_after_resume"""),
    ('md', """
## Where the time goes

`profile=True` records the time of every action; `profile_summary()` prints a table."""),
    ('code', """
profiled = (template << digits.train).run(64, n_iters=4, profile=True)
print(profiled.profile_summary())"""),
]
