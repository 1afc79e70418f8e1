"""EarlyStopping: Keras's rule, recomputed by hand on fixed sequences."""
import pytest

from flowpipe.callbacks import EarlyStopping

from .fake_run import FakeRun, feed


def _keras(values, patience, min_delta, mode):
    best, wait = (float('inf'), 0) if mode == 'min' else (-float('inf'), 0)
    for epoch, value in enumerate(values):
        if (value < best - min_delta) if mode == 'min' else (value > best + min_delta):
            best, wait = value, 0
        else:
            wait += 1
            if wait >= patience:
                return epoch
    return None


@pytest.mark.parametrize('values, patience, min_delta, mode', [
    ([1.0, 0.9, 0.899, 0.95, 0.8, 0.81, 0.82, 0.83], 3, 1e-2, 'min'),
    ([1.0, 0.9, 0.95, 0.96], 0, 0.0, 'min'),
    ([0.1, 0.5, 0.4, 0.6, 0.6, 0.6], 2, 0.0, 'max'),
    ([5.0, 4.0, 3.0, 2.0], 1, 0.0, 'min')])
def test_stops_where_keras_rule_says(values, patience, min_delta, mode):
    early = EarlyStopping('val/loss', mode=mode, patience=patience, min_delta=min_delta)
    stops = feed(early, values)
    expected = _keras(values, patience, min_delta, mode)
    assert early.stopped_epoch == expected
    assert stops[:1] == ([] if expected is None else [expected])


def test_state_round_trip_continues_the_same():
    values = [1.0, 0.9, 0.95, 0.97, 0.98, 0.99]
    first = EarlyStopping(patience=3)
    feed(first, values[:3])
    second = EarlyStopping(patience=3)
    second.load_state(first.state())
    run = FakeRun()
    stops = [epoch for epoch, value in enumerate(values[3:], 3)
             if (setattr(run, 'logs', {'val/loss': value}), second.on_epoch_end(run, epoch), run.stopped)[2]]
    assert stops[0] == _keras(values, 3, 0.0, 'min') == second.stopped_epoch


def test_bad_arguments_and_a_missing_monitor_are_named():
    with pytest.raises(ValueError, match='mode='):
        EarlyStopping(mode='lowest')
    with pytest.raises(ValueError, match='patience'):
        EarlyStopping(patience=-1)
    with pytest.raises(KeyError, match="monitor='val/acc'.*Validate"):
        feed(EarlyStopping('val/acc'), [1.0], monitor='val/loss')


@pytest.mark.parametrize('min_delta', [float('nan'), float('inf'), -0.1])
def test_a_min_delta_that_is_not_a_finite_number_is_refused(min_delta):
    with pytest.raises(ValueError, match='min_delta as a finite number >= 0'):
        EarlyStopping(min_delta=min_delta)
