"""Built-in actions, sections and the repeat/probability compositions, run on real batches."""
import pytest

from flowpipe.errors import StopPipeline
from flowpipe.expr import B, C, R, V
from flowpipe.pipeline import Pipeline

from .helpers import make_dataset


def test_init_variable_runs_before_the_first_batch_and_only_once():
    pipeline = make_dataset(6).p.init_variable('n', 10).update(V('n'), V('n') + 1)
    assert pipeline.v('n') == 10
    pipeline.run(2)
    assert pipeline.v('n') == 13
    pipeline.run(3)
    assert pipeline.v('n') == 15


def test_update_modes_and_save_to_alias():
    pipeline = (make_dataset(4).p.init_variable('a', []).init_variable('e', []).init_variable('d', {})
                .update(V('a'), B().size, mode='a').save_to(V('e', mode='e'), B().indices.tolist())
                .update(V('d'), {'last': B().size}, mode='u'))
    pipeline.run(2)
    assert pipeline.v('a') == [2, 2] and pipeline.v('e') == [0, 1, 2, 3] and pipeline.v('d') == {'last': 2}


def test_update_writes_a_batch_component():
    batch = make_dataset(4).p.update(B('x'), B('x') * 3).next_batch(2)
    assert batch.x.tolist() == [0, 3]


def test_call_keeps_save_to_unevaluated_and_evaluates_everything_else():
    seen = []
    pipeline = make_dataset(4).p.init_variable('out', None).call(
        lambda size, step, key=None: seen.append((size, step, key)) or size * step,
        B().size, C('step'), key=V('out'), save_to=V('out')) << {'step': 3}
    pipeline.run(2)
    assert seen == [(2, 3, None), (2, 3, 6)]
    assert pipeline.v('out') == 6


def test_print_evaluates_its_arguments(capsys):
    make_dataset(4).p.print('size', B().size, sep='=').run(4)
    assert capsys.readouterr().out == 'size=4\n'


def test_before_and_after_run_once_per_run():
    events = []
    pipeline = (make_dataset(4).p.before.call(events.append, 'start').after.call(events.append, 'end')
                .call(lambda batch: events.append(batch.size), B()))
    pipeline.run(2)
    pipeline.run(4)
    assert events == ['start', 2, 2, 'end', 'start', 4, 'end']


def test_before_sees_variables_and_config():
    pipeline = (make_dataset(4).p.init_variable('x', 0).before.update(V('x'), C('start'))
                .update(V('x'), V('x') + 1)) << {'start': 100}
    pipeline.run(2)
    assert pipeline.v('x') == 102


def test_stop_pipeline_in_before_skips_the_run():
    def stop():
        raise StopPipeline
    seen = []
    pipeline = make_dataset(4).p.before.call(stop).call(seen.append, 1)
    pipeline.run(2)
    assert seen == []


def test_repeat_applies_actions_n_times():
    batch = (make_dataset(4).p.add(1).scale(2) * 3).next_batch(2)
    assert batch.x.tolist() == [14, 22]


def test_probability_is_drawn_from_the_batch_generator_and_reproducible():
    pipeline = make_dataset(200).p.init_variable('hits', []) + \
        (Pipeline().update(V('hits', mode='a'), B().indices[0]) @ 0.5)
    pipeline.run(1, seed=11)
    hits = pipeline.v('hits')
    assert 60 < len(hits) < 140
    pipeline.run(1, seed=11, reset='variables')
    assert pipeline.v('hits') == hits
    pipeline.run(1, seed=12, reset='variables', prefetch=4)
    assert pipeline.v('hits') != hits


def test_probability_zero_and_one():
    assert (make_dataset(4).p.add(5) @ 0).next_batch(2).x.tolist() == [0, 1]
    assert (make_dataset(4).p.add(5) @ 1).next_batch(2).x.tolist() == [5, 6]


def test_random_expression_follows_the_run_seed():
    def draws(seed, prefetch):
        pipeline = make_dataset(8).p.init_variable('r', []).update(V('r', mode='a'), R('uniform'))
        return pipeline.run(2, seed=seed, prefetch=prefetch).v('r')
    assert draws(5, 0) == draws(5, 3)
    assert draws(5, 0) != draws(6, 0)


@pytest.mark.parametrize('name', ['join', 'merge', 'rebatch'])
def test_structural_builtins_cannot_be_called_directly(name):
    from flowpipe.pipeline import get_builtin
    with pytest.raises(RuntimeError, match='execution'):
        get_builtin(name).func(None)


@pytest.mark.parametrize('declare, action, suggested', [
    (lambda p: p.update(V('x'), 1, mdoe='a'), 'update', "'mode'"),
    (lambda p: p.save_to(V('x'), 1, mdoe='a'), 'save_to', "'mode'"),
    (lambda p: p.init_variable('x', defualt=0), 'init_variable', "'default'"),
    (lambda p: p.before.init_variable('x', defualt=0), 'init_variable', "'default'"),
    (lambda p: p.rebatch(4, dorp_last=True), 'rebatch', "'drop_last'"),
    (lambda p: p.merge(Pipeline(), fnn=None), 'merge', "'fn'"),
    (lambda p: p.print(B.size, edn=''), 'print', "'end'"),
    (lambda p: p.save_model('net', pth='net.pt'), 'save_model', "'path'"),
    (lambda p: p.init_model('net', None, cofnig={}), 'init_model', "'config'"),
])
def test_a_misspelt_keyword_names_the_action_and_suggests_at_declaration(declare, action, suggested):
    with pytest.raises(TypeError, match=f"built-in action '{action}'. Did you mean {suggested}") as error:
        declare(Pipeline())
    assert f"Expected {action}(" in str(error.value) and '<locals>' not in str(error.value)


@pytest.mark.parametrize('declare, received', [
    (lambda p: p.update(), "update() (missing a required argument: 'target')"),
    (lambda p: p.init_variable(), "init_variable() (missing a required argument: 'name')"),
    (lambda p: p.rebatch(), "rebatch() (missing a required argument: 'batch_size')"),
    (lambda p: p.update(V('x'), 1, 'a', 4), "update(V('x'), 1, 'a', 4) (too many positional arguments)"),
    (lambda p: p.save_model('net'), "save_model('net') (missing a required argument: 'path')"),
])
def test_a_missing_or_extra_argument_names_the_action_and_its_form(declare, received):
    with pytest.raises(TypeError) as error:
        declare(Pipeline())
    assert f"Received: {received}." in str(error.value) and '<locals>' not in str(error.value)
    assert str(error.value).startswith(f"Expected {received.split('(')[0]}(")


def test_init_model_shows_the_arguments_users_pass_not_its_internal_ones():
    with pytest.raises(TypeError, match=r"Expected init_model\(name, model_class=None, mode='dynamic', config=None\)\. "
                                        r"Received: unknown keyword static=1"):
        Pipeline().init_model('net', static=1)
    Pipeline().init_model('dynamic', None, 'net', config={})     # the mode-first order binds to the same form


def test_every_built_in_checks_its_keywords_unless_it_passes_them_on():
    from flowpipe.pipeline import builtin_names, get_builtin
    from flowpipe.pipeline.sections import make_record
    passing_on = []
    for name in builtin_names():
        if '**' in str(get_builtin(name).call_form()):
            passing_on.append(name)
            continue
        with pytest.raises(TypeError, match=f"unknown keyword zzz=1 of the built-in action '{name}'"):
            make_record(name, (), {'zzz': 1})
    # These hand extra keywords to a function, a model or a metrics class.
    assert passing_on == ['call', 'gather_metrics', 'predict_model', 'train_model']


def test_known_keywords_of_built_ins_are_kept():
    pipeline = Pipeline().print(B.size, end='').rebatch(4, drop_last=True).call(print, 1, sep='-')
    assert [dict(record.kwargs) for record in pipeline.actions][::2] == [{'end': ''}, {'sep': '-'}]
    # init_model reads both of its argument orders itself: only its keywords are checked here.
    both = Pipeline().init_model('dynamic', dict, 'net', config={}).init_model('other', dict, mode='dynamic')
    assert [record.kwargs['name'] for record in both.actions] == ['net', 'other']
