"""Segmentation metrics by pixels and by instances, batchflow's rates, averages and undefined values."""
import time

import numpy as np
import pytest

from flowpipe import B, Dataset, V

from flowpipe.models.metrics import (ClassificationMetrics, SegmentationMetricsByInstances,
                                     SegmentationMetricsByPixels, connected_components)

# two 2x3 masks of 3 classes
TARGETS = np.array([[[0, 1, 1], [2, 2, 0]],
                    [[0, 0, 0], [1, 1, 0]]])
PREDICTED = np.array([[[0, 1, 0], [2, 1, 0]],
                      [[0, 0, 0], [1, 0, 2]]])


def test_pixel_matrices_and_rates_per_item_and_class():
    metrics = SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    assert metrics._confusion_matrix.tolist() == [[[2, 1, 0], [0, 1, 1], [0, 0, 1]],
                                                  [[3, 1, 0], [0, 1, 0], [1, 0, 0]]]
    # item 0: recall of classes 0, 1, 2 = 2/2, 1/2, 1/2; item 1: 3/4, 1/2, class 2 absent: 1
    recall = metrics.evaluate('recall', agg=None, multiclass=None)
    assert recall.ravel().tolist() == pytest.approx([1, 0.5, 0.5, 0.75, 0.5, 1])
    assert metrics.evaluate('recall', agg='mean', multiclass=None).tolist() == pytest.approx([0.875, 0.5, 0.75])
    assert metrics.evaluate('recall', agg=None).tolist() == pytest.approx([2 / 3, 0.75])      # macro
    assert metrics.evaluate('tpr', agg=None, multiclass='micro').tolist() == pytest.approx([4 / 6, 4 / 6])
    assert metrics.evaluate('accuracy') == pytest.approx(4 / 6)
    # item 1: class 0 predicted 4 times, 3 right; class 2 predicted once, never right; fall-out = fp / negatives
    assert metrics.evaluate('ppv', agg=None, multiclass=None)[1].tolist() == pytest.approx([0.75, 1.0, 0.0])
    assert metrics.evaluate('fpr', agg=None, multiclass=None)[1].tolist() == pytest.approx([0.5, 0.0, 1 / 6])


def test_dice_and_iou_of_absent_classes_are_inf_and_left_out_of_averages():
    targets, predicted = np.array([[[0, 1], [1, 1]]]), np.array([[[0, 1], [0, 1]]])
    metrics = SegmentationMetricsByPixels(targets, predicted, fmt='labels', num_classes=3)
    dice = metrics.evaluate('dice', multiclass=None)
    assert dice[:2].tolist() == pytest.approx([2 / 3, 0.8]) and np.isinf(dice[2])
    iou = metrics.evaluate('iou', multiclass=None)
    assert iou[:2].tolist() == pytest.approx([0.5, 2 / 3]) and np.isinf(iou[2])
    # macro: the F1 of the class-averaged recall (1, 2/3) and precision (1/2, 1), absent class 2 left out
    assert metrics.evaluate('f1s') == pytest.approx(2 * (5 / 6) * 0.75 / (5 / 6 + 0.75))
    # likelihood ratios: tpr / fpr with a zero fall-out is inf; agg='mean' skips it among finite items
    assert np.isinf(metrics.evaluate('plr', multiclass=None)[1])
    two = SegmentationMetricsByPixels(np.stack([targets[0], targets[0]]), np.stack([predicted[0], targets[0]]),
                                      fmt='labels', num_classes=3)
    assert two.evaluate('nlr', multiclass=None, agg=None)[:, 1].tolist() == pytest.approx([1 / 3, 0.0])
    assert two.evaluate('nlr', multiclass=None)[1] == pytest.approx(1 / 6)


def test_probabilities_on_any_class_axis_and_skip_bg():
    proba = np.eye(3)[PREDICTED]
    by_labels = SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    for axis, values in ((-1, proba), (1, np.moveaxis(proba, -1, 1))):
        metrics = SegmentationMetricsByPixels(TARGETS, values, fmt='proba', axis=axis)
        assert (metrics._confusion_matrix == by_labels._confusion_matrix).all()
    no_bg = SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=3, skip_bg=True)
    assert no_bg.evaluate('tpr', agg=None, multiclass=None).shape == (2, 2)
    assert no_bg.evaluate('accuracy', agg=None).tolist() == pytest.approx([2 / 6, 1 / 6])
    with pytest.raises(ValueError, match='axis='):
        SegmentationMetricsByPixels(TARGETS, proba, fmt='proba')
    with pytest.raises(ValueError, match="multiclass 'macro'"):
        by_labels.evaluate('tpr', multiclass='weighted')
    with pytest.raises(ValueError, match="agg among"):
        by_labels.evaluate('tpr', agg='max')


def test_binary_masks_from_logits_and_counts():
    targets = np.array([[1, 1, 0, 0], [0, 0, 0, 1]])
    logits = np.array([[3.0, -1.0, 2.0, -2.0], [-5.0, -5.0, 0.0, 4.0]])  # sigmoid(0) = 0.5 counts as 1
    metrics = ClassificationMetrics(targets, logits, fmt='logits')
    assert metrics.true_positive().tolist() == [1, 1]
    assert metrics.false_positive().tolist() == [1, 1]
    assert metrics.true_negative(label=[0, 1]).tolist() == [[1, 1], [1, 2]]
    assert metrics.evaluate('precision', agg=None).tolist() == [0.5, 0.5]
    assert metrics[1:].evaluate('tnr') == pytest.approx(2 / 3)


def _flood_fill(mask):
    """A reference labelling: breadth-first search through face neighbours."""
    labels, count = np.zeros(mask.shape, dtype=int), 0
    for start in zip(*np.nonzero(mask)):
        if labels[start]:
            continue
        count += 1
        labels[start], queue = count, [start]
        while queue:
            point = queue.pop()
            for axis in range(mask.ndim):
                for step in (-1, 1):
                    near = list(point)
                    near[axis] += step
                    near = tuple(near)
                    if 0 <= near[axis] < mask.shape[axis] and mask[near] and not labels[near]:
                        labels[near] = count
                        queue.append(near)
    return labels, count


@pytest.mark.parametrize('shape', [(9, 13), (5, 6, 7), (40,)])
def test_connected_components_match_a_flood_fill(shape):
    generator = np.random.default_rng(len(shape))
    for density in (0.3, 0.55, 0.8):
        mask = generator.random(shape) < density
        labels, count = connected_components(mask)
        expected, expected_count = _flood_fill(mask)
        assert count == expected_count and (labels == expected).all()
    spiral = np.ones((7, 7), dtype=bool)
    spiral[1, 1:6] = spiral[1:6, 5] = spiral[5, 1:5] = spiral[3:5, 1] = spiral[3, 2:4] = False
    assert connected_components(spiral)[1] == 1


def test_instances_found_missed_and_false():
    # item 0, class 1: a 3-pixel object predicted on 2 (found) and a 1-pixel false alarm; class 2: a 2-pixel
    # object predicted on 0 (missed); item 1: class 1 object predicted on 1 of 4 (missed); class 2 none
    targets = np.array([[[1, 1, 0, 2], [1, 0, 0, 2], [0, 0, 0, 0]],
                        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]])
    predicted = np.array([[[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]],
                          [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]])
    metrics = SegmentationMetricsByInstances(targets, predicted, fmt='labels', num_classes=3)
    assert metrics._confusion_matrix.tolist() == [[[[0, 0], [1, 1]], [[0, 1], [0, 0]]],
                                                  [[[0, 1], [0, 0]], [[0, 0], [0, 0]]]]
    assert metrics.true_positive().tolist() == [[1, 0], [0, 0]]
    assert metrics.total_population().tolist() == [[2, 1], [1, 0]]
    assert metrics.evaluate('tpr', agg=None, multiclass=None).tolist() == [[1, 0], [0, 1]]   # no object: 1
    assert metrics.evaluate('ppv', agg=None, multiclass=None).tolist() == [[0.5, 1], [1, 1]]
    assert metrics.evaluate('tpr', agg=None, multiclass='micro').tolist() == [0.5, 0.0]
    strict = SegmentationMetricsByInstances(targets, predicted, fmt='labels', num_classes=3, iot=0.25)
    assert strict.true_positive(label=1).tolist() == [1, 1]
    with pytest.raises(ValueError, match='true negatives'):
        metrics.evaluate('specificity')
    with pytest.raises(ValueError, match='iot'):
        SegmentationMetricsByInstances(targets, predicted, fmt='labels', num_classes=3, iot=0)


def test_gathering_masks_over_batches():
    first = SegmentationMetricsByPixels(TARGETS[:1], PREDICTED[:1], fmt='labels', num_classes=3)
    first.update(SegmentationMetricsByPixels(TARGETS[1:], PREDICTED[1:], fmt='labels', num_classes=3))
    whole = SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    assert (first._confusion_matrix == whole._confusion_matrix).all()
    instances = SegmentationMetricsByInstances(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    instances.update(SegmentationMetricsByInstances(TARGETS, PREDICTED, fmt='labels', num_classes=3))
    assert instances.true_positive().shape == (4, 2)
    with pytest.raises(ValueError, match='3 classes'):
        whole.update(SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=4))


def _late_first(predicted, indices):
    """The first batch of every four finishes last under prefetch."""
    time.sleep(0.05 if indices[0] % 16 == 0 else 0.0)
    return predicted


def test_masks_gathered_under_prefetch_keep_the_batch_order():
    generator = np.random.default_rng(0)
    masks, predicted = generator.integers(0, 3, (32, 6, 6)), generator.integers(0, 3, (32, 6, 6))
    dataset = Dataset(32, preloaded={'masks': masks, 'predicted': predicted})
    whole = SegmentationMetricsByPixels(masks, predicted, 'labels', 3).evaluate('iou', agg=None, multiclass=None)
    for prefetch in (0, 3):
        pipeline = (dataset.p.init_variable('metrics')
                    .call(_late_first, B.predicted, B.indices, save_to=B.late)
                    .gather_metrics('mask', B.masks, B.late, 'labels', 3, save_to=V('metrics', mode='u')))
        pipeline.run(4, prefetch=prefetch)
        assert np.array_equal(pipeline.v('metrics').evaluate('iou', agg=None, multiclass=None), whole)


def test_torch_tensors_with_grad_and_bfloat16():
    torch = pytest.importorskip('torch')
    logits = torch.tensor(np.moveaxis(np.eye(3)[PREDICTED], -1, 1) * 4.0, requires_grad=True)
    by_labels = SegmentationMetricsByPixels(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    for scores in (logits, logits.detach().to(torch.bfloat16)):
        metrics = SegmentationMetricsByPixels(torch.as_tensor(TARGETS), scores, fmt='logits', axis=1)
        assert (metrics._confusion_matrix == by_labels._confusion_matrix).all()
