"""ClassificationMetrics and the gather_metrics action."""
import numpy as np
import pytest

from flowpipe import B, Dataset, V
from flowpipe.models.metrics import ClassificationMetrics

TARGETS = np.array([0, 0, 1, 1, 2, 2])
PREDICTED = np.array([0, 1, 1, 1, 2, 0])


def test_counts_and_rates_from_labels():
    metrics = ClassificationMetrics(TARGETS, PREDICTED, fmt='labels', num_classes=3)
    assert metrics.confusion_matrix.tolist() == [[1, 0, 1], [1, 2, 0], [0, 0, 1]]   # [predicted, actual]
    assert metrics.evaluate('accuracy') == pytest.approx(4 / 6)
    assert metrics.evaluate('recall', multiclass=None).tolist() == pytest.approx([0.5, 1.0, 0.5])
    assert metrics.evaluate('precision', multiclass=None).tolist() == pytest.approx([0.5, 2 / 3, 1.0])
    assert metrics.evaluate('fpr', multiclass=None).tolist() == pytest.approx([0.25, 0.25, 0.0])
    assert metrics.evaluate('tpr') == pytest.approx(2 / 3)                        # macro: mean over classes
    assert metrics.evaluate('tpr', multiclass='micro') == pytest.approx(4 / 6)
    both = metrics.evaluate(['fpr', 'fnr'], multiclass=None)
    assert set(both) == {'fpr', 'fnr'} and both['fnr'].tolist() == pytest.approx([0.5, 0.0, 0.5])
    precision, recall = 13 / 18, 2 / 3
    assert metrics.evaluate('f1_score') == pytest.approx(2 * precision * recall / (precision + recall))


def test_logits_probabilities_and_binary_forms():
    logits = np.eye(3)[PREDICTED] * 5
    assert ClassificationMetrics(TARGETS, logits, fmt='logits', axis=1).num_classes == 3
    assert ClassificationMetrics(TARGETS, logits, fmt='logits', axis=1).evaluate('accuracy') == pytest.approx(4 / 6)
    binary = ClassificationMetrics(np.array([0, 1, 1, 0]), np.array([0.2, 0.9, 0.4, 0.7]), fmt='proba')
    assert binary.evaluate('tpr') == 0.5 and binary.evaluate('fpr') == 0.5 and binary.evaluate('accuracy') == 0.5
    with pytest.raises(ValueError, match='axis='):
        ClassificationMetrics(TARGETS, logits, fmt='logits', num_classes=3)
    with pytest.raises(ValueError, match='labels in 0..1'):
        ClassificationMetrics(TARGETS, PREDICTED, fmt='labels')
    with pytest.raises(ValueError, match="Received: 'roc'"):
        ClassificationMetrics(TARGETS, PREDICTED, fmt='labels', num_classes=3).evaluate('roc')


def test_update_pools_and_masks_average_per_item():
    first = ClassificationMetrics(TARGETS[:3], PREDICTED[:3], fmt='labels', num_classes=3)
    first.update(ClassificationMetrics(TARGETS[3:], PREDICTED[3:], fmt='labels', num_classes=3))
    assert first.evaluate('accuracy') == pytest.approx(4 / 6)
    masks = ClassificationMetrics(np.array([[0, 1], [1, 1]]), np.array([[0, 1], [0, 0]]), fmt='labels')
    assert masks.evaluate('accuracy') == pytest.approx(0.5)
    assert masks.evaluate('accuracy', agg=None).tolist() == [1.0, 0.0]


def test_gather_metrics_over_a_run_with_prefetch():
    dataset = Dataset(6, preloaded={'labels': TARGETS, 'predicted': PREDICTED})
    pipeline = (dataset.p.init_variable('metrics')
                .gather_metrics('classification', targets=B.labels, predictions=B.predicted, fmt='labels',
                                num_classes=3, save_to=V('metrics', mode='u')))
    pipeline.run(2, prefetch=2)
    assert pipeline.v('metrics').evaluate('accuracy') == pytest.approx(4 / 6)
    last = (dataset.p.init_variable('m')
            .gather_metrics('class', targets=B.labels, predictions=B.predicted, fmt='labels', num_classes=3,
                            save_to=V('m', mode='w')))
    last.run(2)
    assert last.v('m').evaluate('accuracy') == 0.5
    with pytest.raises(ValueError, match="'classification'"):
        dataset.p.gather_metrics('detection')
