"""The exact ROC AUC (ties as halves) and ROC curve, and the confusion-matrix plot."""
import numpy as np
import pytest
import torch

from flowpipe.models.metrics import (ClassificationMetrics, SegmentationMetricsByInstances, roc_auc_score,
                                     roc_curve)

pytestmark = pytest.mark.usefixtures('default_dtype')


def _pairwise_auc(targets, scores):
    """The definition: the share of (positive, negative) pairs ranked right, a tie counting a half."""
    positives, negatives = scores[targets == 1][:, None], scores[targets == 0][None, :]
    return float(np.mean((positives > negatives) + 0.5 * (positives == negatives)))


def test_binary_auc_by_hand_with_ties():
    # pairs (positive, negative): 0.5 vs 0.1 right, 0.5 vs 0.5 tie, 0.9 right twice, 0.2 vs 0.1 right, vs 0.5 wrong
    targets, scores = np.array([0, 0, 1, 1, 1]), np.array([0.1, 0.5, 0.5, 0.9, 0.2])
    assert roc_auc_score(targets, scores) == pytest.approx(4.5 / 6)
    assert roc_auc_score(torch.tensor(targets), torch.tensor(scores, dtype=torch.get_default_dtype())) == \
        pytest.approx(4.5 / 6)
    assert roc_auc_score([0, 1, 0, 1], [0.3, 0.3, 0.3, 0.3]) == 0.5
    assert roc_auc_score([1, 1, 0], [0.1, 0.2, 0.9]) == 0.0


def test_auc_matches_the_pairwise_definition_on_many_ties():
    generator = np.random.default_rng(0)
    for size in (7, 50, 301):
        targets = generator.integers(0, 2, size)
        targets[:2] = [0, 1]
        scores = generator.integers(0, 6, size) / 5          # few distinct values: many ties
        assert roc_auc_score(targets, scores) == pytest.approx(_pairwise_auc(targets, scores), abs=1e-12)


def test_auc_matches_torchmetrics():
    torchmetrics = pytest.importorskip('torchmetrics')
    generator = torch.Generator().manual_seed(1)
    targets = torch.randint(0, 2, (200,), generator=generator)
    scores = torch.randint(0, 20, (200,), generator=generator).to(torch.get_default_dtype()) / 19
    expected = torchmetrics.functional.classification.binary_auroc(scores, targets).item()
    assert roc_auc_score(targets, scores) == pytest.approx(expected, abs=1e-6)


def test_multiclass_one_vs_rest_averages():
    targets = np.array([0, 1, 2, 2, 1, 0])
    scores = np.array([[0.7, 0.2, 0.1], [0.3, 0.4, 0.3], [0.1, 0.1, 0.8],
                       [0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.5, 0.25, 0.25]])
    per_class = roc_auc_score(targets, scores, axis=1, multiclass=None)
    expected = [_pairwise_auc((targets == label).astype(int), scores[:, label]) for label in range(3)]
    assert per_class.tolist() == pytest.approx(expected)
    assert roc_auc_score(targets, scores, axis=1) == pytest.approx(np.mean(expected))
    assert roc_auc_score(targets, scores.T, axis=0) == pytest.approx(np.mean(expected))
    absent = roc_auc_score(np.array([0, 1, 0, 1]), scores[:4], axis=1, multiclass=None)
    assert np.isnan(absent[2]) and roc_auc_score(np.array([0, 1, 0, 1]), scores[:4], axis=1) == \
        pytest.approx(np.nanmean(absent))
    with pytest.raises(ValueError, match='both classes'):
        roc_auc_score([1, 1], [0.2, 0.3])
    with pytest.raises(ValueError, match='axis='):
        roc_auc_score(targets, scores)


def test_roc_curve_points():
    fpr, tpr, thresholds = roc_curve([0, 0, 1, 1, 1], [0.1, 0.5, 0.5, 0.9, 0.2])
    assert thresholds.tolist() == [np.inf, 0.9, 0.5, 0.2, 0.1]
    assert tpr.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1, 1])
    assert fpr.tolist() == pytest.approx([0, 0, 0.5, 0.5, 1])
    assert np.trapezoid(tpr, fpr) == pytest.approx(4.5 / 6)


def test_plot_confusion_matrix_saves_to_a_path(tmp_path):
    pytest.importorskip('matplotlib')
    import matplotlib
    matplotlib.use('Agg')
    metrics = ClassificationMetrics(np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 1, 1, 2, 0]), fmt='labels',
                                    num_classes=3)
    axes = metrics.plot_confusion_matrix(classes=['a', 'b', 'c'], path=tmp_path / 'matrix.png')
    assert (tmp_path / 'matrix.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert [text.get_text() for text in axes.texts] == ['1', '0', '1', '1', '2', '0', '0', '0', '1']
    assert [label.get_text() for label in axes.get_xticklabels()] == ['a', 'b', 'c']
    shares = metrics.plot_confusion_matrix(normalize=True, path=tmp_path / 'shares.pdf')
    assert shares.get_title() == 'Normalized confusion matrix' and shares.texts[0].get_text() == '0.50'
    with pytest.warns(UserWarning, match='path='):
        metrics.plot_confusion_matrix()
    with pytest.raises(ValueError, match='3 class names'):
        metrics.plot_confusion_matrix(classes=['a'])
    instances = SegmentationMetricsByInstances(np.array([[0, 1]]), np.array([[0, 1]]), fmt='labels')
    with pytest.raises(ValueError, match='SegmentationMetricsByPixels'):
        instances.plot_confusion_matrix()
    matplotlib.pyplot.close('all')
