"""RegressionMetrics and Loss, and gather_metrics for every batchflow kind."""
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, V
from flowpipe.models.metrics import (ClassificationMetrics, Loss, RegressionMetrics, SegmentationMetricsByInstances,
                                     SegmentationMetricsByPixels)
from flowpipe.pipeline.metric_actions import metrics_class

pytestmark = pytest.mark.usefixtures('default_dtype')


def test_regression_errors_per_output_and_their_mean():
    targets = torch.tensor([[1.0, 0.0], [2.0, 2.0], [3.0, 4.0], [6.0, 2.0]])
    predicted = torch.tensor([[1.0, 1.0], [3.0, 2.0], [3.0, 1.0], [2.0, 2.0]])
    metrics = RegressionMetrics(targets, predicted, multi=True)
    # errors: output 0: 0, 1, 0, -4; output 1: 1, 0, -3, 0
    assert metrics.evaluate('mae', agg=None).tolist() == pytest.approx([5 / 4, 4 / 4])
    assert metrics.evaluate('mse', agg=None).tolist() == pytest.approx([17 / 4, 10 / 4])
    assert metrics.evaluate('rmse', agg=None).tolist() == pytest.approx([(17 / 4) ** 0.5, (10 / 4) ** 0.5])
    assert metrics.evaluate('median_absolute_error', agg=None).tolist() == pytest.approx([0.5, 0.5])
    assert metrics.evaluate('max_error', agg=None).tolist() == pytest.approx([4, 3])
    # output 0: targets' mean 3, spread 4 + 1 + 0 + 9 = 14; output 1: mean 2, spread 4 + 0 + 4 + 0 = 8
    assert metrics.evaluate('r2', agg=None).tolist() == pytest.approx([1 - 17 / 14, 1 - 10 / 8])
    # error means -0.75 and -0.5: variances 17/4 - 0.5625 and 10/4 - 0.25
    assert metrics.evaluate('explained_variance_ratio', agg=None).tolist() == pytest.approx(
        [1 - (17 / 4 - 0.5625) / 3.5, 1 - (10 / 4 - 0.25) / 2])
    assert metrics.evaluate('acc', agg=None).tolist() == [0.75, 0.75]        # |error| < 3: the 4 and the 3 miss
    assert metrics.evaluate('acc', agg=None, gap=1).tolist() == [0.5, 0.5]
    assert metrics.evaluate('mae') == pytest.approx(9 / 8)
    assert set(metrics.evaluate(['mae', 'mse'])) == {'mae', 'mse'}


def test_weights_batches_and_gathering():
    weighted = RegressionMetrics([0.0, 0.0, 0.0], [1.0, 2.0, 4.0], weights=[2, 1, 1])
    assert weighted.evaluate('mae') == pytest.approx((2 + 2 + 4) / 4)
    assert weighted.evaluate('mse') == pytest.approx((2 + 4 + 16) / 4)
    batches = RegressionMetrics([np.array([1.0, 2.0]), np.array([3.0])], [np.array([1.0, 3.0]), np.array([5.0])])
    gathered = RegressionMetrics([1.0, 2.0], [1.0, 3.0]).update(RegressionMetrics([3.0], [5.0]))
    assert batches.evaluate('mse') == gathered.evaluate('mse') == pytest.approx(5 / 3)
    constant = RegressionMetrics(np.zeros(4), np.arange(4.0))
    assert constant.evaluate('r2') == -np.inf
    with pytest.raises(ValueError, match='one shape'):
        RegressionMetrics([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match='one weight per sample'):
        RegressionMetrics([1.0, 2.0], [1.0, 2.0], weights=[1.0])
    with pytest.raises(ValueError, match="Received: 'mape'"):
        constant.evaluate('mape')


def test_loss_weights_each_batch_by_its_length():
    loss = Loss(torch.tensor(2.0), 3)
    loss.update(Loss(0.5, 1))
    assert loss.evaluate('loss') == pytest.approx((2.0 * 3 + 0.5) / 4)
    assert loss.evaluate('loss', agg='batchwise').tolist() == [2.0, 0.5]
    assert loss.evaluate('loss', agg=None).tolist() == [2.0, 0.5]
    with pytest.raises(ValueError, match='batch_len'):
        Loss(1.0, 0)


@pytest.mark.parametrize('kind, expected', [('classification', ClassificationMetrics), ('class', ClassificationMetrics),
                                            ('segmentation', SegmentationMetricsByPixels),
                                            ('mask', SegmentationMetricsByPixels),
                                            ('instance', SegmentationMetricsByInstances),
                                            ('regression', RegressionMetrics), ('loss', Loss)])
def test_every_batchflow_kind_by_name(kind, expected):
    assert metrics_class(kind) is expected


def test_ambiguous_or_unknown_kinds_are_refused():
    with pytest.raises(ValueError, match="matches"):
        metrics_class('ss')
    with pytest.raises(ValueError, match="'detection'"):
        metrics_class('detection')


def test_gather_metrics_of_masks_regression_and_loss_over_a_run():
    masks = np.array([[[0, 1], [1, 1]], [[0, 0], [1, 0]], [[1, 1], [0, 0]], [[0, 0], [0, 0]]])
    predicted = np.array([[[0, 1], [0, 1]], [[0, 0], [1, 0]], [[1, 0], [0, 0]], [[0, 1], [0, 0]]])
    dataset = Dataset(4, preloaded={'masks': masks, 'predicted': predicted, 'y': np.arange(4.0),
                                    'y_hat': np.arange(4.0) + np.array([0, 1, 0, 3])})
    pipeline = (dataset.p.init_variable('pixels').init_variable('objects').init_variable('reg')
                .init_variable('loss')
                .gather_metrics('segmentation', targets=B.masks, predictions=B.predicted, fmt='labels',
                                save_to=V('pixels', mode='u'))
                .gather_metrics('instance', B.masks, B.predicted, 'labels', save_to=V('objects', mode='u'))
                .gather_metrics('regression', B.y, B.y_hat, save_to=V('reg', mode='u'))
                .gather_metrics('loss', B.y_hat.mean(), 2, save_to=V('loss', mode='u')))
    pipeline.run(2, prefetch=1)
    pixels = pipeline.v('pixels')
    assert pixels.evaluate('accuracy', agg=None).tolist() == [0.75, 1.0, 0.75, 0.75]
    assert pipeline.v('objects').evaluate('recall', agg=None).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert pipeline.v('objects').evaluate('precision', agg=None).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert pipeline.v('reg').evaluate('mae') == 1.0
    assert pipeline.v('loss').evaluate('loss') == pytest.approx(np.mean(np.arange(4.0) + [0, 1, 0, 3]))


def test_research_get_metrics_evaluates_a_pipeline_variable():
    from flowpipe.research import get_metrics
    data = np.arange(10.0)
    pipeline = (Dataset(10, preloaded={'x': data}).p.init_variable('m')
                .gather_metrics('loss', loss=B.x.mean(), batch_len=B.x.shape[0], save_to=V('m', mode='a')))
    pipeline.run(4, n_epochs=1, shuffle=False)
    assert get_metrics(pipeline, 'm', 'loss') == pytest.approx(data.mean())
    assert get_metrics(pipeline, 'm', ['loss']) == pytest.approx(data.mean())
    assert get_metrics(pipeline, 'm', ['loss', 'loss'], agg='batchwise')[1].tolist() == pytest.approx([1.5, 5.5, 8.5])
    assert [part.evaluate('loss') for part in pipeline.v('m')] == pytest.approx([1.5, 5.5, 8.5])   # kept as they were
    updated = (Dataset(10, preloaded={'x': data}).p.init_variable('m')
               .gather_metrics('loss', loss=B.x.mean(), batch_len=B.x.shape[0], save_to=V('m', mode='u')))
    updated.run(4, n_epochs=1, shuffle=False)
    assert get_metrics(updated, 'm', 'loss') == pytest.approx(data.mean())
    pipeline.set_variable('m', 3)
    with pytest.raises(TypeError, match="variable 'm' to hold a metrics object"):
        get_metrics(pipeline, 'm', 'loss')
    with pytest.raises(ValueError, match='one metric name'):
        get_metrics(pipeline, 'm', [])
