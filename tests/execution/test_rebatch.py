"""rebatch, join and merge: actions that change which batches flow."""
import pytest

from flowpipe.expr import B, V
from flowpipe.pipeline import Pipeline

from tests.pipeline.helpers import make_dataset


def test_rebatch_recuts_batches_and_keeps_the_tail():
    pipeline = make_dataset(10).p.add(100).rebatch(4).scale(2)
    batches = list(pipeline.gen_batch(3))
    assert [batch.indices.tolist() for batch in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0].x.tolist() == [200, 202, 204, 206]


def test_rebatch_drop_last_drops_the_short_tail():
    pipeline = make_dataset(10).p.rebatch(4, drop_last=True)
    assert [batch.size for batch in pipeline.gen_batch(3)] == [4, 4]


def test_rebatch_to_larger_and_smaller_sizes_keeps_every_item():
    for size in (1, 3, 7, 25):
        got = [batch.indices.tolist() for batch in make_dataset(10).p.rebatch(size).gen_batch(4)]
        assert sum(got, []) == list(range(10))
        assert all(len(part) == size for part in got[:-1])


def test_rebatch_with_custom_merge():
    calls = []

    def merge(batches, batch_size):
        calls.append(batch_size)
        return type(batches[0]).merge(batches, batch_size)
    list(make_dataset(6).p.rebatch(4, merge=merge).gen_batch(3))
    assert calls == [4, None]


def test_rebatch_counts_iterations_per_stage():
    pipeline = make_dataset(8).p.init_variable('seen', []).rebatch(4).update(V('seen', mode='a'), B().size)
    pipeline.run(2)
    assert pipeline.v('seen') == [4, 4]


def test_join_passes_joined_batches_first():
    other = make_dataset(10).p.scale(10)
    pairs = []
    pipeline = make_dataset(10).p.join(other).call(lambda joined, main: pairs.append((joined.x.tolist(),
                                                                                        main.x.tolist())), B())
    pipeline.run(5)
    assert pairs == [([0, 10, 20, 30, 40], [0, 1, 2, 3, 4]), ([50, 60, 70, 80, 90], [5, 6, 7, 8, 9])]


def test_join_to_a_batch_action():
    other = make_dataset(4).p.scale(10)
    batches = list(make_dataset(4).p.join(other).absorb().gen_batch(2))
    assert [batch.x.tolist() for batch in batches] == [[0, 11], [22, 33]]


def test_joined_pipeline_uses_its_own_lazy_arguments():
    other = make_dataset(10).p.run(1, lazy=True)
    sizes = []
    make_dataset(10).p.join(other).call(lambda joined: sizes.append(joined.size)).run(5)
    assert sizes == [1, 1]


def test_join_needs_a_following_action():
    with pytest.raises(ValueError, match='after join'):
        make_dataset().p.join(make_dataset().p).run(2)


def test_merge_concatenates_batches_of_several_pipelines():
    pipeline = make_dataset(4).p.merge(make_dataset(4).p.add(100))
    batches = list(pipeline.gen_batch(2))
    assert [batch.x.tolist() for batch in batches] == [[0, 1, 100, 101], [2, 3, 102, 103]]


def test_join_and_merge_with_prefetch_keep_batch_order():
    pairs = []
    other = make_dataset(12).p
    pipeline = make_dataset(12).p.join(other).call(lambda joined, main: pairs.append(
        (joined.indices.tolist(), main.indices.tolist())), B(), use_lock=True)
    pipeline.run(2, prefetch=3)
    assert pairs == [(list(range(i, i + 2)), list(range(i, i + 2))) for i in range(0, 12, 2)]


def test_template_with_join_stays_a_definition():
    template = Pipeline().join(Pipeline())
    assert [record.name for record in template.actions] == ['join']
