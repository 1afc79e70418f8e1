"""``Validate(metrics=['accuracy', 'top5', 'loss', ...])``: built-in names computed from the validation pipeline's
``predictions``, ``targets`` and ``losses``, torchmetrics objects, and the epoch summary a run prints."""
import numpy as np
import pytest
import torch

from flowpipe import B, Pipeline, V
from flowpipe.callbacks import Validate
from flowpipe.data import Dataset

from . import metric_jobs

pytestmark = pytest.mark.usefixtures('default_dtype')

# 7 items, 3 classes: predicted [0, 1, 2, 1, 0, 2, 0] (item 2 ties classes 0 and 1 below class 2)
SCORES = np.array([[.7, .2, .1], [.1, .5, .4], [.3, .3, .4], [.2, .6, .2], [.5, .4, .1], [.1, .1, .8], [.6, .3, .1]])
LABELS = np.array([0, 2, 1, 1, 1, 2, 2])
WEIGHTS = np.arange(1., 8.)          # batches of 3: [1, 2, 3], [4, 5, 6], [7]


def _scored(loss=np.mean, predictions='scores'):
    data = Dataset(7, preloaded={'scores': SCORES, 'labels': SCORES.argmax(axis=1), 'y': LABELS, 'w': WEIGHTS})
    return (Pipeline()
            .update(V('predictions', mode='e'), B(predictions))
            .update(V('targets', mode='e'), B.y)
            .call(loss, B.w, save_to=V('losses', mode='a'))) << data


def test_built_in_names_match_a_hand_computation():
    values = Validate(_scored(), batch_size=3, metrics=['accuracy', 'top1', 'top2', 'top3', 'precision', 'recall',
                                                         'f1', 'loss']).validate()
    # per class (predicted, actual, hits): 0: (3, 1, 1), 1: (2, 3, 1), 2: (2, 3, 1)
    assert values == pytest.approx({'val/accuracy': 3 / 7, 'val/top1': 3 / 7, 'val/top2': 5 / 7, 'val/top3': 1.0,
                                    'val/precision': (1 / 3 + 1 / 2 + 1 / 2) / 3, 'val/recall': (1 + 2 / 3) / 3,
                                    'val/f1': (1 / 2 + 2 / 5 + 2 / 5) / 3, 'val/loss': 4.0}, rel=1e-15)


def test_the_loss_weights_each_batch_by_its_items_with_an_uneven_last_batch():
    # batch means 2, 5, 7 over 3, 3, 1 items: the mean over items is 4, the mean of the batch means 14 / 3
    assert Validate(_scored(), batch_size=3, metrics=['loss']).validate() == {'val/loss': 4.0}
    # a batch loss that is not a mean over items (a sum: 6, 15, 7) is weighted the same way: (18 + 45 + 7) / 7
    assert Validate(_scored(np.sum), batch_size=3, metrics=['loss']).validate() == {'val/loss': 10.0}


def test_the_loss_of_a_model_is_the_mean_over_items_of_its_cross_entropy():
    train, data = metric_jobs.trained()
    val = metric_jobs.validation(train, data)
    values = Validate(val, batch_size=10, metrics=['loss', 'accuracy']).validate()      # 10, 10 and 3 items
    logits, targets = torch.as_tensor(np.array(val.v('predictions'))), torch.as_tensor(np.array(val.v('targets')))
    per_item = torch.nn.functional.cross_entropy(logits, targets, reduction='none')
    assert values['val/loss'] == pytest.approx(float(per_item.mean()), rel=1e-12)
    assert values['val/loss'] != pytest.approx(float(np.mean(val.v('losses'))), rel=1e-6)
    assert values['val/accuracy'] == float(np.mean(np.argmax(logits.numpy(), axis=1) == targets.numpy()))


def test_labels_give_accuracy_and_macro_rates_but_not_top_k():
    val = _scored(predictions='labels')
    values = Validate(val, batch_size=3, metrics={'acc': 'accuracy', 'f1': 'f1'}).validate()
    assert values == pytest.approx({'val/acc': 3 / 7, 'val/f1': (1 / 2 + 2 / 5 + 2 / 5) / 3}, rel=1e-15)
    with pytest.raises(ValueError, match="class scores.*'top2'.*fetches='predictions'"):
        Validate(val, batch_size=3, metrics=['top2']).validate()


def _pairs_ordered_right(positive, scores):
    """The ROC AUC by its definition: the share of (positive, negative) pairs scored in order, ties as halves."""
    above, below = scores[positive][:, None], scores[~positive][None, :]
    return float(np.mean((above > below) + 0.5 * (above == below)))


def test_auc_is_exact_for_class_scores_logits_and_one_score_per_item():
    values = Validate(_scored(), batch_size=3, metrics=['auc']).validate()
    expected = np.mean([_pairs_ordered_right(LABELS == cls, SCORES[:, cls]) for cls in range(3)])
    assert values == pytest.approx({'val/auc': expected}, rel=1e-12)
    # two classes as logits: softmax's class-1 probability orders items as logit1 - logit0 does
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 1.0], [4.0, -1.0], [0.5, 0.0]])
    targets = np.array([0, 1, 1, 0, 1])
    data = Dataset(5, preloaded={'logits': logits, 'y': targets, 'one': logits[:, 1] - logits[:, 0]})
    for column in ('logits', 'one'):
        val = (Pipeline().update(V('predictions', mode='e'), B(column)).update(V('targets', mode='e'), B.y)) << data
        value = Validate(val, batch_size=2, metrics=['auc']).validate()['val/auc']
        assert value == pytest.approx(_pairs_ordered_right(targets == 1, logits[:, 1] - logits[:, 0]), rel=1e-12)


def test_names_and_variables_that_do_not_fit_are_errors_naming_the_fix():
    with pytest.raises(ValueError, match=r"built-in metric name: accuracy, top<k>.*Received: 'top0'"):
        Validate(_scored(), metrics=['top0'])
    with pytest.raises(TypeError, match=r"Name a function in a dict"):
        Validate(_scored(), metrics=['accuracy', len])
    without_targets = Pipeline().update(V('predictions', mode='e'), B.scores) << Dataset(
        7, preloaded={'scores': SCORES})
    with pytest.raises(ValueError, match=r"variable 'targets' for metric 'accuracy'.*V\('targets', mode='e'\)"):
        Validate(without_targets, batch_size=3, metrics=['accuracy']).validate()
    twice = _scored().call(np.sum, B.w, save_to=V('losses', mode='a'))
    with pytest.raises(ValueError, match=r"one loss per validation batch.*Received: 6 losses for 3 batches"):
        Validate(twice, batch_size=3, metrics=['loss']).validate()


def test_a_torchmetrics_metric_is_updated_once_per_batch_and_computed():
    torchmetrics = pytest.importorskip('torchmetrics')

    class BatchItems(torchmetrics.Metric):
        def __init__(self):
            super().__init__()
            self.add_state('items', default=torch.tensor(0), dist_reduce_fx='sum')
            self.sizes = []

        def update(self, predictions, targets):
            self.sizes.append(len(targets))
            self.items += len(targets)

        def compute(self):
            return self.items
    counter = BatchItems()
    validate = Validate(_scored(), batch_size=3, metrics=[
        'accuracy', torchmetrics.Accuracy(task='multiclass', num_classes=3), counter])
    for _ in range(2):                                  # each validation starts from a reset metric
        counter.sizes.clear()
        values = validate.validate()
        assert counter.sizes == [3, 3, 1] and values['val/BatchItems'] == 7
        assert values['val/MulticlassAccuracy'] == pytest.approx(values['val/accuracy'], rel=1e-6)


def test_a_run_prints_one_summary_line_per_epoch_unless_told_not_to(capsys):
    train, data = metric_jobs.trained()
    validate = Validate(metric_jobs.validation(train, data), batch_size=10, metrics=['accuracy'])
    run = train.run(8, n_epochs=2, callbacks=[validate])
    history = [validate.values]      # the last epoch's
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith('epoch 1/2 – loss ') and lines[1].startswith('epoch 2/2 – loss ')
    assert lines[1].endswith(f"– val/accuracy {history[0]['val/accuracy']:.4g}") and ' – lr 0.1 – ' in lines[1]
    run.run(8, n_epochs=2, callbacks=[validate], summary=False)
    assert capsys.readouterr().out == ''
    with pytest.raises(TypeError, match="Expected summary to be True or False"):
        train.run(8, callbacks=[validate], summary='no')
