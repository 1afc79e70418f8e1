"""What stopping on signals costs a distributed run: the flag rides in the engine's exchange of item counts at
each training step, so a training run takes the same collectives with the signal handling as without it; a run
that trains no model agrees with one ``all_reduce`` per batch of its own."""
import pytest

from flowpipe.parallel import launch

from . import signal_jobs

TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
BATCHES = 12      # 2 epochs of 23 items in batches of 4


def _counts(tmp_path, trains, **checkpoint):
    return launch(signal_jobs.count_collectives, 2, args=(str(tmp_path / str(len(list(tmp_path.iterdir())))), trains),
                  kwargs=checkpoint, timeout=TIMEOUT)


def test_a_training_run_stops_on_signals_without_a_collective_more_per_batch(tmp_path):
    handled = _counts(tmp_path, True, every=100, on_interrupt=True)
    unhandled = _counts(tmp_path, True, every=100, on_interrupt=False)
    assert handled == unhandled
    # one exchange of item counts per step, one of the ranks' position before the model is built, and one at the
    # run's end; the rest is the checkpoint of the last batch
    assert handled[0]['all_gather'] == BATCHES + 2


def test_a_seconds_checkpoint_reads_rank_0s_clock_in_the_same_exchange(tmp_path):
    # due at every batch on rank 0's clock: every rank takes part in a write after every batch, as with every=1
    timed = _counts(tmp_path, True, seconds=1e-9, keep=100, on_interrupt=True)
    plain = _counts(tmp_path, True, every=1, keep=100, on_interrupt=False)
    assert timed == plain


def test_a_run_without_a_training_step_agrees_with_one_all_reduce_per_batch(tmp_path):
    handled = _counts(tmp_path, False, every=100, on_interrupt=True)
    unhandled = _counts(tmp_path, False, every=100, on_interrupt=False)
    assert [counts.get('all_reduce', 0) - other.get('all_reduce', 0)
            for counts, other in zip(handled, unhandled)] == [BATCHES, BATCHES]
