"""batchflow's segmentation losses by name ('dice', 'bdice', 'btversky', 'lovasz', 'blovasz', 'ssim'), each
against a hand computation from its definition, and what they tell the engines about splitting a batch."""
import itertools

import pytest
import torch

from flowpipe.models.torch.losses import make_loss
from flowpipe.models.torch.segmentation_losses import SEGMENTATION_LOSSES
from flowpipe.parallel.losses import describe_loss

pytestmark = pytest.mark.usefixtures('default_dtype')

PROBA, TRUTH = [0.2, 0.6, 0.9, 0.5], [0, 1, 1, 0]


def _close(value, expected):
    assert abs(float(value) - expected) < 1e-6, (float(value), expected)


def test_binary_dice_and_tversky():
    logits, target = torch.logit(torch.tensor(PROBA)).reshape(2, 1, 2), torch.tensor(TRUTH).reshape(2, 1, 2)
    # sum(p t) = 1.5, sum(p) = 2.2, sum(t) = 2: 1 - 3 / 4.2
    _close(make_loss({'name': 'bdice', 'eps': 0})(logits, target), 1 - 3 / 4.2)
    # TP = 1.5, FP = 0.2 + 0.5, FN = 0.4 + 0.1
    _close(make_loss({'name': 'btversky', 'alpha': 0.3, 'beta': 0.7, 'eps': 0})(logits, target),
           1 - 1.5 / (1.5 + 0.3 * 0.7 + 0.7 * 0.5))
    _close(make_loss({'name': 'btversky', 'alpha': 0.5, 'beta': 0.5, 'eps': 0})(logits, target), 1 - 3 / 4.2)


def test_multiclass_dice():
    first = torch.tensor([0.8, 0.3])
    logits = torch.log(torch.stack([first, 1 - first]))[None]          # (1, 2 classes, 2 positions)
    for target in (torch.tensor([[0, 1]]), torch.tensor([[[0, 1]]])):   # (N, ...) or (N, 1, ...)
        _close(make_loss({'name': 'dice', 'eps': 0})(logits, target), 1 - (1.6 / 2.1 + 1.4 / 1.9) / 2)
    with pytest.raises(ValueError, match='class indices'):
        make_loss('dice')(logits, torch.tensor([0, 1, 1]))


def _jaccard_lovasz(errors, truth):
    """The Lovász extension of the Jaccard loss at ``errors``, by sets: J(M) = 1 - |G - M| / |G + M|."""
    positive = {i for i, label in enumerate(truth) if label}
    order = sorted(range(len(errors)), key=lambda i: -errors[i])

    def jaccard(mistakes):
        return 1 - len(positive - mistakes) / len(positive | mistakes) if positive | mistakes else 0.0
    return sum(errors[i] * (jaccard(set(order[:k + 1])) - jaccard(set(order[:k]))) for k, i in enumerate(order))


def test_lovasz_softmax_and_hinge():
    probs = [[0.7, 0.2, 0.1], [0.1, 0.5, 0.4], [0.3, 0.3, 0.4], [0.6, 0.1, 0.3]]   # 4 positions, 3 classes
    labels = [0, 2, 2, 1]
    logits = torch.log(torch.tensor(probs)).T.reshape(1, 3, 2, 2)
    expected = sum(_jaccard_lovasz([abs((label == c) - p[c]) for p, label in zip(probs, labels)],
                                   [label == c for label in labels]) for c in (0, 1, 2)) / 3
    _close(make_loss('lovasz')(logits, torch.tensor(labels).reshape(1, 2, 2)), expected)
    ignored = torch.tensor([0, 2, 9, 1]).reshape(1, 2, 2)    # position 2 left out: class 2 keeps position 1 only
    kept = [0, 1, 3]
    expected = sum(_jaccard_lovasz([abs((labels[i] == c) - probs[i][c]) for i in kept],
                                   [labels[i] == c for i in kept]) for c in (0, 1, 2)) / 3
    _close(make_loss({'name': 'lovasz', 'ignore': 9})(logits, ignored), expected)

    hinge_logits, truth = [1.5, -0.3, 0.2, -2.0], [1, 1, 0, 0]
    errors = [max(0.0, 1 - x * (2 * t - 1)) for x, t in zip(hinge_logits, truth)]
    _close(make_loss('blovasz')(torch.tensor(hinge_logits).reshape(2, 2), torch.tensor(truth).reshape(2, 2)),
           _jaccard_lovasz(errors, truth))
    per_image = (_jaccard_lovasz(errors[:2], truth[:2]) + _jaccard_lovasz(errors[2:], truth[2:])) / 2
    _close(make_loss({'name': 'blovasz', 'per_image': True})(torch.tensor(hinge_logits).reshape(2, 2),
                                                              torch.tensor(truth).reshape(2, 2)), per_image)


def test_ssim():
    x, y = torch.tensor([[0.1, 0.5], [0.9, 0.3]]), torch.tensor([[0.2, 0.5], [0.4, 0.0]])
    c1 = 0.01 ** 2
    # a 1x1 window: no variance, SSIM = (2xy + c1) / (x^2 + y^2 + c1) at each position
    expected = 1 - sum((2 * a * b + c1) / (a * a + b * b + c1)
                       for a, b in zip(x.flatten().tolist(), y.flatten().tolist())) / 4
    _close(make_loss({'name': 'ssim', 'kernel_size': 1})(x[None, None], y[None, None]), expected)
    images = torch.rand(3, 2, 16, 16, generator=torch.Generator().manual_seed(0))
    _close(make_loss('ssim')(images, images), 0.0)
    noisy = images.flip(0)
    loss = make_loss('ssim')
    whole = loss(images, noisy)
    halves = (loss.sum(images[:1], noisy[:1]) + loss.sum(images[1:], noisy[1:])) / loss.normalizer(noisy)
    torch.testing.assert_close(halves, whole)      # a mean over items: the pieces' sums add up
    assert 0 < float(whole) < 1


@pytest.mark.parametrize('name, options, line', [
    ('dice', {}, 'whole batch'), ('bdice', {}, 'whole batch'), ('btversky', {}, 'whole batch'),
    ('lovasz', {}, 'whole batch'), ('blovasz', {}, 'whole batch'),
    ('lovasz', {'per_image': True}, None), ('blovasz', {'per_image': True}, None), ('ssim', {}, None)])
def test_each_loss_tells_the_device_plan_how_it_splits(name, options, line):
    normalizer, note = describe_loss(make_loss({'name': name, **options}))
    assert normalizer is None
    assert (note is None) if line is None else (line in note and 'share of the items' in note)


def test_names_are_known_and_suggested():
    assert set(SEGMENTATION_LOSSES) == {'dice', 'bdice', 'btversky', 'lovasz', 'blovasz', 'ssim'}
    with pytest.raises(ValueError, match='bdice'):
        make_loss('bdise')


def test_a_model_trains_on_a_segmentation_loss_and_its_device_plan_says_how_it_splits():
    from flowpipe.models.torch import TorchModel
    torch.manual_seed(0)
    model = TorchModel({'model': torch.nn.Conv2d(1, 1, 3, padding=1), 'loss': 'bdice',
                        'inputs/images/shape': (1, 6, 6), 'inputs/masks/shape': (1, 6, 6),
                        'initial_block/inputs': 'images',
                        'optimizer': {'name': 'SGD', 'lr': 1.0}, 'microbatch': 2})
    images = torch.rand(4, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    masks = (images > 0.5).long()
    losses = [model.train(images=images, masks=masks, fetches='loss') for _ in range(5)]
    assert losses[-1] < losses[0]
    assert 'a ratio of sums over the whole batch' in model.device_plan(4)
    assert list(itertools.islice(model.loss_list, 5)) == losses
