"""Losses of every normalization (the table of ``docs/parallel.md``), each with a network and a batch, and one SGD
step of an engine against the same step written by hand on the whole batch.

Used by ``test_loss_normalization.py`` (one process), ``test_loss_properties.py`` (hypothesis) and, in launched
ranks, by ``test_loss_normalization_distributed.py``: every function returns plain data.
"""
import numpy as np
import torch
from torch import nn

from flowpipe.models.torch import NormalizedLoss
from flowpipe.parallel import build_engine, distributed, make_plan, shard_sizes

CLASSES, FEATURES, SIDE, STEPS = 4, 5, 3, 5


def class_weights():
    return torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64)


class MaskedMSE(NormalizedLoss):
    """A user's loss: the mean squared error over the entries a mask keeps."""

    normalizer_name = 'the kept entries'

    def sum(self, outputs, target, mask):
        return ((outputs - target) ** 2 * mask).sum()

    def normalizer(self, target, mask):
        return mask.sum()


def _labels(n, generator, ignored, ignore=-100, shape=()):
    labels = torch.randint(0, CLASSES, (n, *shape), generator=generator)
    if shape:       # per-pixel: some pixels of every item ignored too
        labels[torch.rand(labels.shape, generator=generator) < 0.3] = ignore
    labels[ignored] = ignore
    return [labels]


def _probabilities(n, generator, ignored):
    return [torch.softmax(torch.randn(n, CLASSES, generator=generator, dtype=torch.float64), 1)]


def _values(n, generator, ignored):
    return [torch.randn(n, CLASSES, generator=generator, dtype=torch.float64)]


def _binary(n, generator, ignored):
    return [torch.randint(0, 2, (n, CLASSES), generator=generator).double()]


def _masked(n, generator, ignored):
    mask = (torch.rand(n, CLASSES, generator=generator) < 0.7).double()
    mask[ignored] = 0
    return [torch.randn(n, CLASSES, generator=generator, dtype=torch.float64), mask]


def _signs(n, generator, ignored):
    return [torch.randint(0, 2, (n, CLASSES), generator=generator).double() * 2 - 1]


def _pair(n, generator, ignored):       # a second input and +-1 per item (cosine embedding)
    return [torch.randn(n, CLASSES, generator=generator, dtype=torch.float64),
            torch.randint(0, 2, (n,), generator=generator).double() * 2 - 1]


def _ranked(n, generator, ignored):     # a second input and +-1 per element (margin ranking)
    return [torch.randn(n, CLASSES, generator=generator, dtype=torch.float64), *_signs(n, generator, ignored)]


def _triplet(n, generator, ignored):
    return [torch.randn(n, CLASSES, generator=generator, dtype=torch.float64) for _ in range(2)]


def _gaussian(n, generator, ignored):
    return [*_values(n, generator, ignored), torch.rand(n, CLASSES, generator=generator, dtype=torch.float64) + 0.5]


def _counts(n, generator, ignored):
    return [torch.randint(0, 5, (n, CLASSES), generator=generator).double()]


def _label_sets(n, generator, ignored):     # class indices, -1 ends each item's set
    return [torch.randint(-1, CLASSES, (n, CLASSES), generator=generator)]


def _sequences(n, generator, ignored):      # CTC: labels 1.. (0 is the blank), full input lengths, 1-2 labels
    return [torch.randint(1, CLASSES, (n, 2), generator=generator), torch.full((n,), STEPS, dtype=torch.long),
            torch.randint(1, 3, (n,), generator=generator)]


class TimeFirst(nn.Module):
    """Log-probabilities of ``STEPS`` time steps, time first (as ``nn.CTCLoss`` takes them)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, STEPS * CLASSES)

    def forward(self, inputs):
        return self.linear(inputs).view(-1, STEPS, CLASSES).log_softmax(2).transpose(0, 1)


#: name -> (loss maker, network kind, targets maker (n, generator, ignored items) -> list of targets)
CASES = {
    'ce': (nn.CrossEntropyLoss, 'vector', _labels),
    'ce ignore_index': (nn.CrossEntropyLoss, 'vector', _labels),
    'ce weight': (lambda: nn.CrossEntropyLoss(weight=class_weights()), 'vector', _labels),
    'ce sum': (lambda: nn.CrossEntropyLoss(reduction='sum'), 'vector', _labels),
    'ce label_smoothing': (lambda: nn.CrossEntropyLoss(weight=class_weights(), label_smoothing=0.1, ignore_index=-1),
                           'vector', lambda n, g, ignored: _labels(n, g, ignored, ignore=-1)),
    'ce probabilities': (lambda: nn.CrossEntropyLoss(weight=class_weights()), 'vector', _probabilities),
    'segmentation ignore_index=255': (lambda: nn.CrossEntropyLoss(ignore_index=255), 'image',
                                      lambda n, g, ignored: _labels(n, g, ignored, 255, (SIDE, SIDE))),
    'nll weight': (lambda: nn.NLLLoss(weight=class_weights()), 'vector', _labels),
    'bce with logits pos_weight': (lambda: nn.BCEWithLogitsLoss(pos_weight=class_weights()), 'vector', _binary),
    'bce': (nn.BCELoss, 'probability', _binary),
    'mse': (nn.MSELoss, 'vector', _values),
    'mse sum': (lambda: nn.MSELoss(reduction='sum'), 'vector', _values),
    'l1': (nn.L1Loss, 'vector', _values),
    'smooth l1': (lambda: nn.SmoothL1Loss(beta=0.5), 'vector', _values),
    'huber': (lambda: nn.HuberLoss(delta=0.5), 'vector', _values),
    'kldiv batchmean': (lambda: nn.KLDivLoss(reduction='batchmean'), 'vector', _probabilities),
    'kldiv mean': (nn.KLDivLoss, 'vector', _probabilities),
    'poisson nll': (nn.PoissonNLLLoss, 'vector', _counts),
    'gaussian nll': (nn.GaussianNLLLoss, 'vector', _gaussian),
    'soft margin': (nn.SoftMarginLoss, 'vector', _signs),
    'hinge embedding': (nn.HingeEmbeddingLoss, 'vector', _signs),
    'margin ranking': (nn.MarginRankingLoss, 'vector', _ranked),
    'multi-label soft margin': (nn.MultiLabelSoftMarginLoss, 'vector', _binary),
    'multi-label margin': (nn.MultiLabelMarginLoss, 'vector', _label_sets),
    'multi-margin weight': (lambda: nn.MultiMarginLoss(weight=class_weights()), 'vector',
                            lambda n, g, ignored: [torch.randint(0, CLASSES, (n,), generator=g)]),
    'cosine embedding': (nn.CosineEmbeddingLoss, 'vector', _pair),
    'triplet margin': (nn.TripletMarginLoss, 'vector', _triplet),
    'triplet margin with distance': (nn.TripletMarginWithDistanceLoss, 'vector', _triplet),
    'ctc': (nn.CTCLoss, 'time first', _sequences),
    'masked mse (own NormalizedLoss)': (MaskedMSE, 'vector', _masked),
}

#: the cases whose targets can leave a piece with nothing to count
MASKED = ('ce ignore_index', 'ce label_smoothing', 'segmentation ignore_index=255', 'masked mse (own NormalizedLoss)')


def network(kind, seed=0):
    torch.manual_seed(seed)
    if kind == 'time first':
        return TimeFirst().double()
    if kind == 'image':
        layers = [nn.Conv2d(2, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, CLASSES, 1)]
    else:
        layers = [nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, CLASSES)]
        if kind == 'probability':
            layers.append(nn.Sigmoid())
    return nn.Sequential(*layers).double()


def batch(name, n, ignored=(), seed=1):
    """Inputs and targets of ``n`` items for case ``name``; ``ignored``: items with nothing to count (padding)."""
    _, kind, targets = CASES[name]
    generator = torch.Generator().manual_seed(seed)
    shape = (2, SIDE, SIDE) if kind == 'image' else (FEATURES,)
    inputs = torch.randn(n, *shape, generator=generator, dtype=torch.float64)
    return inputs, targets(n, generator, list(ignored) if name in MASKED else [])


def reference_step(name, inputs, targets, lr=0.1):
    """The hand-written full-batch step: the parameters after it, and the loss."""
    make, kind, _ = CASES[name]
    model = network(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = make()(model(inputs), *targets)
    loss.backward()
    optimizer.step()
    return [p.detach().numpy().copy() for p in model.parameters()], float(loss.detach())


def engine_step(name, inputs, targets, device='cpu', microbatch=None, weights=None, lr=0.1, loss=None, world=None,
                sharding=None):
    """One step of the engine of a plan; the parameters (whole, gathered on a sharded rank) and the step's loss."""
    make, kind, _ = CASES[name]
    plan = make_plan(device, microbatch, weights, num_gpus=0, world=world, sharding=sharding)
    with build_engine(network(kind), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=lr)
        result = engine.train_step([inputs], targets, make() if loss is None else loss, optimizer)
        params = [_full(p) for p in engine.module.parameters()]
    return params, float(result.loss)


def _full(tensor):
    gather = getattr(tensor, 'full_tensor', None)
    return (tensor if gather is None else gather()).detach().cpu().numpy().copy()


def relative(actual, expected):
    """The largest relative deviation of parameters (each tensor's by its largest entry)."""
    return max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) for a, b in zip(actual, expected))


def rank_step(name, n, ignored, microbatch=None, sharding=None):
    """One step in a launched job, each rank on its contiguous shard of the global batch (in one process: the
    whole batch, on one device); the parameters and the loss."""
    world = distributed.init()
    inputs, targets = batch(name, n, ignored)
    if world is not None:
        sizes = shard_sizes(n, world.size)
        start = sum(sizes[:world.rank])
        inputs, targets = inputs[start:start + sizes[world.rank]], [t[start:start + sizes[world.rank]] for t in targets]
    return engine_step(name, inputs, targets, microbatch=microbatch, world=world, sharding=sharding)


def rank_steps(names, n, ignored, microbatch=None, sharding=None):
    return {name: rank_step(name, n, ignored, microbatch, sharding) for name in names}


def predicted_losses(n_items=11, batch_size=5):
    """``predict_model(fetches='loss')`` batch by batch with a class-weighted cross-entropy and padding labels:
    over 2 ranks the first global batch's shard on rank 0 is all padding, the last leaves rank 1 idle."""
    from flowpipe import B, Dataset, Pipeline, V
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n_items, FEATURES)), rng.integers(0, CLASSES, size=n_items)
    y[[0, 1, 2, 5, 6]] = -100
    config = {'model': network('vector'), 'inputs/x/shape': (FEATURES,), 'inputs/y/classes': CLASSES,
              'loss': {'name': 'ce', 'weight': class_weights()}}
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config)
                .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
                << Dataset(n_items, preloaded={'x': x, 'y': y}))
    pipeline.run(batch_size, n_epochs=1)
    return list(pipeline.v('loss'))
