"""Resuming with another config or other run arguments: refused naming each changed key, or (the keys that may
change: n_epochs/n_iters, the optimizer's hyper-parameters, the placement) applied with a warning naming it."""
import shutil
import warnings

import numpy as np
import pytest
import torch

from flowpipe import B, C, CheckpointError, Dataset, Pipeline, V, safe_pickle
from flowpipe.execution import checkpoint as files
from flowpipe.models.torch import MLP

pytestmark = pytest.mark.usefixtures('default_dtype')

RUN = {'batch_size': 8, 'shuffle': 3, 'seed': 5}


def trainer(lr=0.1, units=(8,), optimizer=None, pipeline_config=None, **extra):
    """An MLP trained by SGD on 40 items, its losses in ``V('loss')``; ``extra`` model keys on top."""
    rng = np.random.default_rng(0)
    dataset = Dataset(40, preloaded={'x': rng.normal(size=(40, 6)), 'y': rng.integers(0, 3, 40)})
    config = {'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'loss': 'ce',
              'body': {'units': units}, 'optimizer': optimizer or {'name': 'SGD', 'lr': lr}, **extra}
    pipeline = (Pipeline().init_variable('loss', [])
                .init_model('net', MLP, config=config)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a')))
    return pipeline << dataset << (pipeline_config or {})


def weights(pipeline):
    model = pipeline.m('net')
    result = [p.detach().clone() for p in model.model.parameters()]
    model.close()
    return result


def lrs(pipeline):
    return [group['lr'] for group in pipeline.m('net').optimizer.param_groups]


def checkpointed(folder, **make):
    """A finished run of 3 batches with its checkpoint in ``folder``."""
    done = trainer(**make)
    done.run(**RUN, n_iters=3, checkpoint=folder)
    return weights(done)


def resumed(folder, n_iters=4, **make):
    """The run of ``checkpointed`` resumed to ``n_iters`` batches: (pipeline, the warnings' texts)."""
    pipeline = trainer(**make)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        pipeline.run(**RUN, n_iters=n_iters, checkpoint=folder, resume=True)
    return pipeline, [str(warning.message) for warning in caught if 'resuming from' in str(warning.message)]


@pytest.mark.parametrize('change, line', [
    ({'units': (16,)}, "model 'net' body/units: (8,) → (16,)"),
    ({'body/dropout': 0.5}, "model 'net' body/dropout: (not given) → 0.5"),
    ({'optimizer': {'name': 'Adam', 'lr': 0.1}}, "model 'net' optimizer/name: 'SGD' → 'Adam'"),
    ({'loss': 'mse'}, "model 'net' loss: 'ce' → 'mse'")])
def test_a_changed_model_config_is_refused_naming_the_key_and_both_values(tmp_path, change, line):
    checkpointed(tmp_path)
    with pytest.raises(CheckpointError, match='checkpoint → now') as info:
        trainer(**change).run(**RUN, n_iters=3, checkpoint=tmp_path, resume=True)
    assert line in str(info.value)


def test_every_changed_key_is_named(tmp_path):
    checkpointed(tmp_path)
    with pytest.raises(CheckpointError) as info:
        trainer(units=(16,), optimizer={'name': 'Adam', 'lr': 0.1}).run(**{**RUN, 'batch_size': 4}, n_iters=3,
                                                                        checkpoint=tmp_path, resume=True)
    for line in ("batch_size: 8 → 4", "model 'net' body/units: (8,) → (16,)",
                 "model 'net' optimizer/name: 'SGD' → 'Adam'"):
        assert line in str(info.value)


def test_a_changed_learning_rate_is_applied_to_the_restored_optimizer_with_a_warning(tmp_path):
    before = checkpointed(tmp_path / 'a')
    shutil.copytree(tmp_path / 'a', tmp_path / 'b')
    same, said = resumed(tmp_path / 'a')
    assert lrs(same) == [0.1] and not [text for text in said if 'lr' in text]
    faster, said = resumed(tmp_path / 'b', lr=0.5)
    assert lrs(faster) == [0.5]
    assert any("model 'net' optimizer/lr: 0.1 → 0.5" in text for text in said)
    # one SGD step from the same weights on the same batch: 5 times the step of lr 0.1
    for start, slow, fast in zip(before, weights(same), weights(faster)):
        torch.testing.assert_close(fast - start, 5 * (slow - start))


def test_a_learning_rate_read_from_the_pipeline_config_may_change(tmp_path):
    checkpointed(tmp_path, lr=C('lr'), pipeline_config={'lr': 0.1})
    pipeline, said = resumed(tmp_path, lr=C('lr'), pipeline_config={'lr': 0.3})
    assert lrs(pipeline) == [0.3]
    assert any("model 'net' optimizer/lr: 0.1 → 0.3" in text for text in said)


def test_a_device_in_the_pipeline_config_may_change(tmp_path):
    checkpointed(tmp_path, device=C('device'), pipeline_config={'device': 'cpu'})
    pipeline, said = resumed(tmp_path, device=C('device'), pipeline_config={'device': ['CPU:0', 'CPU:1']})
    assert '2 replicas' in pipeline.m('net').device_plan(8)
    named = [text.split(' with ', 1)[1] for text in said]
    assert named == ['n_iters: 3 → 4; the new value applies.',
                     "model 'net' device: 'cpu' → ['CPU:0', 'CPU:1']; the new value applies."]
    weights(pipeline)


def test_a_config_key_an_action_reads_is_refused(tmp_path):
    def make(scale):
        return trainer(pipeline_config={'scale': scale}).update(B.x, B.x * C('scale'))
    make(1.0).run(**RUN, n_iters=3, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="config scale: 1.0 → 2.0"):
        make(2.0).run(**RUN, n_iters=3, checkpoint=tmp_path, resume=True)


def test_a_new_learning_rate_rescales_a_schedule_and_keeps_its_progress(tmp_path):
    decay = {'decay': {'name': 'exp', 'gamma': 0.5}}
    checkpointed(tmp_path, **decay)
    pipeline, _ = resumed(tmp_path, lr=0.4, **decay)
    assert lrs(pipeline) == [pytest.approx(0.4 * 0.5 ** 4)]
    assert pipeline.m('net').decay.scheduler.base_lrs == [pytest.approx(0.4)]


def test_other_optimizer_options_are_applied(tmp_path):
    checkpointed(tmp_path, optimizer={'name': 'SGD', 'lr': 0.1, 'momentum': 0.5})
    pipeline, said = resumed(tmp_path, optimizer={'name': 'SGD', 'lr': 0.1, 'momentum': 0.9})
    assert [group['momentum'] for group in pipeline.m('net').optimizer.param_groups] == [0.9]
    assert any("optimizer/momentum: 0.5 → 0.9" in text for text in said)


def test_more_epochs_on_resume_end_as_the_longer_run(tmp_path):
    whole = trainer()
    whole.run(**RUN, n_epochs=2)
    trainer().run(**RUN, n_epochs=1, checkpoint=tmp_path)
    longer = trainer()
    with pytest.warns(UserWarning, match='n_epochs: 1 → 2'):
        longer.run(**RUN, n_epochs=2, checkpoint=tmp_path, resume=True)
    assert longer.v('loss') == whole.v('loss')        # the first 5 from the checkpoint
    assert all(torch.equal(a, b) for a, b in zip(weights(longer), weights(whole)))


def test_fewer_batches_than_the_checkpoint_s_are_refused(tmp_path):
    checkpointed(tmp_path)
    with pytest.raises(ValueError, match=r"at least the 3 batches .* Received: a run of 2 batches"):
        trainer().run(**RUN, n_iters=2, checkpoint=tmp_path, resume=True)


def test_the_devices_may_change_on_resume(tmp_path):
    whole = trainer(device=['CPU:0', 'CPU:1'], microbatch=2)
    whole.run(**RUN, n_iters=4)
    checkpointed(tmp_path, device='cpu')
    pipeline, said = resumed(tmp_path, device=['CPU:0', 'CPU:1'], microbatch=2)
    assert '2 replicas' in pipeline.m('net').device_plan(8)
    assert any("model 'net' device: 'cpu' → ['CPU:0', 'CPU:1']" in text for text in said)
    assert any("model 'net' microbatch: (not given) → 2" in text for text in said)
    # the same training up to the rounding of a sum over pieces instead of one batch
    np.testing.assert_allclose(pipeline.v('loss'), whole.v('loss'), rtol=1e-5)
    for ours, theirs in zip(weights(pipeline), weights(whole)):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_pipeline_keys_may_change_on_resume_and_a_dropped_placement_key_is_built_without_it(tmp_path):
    checkpointed(tmp_path, pipeline=2, pipeline_schedule='gpipe', microbatch=3)
    pipeline, said = resumed(tmp_path)           # one process: the pipeline and the micro-batches dropped
    assert any("model 'net' pipeline: 2 → (not given)" in text for text in said)
    assert any("model 'net' pipeline_schedule: 'gpipe' → (not given)" in text for text in said)
    plan = pipeline.m('net').plan
    assert plan.pipeline is None and not plan.microbatch          # not the saved config's values
    again, said = resumed(tmp_path, n_iters=5, pipeline=2)
    assert any("model 'net' pipeline: (not given) → 2" in text for text in said)
    assert again.m('net').plan.pipeline.stages == 2


def test_an_action_argument_is_compared_whole(tmp_path):
    long = 'x' * 80
    trainer().update(V('tag', default=None), long + 'a').run(**RUN, n_iters=3, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match=f"action #3: update.*{long}a.* → update.*{long}b"):
        trainer().update(V('tag', default=None), long + 'b').run(**RUN, n_iters=3, checkpoint=tmp_path,
                                                                  resume=True)


def test_a_checkpoint_of_the_earlier_format_is_refused_naming_it(tmp_path):
    checkpointed(tmp_path)
    path = next(tmp_path.glob('*.flowpipe'))
    with open(path, 'rb') as file:
        payload = safe_pickle.load(file)
    with open(path, 'wb') as file:
        safe_pickle.dump({**payload, 'format_version': 1}, file)
    with pytest.raises(CheckpointError, match=f'format version {files.FORMAT_VERSION}.*version 1'):
        trainer().run(**RUN, n_iters=3, checkpoint=tmp_path, resume=True)
