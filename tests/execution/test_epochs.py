"""EpochClock: where epochs end in a run's stream of batches, against the positions the index actually draws."""
import numpy as np
import pytest

from flowpipe.data.sampling import gen_positions
from flowpipe.execution.epochs import EpochClock


def _by_stream(size, batch_size, n_epochs, drop_last, whole_epochs=False):
    """(epoch of the first item, epochs whose last item it holds) of each batch, by walking the drawn positions."""
    rng = np.random.default_rng(0)
    epoch_of_item = np.concatenate([np.full(size, epoch) for epoch in range(n_epochs)])
    out, start = [], 0
    for positions in gen_positions(size, batch_size, rng, None, n_epochs, drop_last, whole_epochs):
        if drop_last or whole_epochs:      # whole batches per epoch: each dropped tail skipped, or a short batch
            per = size // batch_size if drop_last else -(-size // batch_size)
            seq = len(out)
            assert len(positions) == (size - (per - 1) * batch_size if (seq + 1) % per == 0 and not drop_last
                                      else batch_size)
            out.append((seq // per, [seq // per] if (seq + 1) % per == 0 else []))
            continue
        items = epoch_of_item[start:start + len(positions)]
        ends = [epoch for epoch in range(n_epochs) if start <= (epoch + 1) * size - 1 < start + len(positions)]
        out.append((int(items[0]), ends))
        start += len(positions)
    return out


@pytest.mark.parametrize('size, batch_size, drop_last', [(10, 4, False), (10, 4, True), (10, 5, False),
                                                         (7, 3, False), (5, 12, False), (12, 12, True)])
@pytest.mark.parametrize('whole_epochs', [False, True])
def test_epoch_ends_follow_the_stream(size, batch_size, drop_last, whole_epochs):
    clock = EpochClock(size, batch_size, drop_last, n_epochs=4, whole_epochs=whole_epochs)
    expected = _by_stream(size, batch_size, 4, drop_last, whole_epochs)
    got = [(clock.epoch_of(seq), list(clock.ended(seq))) for seq in range(len(expected))]
    assert got == expected
    assert sorted(epoch for _, ends in got for epoch in ends) == [0, 1, 2, 3]     # every epoch ends exactly once
    for epoch in range(4):                                                  # after end_step(epoch) batches
        assert epoch in clock.ended(clock.end_step(epoch) - 1)


def test_straddling_batch_ends_the_epoch_of_its_last_item():
    clock = EpochClock(10, 4)
    assert [list(clock.ended(seq)) for seq in range(5)] == [[], [], [0], [], [1]]
    assert [clock.epoch_of(seq) for seq in range(5)] == [0, 0, 0, 1, 1]      # batch 2 holds items 8..11


@pytest.mark.parametrize('prefetch', [0, 2])
def test_expressions_read_the_batch_epoch(prefetch):
    from flowpipe import Dataset, I, Pipeline, V
    pipeline = (Pipeline().init_variable('epochs', []).update(V('epochs', mode='a'), I('epoch'))
                << Dataset(10))
    pipeline.run(4, n_epochs=3, prefetch=prefetch)
    assert pipeline.v('epochs') == [0, 0, 0, 1, 1, 2, 2, 2]      # items 0-3, 4-7, 8-11: the first item's epoch
    with pytest.raises(ValueError, match="before the rebatch"):
        (Pipeline().rebatch(2).update(V('e'), I('epoch')) << Dataset(10)).run(4)
