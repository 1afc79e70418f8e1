"""A run resumed with its callbacks in another order gives each callback its own saved state (matched by kind and
arguments, so two callbacks of one kind do not swap), and other callbacks are named, not a bare KeyError."""
import pytest

from flowpipe import Checkpoint, CheckpointError
from flowpipe.callbacks import EarlyStopping, ReduceLROnPlateau
from flowpipe.execution.events import matched_states

from ..execution import checkpoint_cases as cases

RUN = {'batch_size': cases.BATCH, 'n_epochs': 8, 'shuffle': 5}


def _callbacks():
    return [EarlyStopping('train/loss', patience=20, min_delta=0.3), EarlyStopping('train/loss', patience=20),
            ReduceLROnPlateau('net', monitor='train/loss', factor=0.5, patience=1, threshold=0.05)]


def _state(callbacks, train):
    early_a, early_b, plateau = callbacks
    return [(early.wait, early.best, early.stopped_epoch) for early in (early_a, early_b)] + [
        plateau.bad_epochs, [group['lr'] for group in train.m('net').optimizer.param_groups]]


@pytest.fixture(autouse=True)
def _no_trigger():
    yield
    cases.TRIGGER.update(at=None, error=None, where='first')


def test_callbacks_listed_in_another_order_resume_with_their_own_states(tmp_path):
    whole, callbacks = cases.pipeline(), _callbacks()
    whole.run(**RUN, callbacks=callbacks)
    expected = _state(callbacks, whole)
    whole.m('net').close()
    assert expected[0] != expected[1]                      # the two EarlyStopping states differ: a swap would show

    cases.TRIGGER.update(at=20, error=cases.Crash(), where='first')
    spec = Checkpoint(tmp_path / 'checkpoints', every=3)
    first = cases.pipeline()
    with pytest.raises(cases.Crash):
        first.run(**RUN, checkpoint=spec, callbacks=_callbacks())
    first.m('net').close()
    cases.TRIGGER.update(at=None)
    again, callbacks = cases.pipeline(), _callbacks()
    again.run(**RUN, checkpoint=spec, resume=True, callbacks=callbacks[::-1])
    resumed = _state(callbacks, again)
    again.m('net').close()
    assert resumed == expected


def test_other_callbacks_are_named():
    saved = [('flowpipe.callbacks.early_stopping.EarlyStopping', 'EarlyStopping(a)', {'wait': 1}),
             ('flowpipe.callbacks.reduce_lr.ReduceLROnPlateau', 'ReduceLROnPlateau(b)', {'bad_epochs': 0})]
    plateau = ReduceLROnPlateau('net', monitor='train/loss')
    assert matched_states([plateau], saved[1:]) == [{'bad_epochs': 0}]      # one of its kind: its state
    with pytest.raises(CheckpointError, match=r"Expected the callbacks the checkpoint was written with, in any "
                                              r"order\. Received: \[\"ReduceLROnPlateau\('net'.*the checkpoint has "
                                              r"\['EarlyStopping\(a\)'\]"):
        matched_states([plateau], saved[:1])
    with pytest.raises(CheckpointError, match='Resume with the same callbacks='):
        matched_states([plateau], saved)                                    # a saved one left over
