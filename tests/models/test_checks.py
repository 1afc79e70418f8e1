"""Training never goes wrong silently: BatchNorm on tiny pieces, non-finite losses, unknown config keys."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import MLP, ResNet18, SimpleCNN, TorchModel
from flowpipe.models.torch.checks import (BATCHNORM_MIN_ITEMS, BatchNormCheck, BatchNormShardWarning, InputCheck,
                                          NonFiniteLossWarning)
from flowpipe.parallel.plan import make_plan
from flowpipe.models.torch.config import TOP_KEYS

IMAGES = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images'}


def _batch(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8), dtype=np.float32), rng.integers(0, 10, n)


def _train(model, steps=2, n=64):
    images, labels = _batch(n)
    with model:
        return [model.train(images=images, labels=labels, fetches='loss') for _ in range(steps)]


def _batch_norm_warnings(cls=ResNet18, **config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _train(cls({**IMAGES, **config}))
    return [w for w in caught if issubclass(w.category, BatchNormShardWarning)]


def test_the_seed_setting_two_devices_and_microbatch_2_warns_once_with_numbers_and_fixes():
    found = _batch_norm_warnings(device=['CPU:0', 'CPU:1'], microbatch=2)
    assert len(found) == 1                              # two steps, one warning per model
    text = str(found[0].message)
    assert 'a batch of 64 cut by 2 replicas and microbatch=2' in text and 'as few as 1 item' in text
    assert f'fewer than {BATCHNORM_MIN_ITEMS}' in text
    assert all(fix in text for fix in ('larger microbatch', 'fewer devices', 'GroupNorm', 'SyncBatchNorm'))


def test_synced_batch_norm_layers_are_not_counted():
    network = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 10))
    plan = make_plan(['CPU:0', 'CPU:1'], microbatch=2)
    assert BatchNormCheck(network, plan).layers == 1
    check = BatchNormCheck(nn.SyncBatchNorm.convert_sync_batchnorm(network), plan)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        check(64)                                   # pieces of 1 item: no BatchNorm of its own to warn about
    assert check.layers == 0


@pytest.mark.parametrize('config', [{'device': ['CPU:0', 'CPU:1'], 'microbatch': 2 * BATCHNORM_MIN_ITEMS},
                                    {'microbatch': BATCHNORM_MIN_ITEMS},
                                    {'device': ['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3']},
                                    {'device': 'CPU:0'}])
def test_pieces_at_the_threshold_or_larger_do_not_warn(config):
    assert _batch_norm_warnings(SimpleCNN, **config) == []


def test_small_pieces_without_batch_norm_do_not_warn():
    assert _batch_norm_warnings(SimpleCNN, batch_norm=False, microbatch=2) == []
    assert _batch_norm_warnings(MLP, device=['CPU:0', 'CPU:1'], microbatch=2) == []


def test_a_micro_batch_below_the_threshold_on_one_device_warns():
    found = _batch_norm_warnings(SimpleCNN, microbatch=BATCHNORM_MIN_ITEMS - 1)
    assert len(found) == 1 and f'as few as {BATCHNORM_MIN_ITEMS - 1} items' in str(found[0].message)


def test_a_non_finite_loss_warns_once_with_the_batch_number():
    torch.manual_seed(0)
    model = MLP({**IMAGES, 'nonfinite_loss': 'warn'})
    images, labels = _batch(16)
    with warnings.catch_warnings(record=True) as caught, model:
        warnings.simplefilter('always')
        model.train(images=images, labels=labels)
        model.train(images=images * np.nan, labels=labels)
        model.train(images=images * np.nan, labels=labels)
    found = [w for w in caught if issubclass(w.category, NonFiniteLossWarning)]
    assert len(found) == 1
    assert 'loss=nan' in str(found[0].message) and 'training batch 2' in str(found[0].message)
    assert "'nonfinite_loss': 'raise'" in str(found[0].message)


def test_a_non_finite_loss_can_stop_training_or_be_ignored():
    images, labels = _batch(16)
    with MLP({**IMAGES, 'nonfinite_loss': 'raise'}) as model:
        model.train(images=images, labels=labels)
        with pytest.raises(FloatingPointError, match='training batch 2'):
            model.train(images=images * np.inf, labels=labels)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with MLP({**IMAGES, 'nonfinite_loss': 'ignore'}) as model:
            model.train(images=images * np.nan, labels=labels)
    with pytest.raises(ValueError, match=r"nonfinite_loss in \('skip', 'raise', 'warn', 'ignore'\)"):
        MLP({**IMAGES, 'nonfinite_loss': 'stop'})


def _state(model):
    return {key: value.clone() for key, value in model.model.state_dict().items()}


def _same(first, second):
    return first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)


def test_by_default_a_non_finite_loss_skips_the_step_and_the_model_stays_as_it_was():
    torch.manual_seed(0)
    images, labels = _batch(16)
    poisoned = images.copy()
    poisoned[3, 0, 2, 2] = np.nan           # one pixel of one item
    with SimpleCNN(IMAGES) as model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        model.train(images=images, labels=labels)
        before, optimizer_state = _state(model), repr(model.optimizer.state_dict())
        loss = model.train(images=poisoned, labels=labels, fetches='loss')
        assert np.isnan(loss) and model.skipped_steps == 1 and model.iteration == 2
        assert _same(_state(model), before)         # weights and BatchNorm statistics alike
        assert repr(model.optimizer.state_dict()) == optimizer_state
        model.train(images=poisoned, labels=labels)
        assert model.skipped_steps == 2
        assert np.isfinite(model.train(images=images, labels=labels, fetches='loss'))
        assert all(torch.isfinite(value).all() for value in model.model.state_dict().values())
    found = [w for w in caught if issubclass(w.category, NonFiniteLossWarning)]
    assert len(found) == 1 and 'training batch 2' in str(found[0].message) and 'skipped' in str(found[0].message)


@pytest.mark.parametrize('placement', [{}, {'device': ['CPU:0', 'CPU:1']}, {'microbatch': 5},
                                       {'device': ['CPU:0', 'CPU:1', 'CPU:2'], 'microbatch': 7}])
def test_every_layout_skips_the_same_steps_as_one_device(placement):
    images, labels = _batch(16)
    poisoned = images.copy()
    poisoned[-1] = np.inf                   # only the last shard / micro-batch sees it
    config = {**IMAGES, 'dtype': 'float64', 'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.9}}
    results = []
    for layout in ({}, placement):
        torch.manual_seed(0)
        with MLP({**config, **layout}) as model, warnings.catch_warnings():
            warnings.simplefilter('ignore', NonFiniteLossWarning)
            for batch in (images, poisoned, images, poisoned):
                model.train(images=batch.astype(np.float64), labels=labels, seed=1)
            results.append((_state(model), model.skipped_steps))
    (single, skipped), (other, other_skipped) = results
    assert skipped == other_skipped == 2
    assert all(torch.allclose(single[key], other[key], rtol=1e-10, atol=1e-12) for key in single)


def test_raise_stops_at_a_non_finite_loss_with_the_model_as_before_the_batch():
    images, labels = _batch(16)
    with SimpleCNN({**IMAGES, 'nonfinite_loss': 'raise'}) as model:
        model.train(images=images, labels=labels)
        before = _state(model)
        with pytest.raises(FloatingPointError, match="training batch 2.*step was skipped.*'nonfinite_loss': 'skip'"):
            model.train(images=images * np.nan, labels=labels)
        assert _same(_state(model), before) and model.iteration == 1


def test_warn_and_ignore_apply_the_step_as_asked():
    images, labels = _batch(16)
    for mode in ('warn', 'ignore'):
        with MLP({**IMAGES, 'nonfinite_loss': mode}) as model, warnings.catch_warnings():
            warnings.simplefilter('ignore', NonFiniteLossWarning)
            model.train(images=images * np.nan, labels=labels)
            assert model.skipped_steps == 0
            assert not all(torch.isfinite(p).all() for p in model.model.parameters())


@pytest.mark.parametrize('key, hint', [('lr', "'optimizer': {'name': 'Adam', 'lr': 0.001}"),
                                       ('colour_scheme', 'no code reads it')])
def test_an_unknown_top_level_key_far_from_known_keys_warns(key, hint):
    with pytest.warns(UserWarning, match='Expected model config keys that MLP reads') as caught:
        MLP({**IMAGES, key: 1})
    assert hint in str(caught[0].message) and repr(key) in str(caught[0].message)


def test_a_key_close_to_a_known_one_is_an_error_and_known_keys_are_silent():
    with pytest.raises(ValueError, match=r"'optimiser'.*Did you mean \['optimizer'"):
        MLP({**IMAGES, 'optimiser': 'SGD'})
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        MLP({**IMAGES, 'name': 'net', 'common': {}, 'profile': False, 'nonfinite_loss': 'warn'})
    assert list(TOP_KEYS) == sorted(TOP_KEYS)


def test_a_model_class_declares_the_keys_it_reads():
    class Scaled(TorchModel):
        config_keys = ('width',)

        def build_network(self, spec):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, spec.get('width')))

    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model = Scaled({**IMAGES, 'width': 10})
    assert model.model[1].out_features == 10


def test_in_a_distributed_job_a_small_shard_per_process_warns():
    from flowpipe.parallel.distributed import World
    network = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    check = BatchNormCheck(network, make_plan('cpu', world=World(rank=1, size=4)))
    assert check.smallest_piece(4) == 4 and check.smallest_piece(BATCHNORM_MIN_ITEMS) == BATCHNORM_MIN_ITEMS
    assert check.smallest_piece(0) is None
    with pytest.warns(BatchNormShardWarning, match=r"shard of the global batch \(4 items, 1 of 4 processes\)"):
        check(4)


def test_a_pipeline_s_batch_is_a_shard_only_when_there_are_several_pipelines():
    from flowpipe.parallel.distributed import World
    network = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    one = BatchNormCheck(network, make_plan('cpu', world=World(rank=1, size=2), pipeline=2))
    assert one.smallest_piece(4) is None            # 2 stages of one pipeline: every stage sees the whole batch
    two = BatchNormCheck(network, make_plan('cpu', world=World(rank=1, size=4), pipeline=2))
    assert two.smallest_piece(4) == 4
    with pytest.warns(BatchNormShardWarning, match=r"shard of the global batch \(4 items, 1 of 2 pipelines\)"):
        two(4)


def test_a_one_item_batch_norm_shard_warns_before_the_step_and_fails_with_the_fixes():
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    config = {'model': network, 'inputs/x/shape': (4,), 'inputs/y/classes': 2, 'device': ['CPU:0', 'CPU:1']}
    with TorchModel(config) as model:
        with pytest.warns(BatchNormShardWarning, match='as few as 1 item'), \
                pytest.raises(ValueError, match=r"more than one item per piece.*a batch of 3 cut by 2 replicas.*"
                                                 r"Fixes: a larger microbatch"):
            model.train(x=np.zeros((3, 4), 'float32'), y=np.array([0, 1, 0]))
        assert model.iteration == 0


def test_items_of_another_shape_than_declared_are_an_error_naming_the_key_and_both_shapes():
    images, labels = _batch(8)
    bigger = np.zeros((8, 1, 10, 10), 'float32')
    with SimpleCNN(IMAGES) as model:          # global pooling: it would train on any size without a word
        with pytest.raises(ValueError, match=r"'images' items of shape \(1, 8, 8\) \('inputs/images/shape'.*"
                                             r"batch of shape \(8, 1, 10, 10\).*'inputs/images/shape': \(1, 10, 10\)"):
            model.train(images=bigger, labels=labels)
        with pytest.raises(ValueError, match=r"inputs/images/shape"):
            model.predict(images=bigger)
        assert model.iteration == 0
    with MLP(IMAGES) as model, pytest.raises(ValueError, match=r"items of shape \(1, 8, 9\)"):
        model.train(images=np.zeros((8, 1, 8, 9), 'float32'), labels=labels)    # not torch's mat1 and mat2


def test_an_empty_shard_has_no_item_to_check_against_the_declared_shape():
    check = InputCheck({'images': (1, 6, 6)}, {'labels': 10})
    check({'images': torch.zeros((0, 0, 0, 0)), 'labels': torch.zeros(0, dtype=torch.int64)})  # an idle rank's
    with pytest.raises(ValueError, match=r"items of shape \(1, 6, 6\)"):
        check({'images': torch.zeros((1, 1, 6, 7)), 'labels': torch.zeros(1, dtype=torch.int64)})


@pytest.mark.parametrize('labels, message', [
    (np.array([0, 10, 3, 2]), r"'labels' labels in \[0, 10\) \('inputs/labels/classes': 10\)\. Received: labels "
                              r"from 0 to 10\..*set 'inputs/labels/classes' to 11"),
    (np.array([0, -1, 3, 2]), r"labels from -1 to 3\. Encode the labels as 0\.\.9.*np\.unique")])
def test_labels_outside_the_classes_are_an_error_naming_the_key(labels, message):
    with MLP(IMAGES) as model, pytest.raises(ValueError, match=message):
        model.train(images=_batch(4)[0], labels=labels)


def test_text_labels_are_a_type_error_naming_the_fix():
    with MLP(IMAGES) as model, pytest.raises(TypeError, match=r"'labels'.*dtype <U.*inputs/labels/classes"):
        model.train(images=_batch(2)[0], labels=np.array(['cat', 'dog']))


def test_the_losss_ignore_index_and_value_losses_are_not_range_checked():
    images, _ = _batch(4)
    with MLP({**IMAGES, 'loss': {'name': 'ce', 'ignore_index': -1}}) as model:
        assert np.isfinite(model.train(images=images, labels=np.array([0, -1, 3, 9]), fetches='loss'))
    config = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 1, 'initial_block/inputs': 'images'}
    with MLP({**config, 'loss': 'bce'}) as model:           # 0/1 targets of one output
        assert np.isfinite(model.train(images=images, labels=np.array([[0], [1], [1], [0]]), fetches='loss'))
