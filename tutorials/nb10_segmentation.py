"""Cells of 10_segmentation.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 10. Segmentation: a UNet built by layout

batchflow describes a network by its sections (`initial_block`, `encoder`, `embedding`, `decoder`, `head`) and
each section by a *layout*, a string of letters with one layer each (`'cna'`: convolution, batch norm,
activation). This tutorial generates a small set of images with discs and squares and their masks, builds a
UNet from such a config, checks that it is the zoo's `UNet` at the same widths, trains it on the masks, measures
IoU and Dice by pixels and recall by objects with `gather_metrics`, and draws the predicted masks over the images
with `flowpipe.plot`. It runs in well under a minute on two CPU cores (`plot` needs matplotlib:
`pip install 'flowpipe[figures]'`). `docs/models.md` ("Networks by layout") has every section and letter,
`docs/metrics.md` every metric, `docs/plot.md` every parameter of `plot`."""),
    ('code', """
import tempfile

import numpy as np
import torch

from flowpipe import B, V, Dataset, Pipeline, plot
from flowpipe.models.torch import TorchModel, UNet

folder = tempfile.mkdtemp()                      # the figures are written here and shown from there


def show(path):
    \"\"\"Show a saved figure under the cell (under Jupyter); a plain script has only the file.\"\"\"
    try:
        from IPython.display import Image, display
    except ImportError:
        return
    display(Image(filename=path))"""),
    ('md', """
## A generated set of shapes

Each image is 32x32 pixels, one channel of noise with one to three shapes drawn brighter: discs (class 1) and
squares (class 2) of radius 4 to 7, the later ones over the earlier. The mask holds the class of every pixel. The
numbers come from a seeded generator, so every run sees the same set. Both shapes are equally bright: the network
has to tell them apart by their outline."""),
    ('code', """
def make_shapes(n, side=32, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[:side, :side]
    images = rng.normal(0.0, 0.25, (n, 1, side, side)).astype('float32')
    masks = np.zeros((n, side, side), dtype='int64')
    for item in range(n):
        for _ in range(rng.integers(1, 4)):
            kind, radius = rng.integers(1, 3), rng.integers(4, 8)
            y, x = rng.integers(radius, side - radius, size=2)
            if kind == 1:
                inside = (rows - y) ** 2 + (cols - x) ** 2 <= radius ** 2
            else:
                inside = (abs(rows - y) < radius) & (abs(cols - x) < radius)
            masks[item][inside] = kind
            images[item, 0][inside] += 1.0
    return images, masks


images, masks = make_shapes(384)
shapes = Dataset(len(images), preloaded={'images': images, 'masks': masks}, num_classes=3)
shapes.split(0.75)
print(f"images {images.shape}, masks {masks.shape}; train {len(shapes.train)}, test {len(shapes.test)}")
print('share of pixels per class:', np.round(np.bincount(masks.ravel()) / masks.size, 3))"""),
    ('md', """
## The network by layout

A UNet's sections, in `order`:

- `initial_block`: one `'cna'` to 8 channels;
- `encoder`: `num_stages` stages, each a block (`'cna cna'`, the stage's item of `channels`), a skip kept for the
  decoder and a downsampling (a 2x2 max pool by default);
- `embedding`: the bottom of the U, reading the encoder's list (`input_type='list'`) and passing it on;
- `decoder`: as many stages of an upsampling (bilinear by default), the join with the skip of the same size
  (concatenation) and a block;
- `head`: a 1x1 convolution to the classes (3, from `inputs/masks/classes`).

The input's shape gives every layer its sizes, so the model is built at once; `torch.manual_seed` fixes its
initial weights. The loss is cross-entropy over pixels (`'dice'` is another choice: `docs/models.md`)."""),
    ('code', """
config = {'inputs/images/shape': (1, 32, 32), 'inputs/masks/classes': 3,
          'order': ['initial_block', 'encoder', 'embedding', 'decoder', 'head'],
          'initial_block': {'layout': 'cna', 'channels': 8},
          'encoder': {'type': 'encoder', 'num_stages': 2, 'order': ['block', 'skip', 'downsampling'],
                      'blocks': {'layout': 'cna cna', 'channels': [8, 16]}},
          'embedding': {'input_type': 'list', 'output_type': 'list', 'layout': 'cna cna', 'channels': 32},
          'decoder': {'type': 'decoder', 'num_stages': 2, 'order': ['upsampling', 'combine', 'block'],
                      'blocks': {'layout': 'cna cna', 'channels': [16, 8]}},
          'head': {'layout': 'c', 'kernel_size': 1},
          'loss': 'ce', 'optimizer': {'name': 'Adam', 'lr': 5e-3}}

torch.manual_seed(0)
unet = TorchModel(config)
parameters = sum(p.numel() for p in unet.model.parameters())
output_shape = unet.predict(images=images[:2]).shape
print(f"{parameters:,} parameters; parts {[name for name, _ in unet.model.named_children()]}")
print('outputs of 2 images:', output_shape)"""),
    ('md', """
## The same network from the zoo

`UNet` holds these sections, with no initial block, four stages of 64 to 512 channels and an embedding of 1024.
Its sections merge with the model config, so an `initial_block`, two stages (`'encoder/num_stages'`,
`'decoder/num_stages'`) with lists of that length and smaller widths give the network above: built after the
same seed, it has the same parameters with the same values."""),
    ('code', """
small = {'inputs/images/shape': (1, 32, 32), 'inputs/masks/classes': 3,
         'initial_block': {'layout': 'cna', 'channels': 8},
         'encoder/num_stages': 2, 'encoder/blocks/channels': [8, 16], 'embedding/channels': 32,
         'decoder/num_stages': 2, 'decoder/blocks/channels': [16, 8]}
torch.manual_seed(0)
ready = UNet(small)
same_network = all(torch.equal(mine, theirs) for mine, theirs in
                   zip(unet.model.state_dict().values(), ready.model.state_dict().values()))
print(f"UNet: {sum(p.numel() for p in ready.model.parameters()):,} parameters, the same values: {same_network}")
default = UNet({'inputs/images/shape': (1, 32, 32), 'inputs/masks/classes': 3})
print(f"the default UNet (64 to 1024 channels): {sum(p.numel() for p in default.model.parameters()):,} parameters")"""),
    ('md', """
## Metrics by pixels

An evaluation pipeline predicts the class probabilities of every pixel (`fetches='proba'`: a softmax over the
channel axis) and gathers `'segmentation'` metrics (`SegmentationMetricsByPixels`): `axis=1` says where the
classes are, and every pixel takes the class of highest probability. `mode='u'` joins the batches' confusion
matrices (one per image). `evaluate` averages over the classes (`multiclass='macro'`) and over the images.

The untrained network, for reference:"""),
    ('code', """
evaluation = (Pipeline()
              .init_variable('pixels')
              .predict_model('unet', images=B.images, fetches='proba', save_to=B.proba)
              .gather_metrics('segmentation', targets=B.masks, predictions=B.proba, fmt='proba', axis=1,
                              num_classes=3, save_to=V('pixels', mode='u')))


def evaluate(model):
    pipeline = (Pipeline().import_model('unet', model) + evaluation) << shapes.test
    pipeline.run(96)
    return pipeline.v('pixels')


at_init = evaluate(unet).evaluate(['iou', 'dice'], agg='mean', multiclass='macro')
print({name: round(value, 3) for name, value in at_init.items()})"""),
    ('md', """
## Training

The training pipeline imports the same model object, so every epoch's training shows in the next evaluation.
Each epoch is its own seeded run (`seed=epoch`): the shuffle repeats from run to run."""),
    ('code', """
train = (Pipeline()
         .init_variable('loss', [])
         .import_model('unet', unet)
         .train_model('unet', images=B.images, masks=B.masks, fetches='loss', save_to=V('loss', mode='a'))
         ) << shapes.train

history = []
for epoch in range(8):
    train.run(16, shuffle=True, n_epochs=1, seed=epoch)
    scores = evaluate(unet).evaluate(['iou', 'dice'], agg='mean', multiclass='macro')
    history.append(scores)
    print(f"epoch {epoch}: loss {np.mean(train.v('loss')[-18:]):.3f}, "
          f"IoU {scores['iou']:.3f}, Dice {scores['dice']:.3f}")
losses = train.v('loss')"""),
    ('md', """
`plot` in `'curve'` mode draws lists of numbers, or `(x, y)` pairs; a flat list of them shares one subplot, and
`label=` names each. The loss is per batch, the metrics after each epoch."""),
    ('code', """
per_epoch = len(losses) / len(history)
epochs = np.arange(len(history) + 1)                 # 0: the untrained network
path = f'{folder}/curves.png'
plot([(np.arange(1, len(losses) + 1) / per_epoch, losses),
      (epochs, [at_init['iou']] + [scores['iou'] for scores in history]),
      (epochs, [at_init['dice']] + [scores['dice'] for scores in history])],
     mode='curve', label=['training loss', 'test IoU', 'test Dice'], xlabel='epoch', figsize=(6, 2.8), dpi=60,
     path=path, show=False)
show(path)"""),
    ('md', """
## Per class, and by objects

`multiclass=None` gives one value per class (background, discs, squares). The `'instance'` kind
(`SegmentationMetricsByInstances`) counts objects instead of pixels: every connected region of a class in the
targets is found when at least half of its pixels (`iot=0.5`) are predicted its class; a predicted region
touching no target pixel of its class is a false alarm. Touching shapes of one class are one object."""),
    ('code', """
pixels = evaluate(unet)
per_class = pixels.evaluate('iou', agg='mean', multiclass=None)
print('IoU per class (background, disc, square):', np.round(per_class, 3))

objects = (Pipeline()
           .init_variable('objects')
           .import_model('unet', unet)
           .predict_model('unet', images=B.images, fetches='proba', save_to=B.proba)
           .gather_metrics('instance', targets=B.masks, predictions=B.proba, fmt='proba', axis=1,
                           num_classes=3, save_to=V('objects', mode='u'))) << shapes.test
objects.run(96)
found = objects.v('objects').evaluate(['recall', 'precision'], multiclass=None)
print('objects found (recall) and true (precision), discs and squares:',
      {name: np.round(values, 3).tolist() for name, values in found.items()})"""),
    ('md', """
## Predicted masks over the images

`fetches='labels'` gives every pixel's class. `plot` draws a list of lists as subplots of layers:
`[image, discs, squares]` is two masks over their image. A layer after the first is a mask: its zeros stay
transparent, the rest takes the layer's colour at half opacity. `path=` saves the figure; `show=False` closes it
afterwards (the saved file is shown instead). The first row holds the true masks, the second the predicted ones
(discs green, squares violet)."""),
    ('code', """
test_batch = shapes.test.create_batch(shapes.test.indices[:4])
predicted = unet.predict(images=test_batch.images, fetches='labels')
layers = [[image[0], mask == 1, mask == 2] for image, mask in zip(test_batch.images, test_batch.masks)]
layers += [[image[0], mask == 1, mask == 2] for image, mask in zip(test_batch.images, predicted)]
titles = [f'target {i}' for i in test_batch.indices] + [f'predicted {i}' for i in test_batch.indices]
path = f'{folder}/predicted.png'
plot(layers, cmap=[['gray', 'mediumseagreen', 'orchid']] * 8, title=titles, ncols=4, figsize=(8, 4.4), dpi=50,
     image_interpolation='nearest', path=path, show=False)
show(path)
print('predicted labels:', predicted.shape, predicted.dtype)"""),
]
