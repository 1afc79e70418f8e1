"""flowpipe.research.executor and experiment: units, expressions, branches, failures, in this process."""
import numpy as np
import pytest

from flowpipe import B, C, Dataset, M, Pipeline, V
from flowpipe.models.torch import MLP
from flowpipe.research import E, EC, Executor, Experiment, O, S


def counter(n):
    total = 0
    for i in range(n):
        total += i
        yield total


def test_callable_generator_and_save():
    experiment = (Experiment().add_generator('gen', counter, n=4).add_callable('twice', lambda x: 2 * x, x=O('gen'))
                  .save(O('twice'), 'twice', when='last'))
    [running] = Executor(experiment, target='f', n_iters=4).run()
    assert running.results == {'twice': {3: 12}}


def test_stop_iteration_ends_experiment_with_last_units():
    experiment = Experiment().add_generator('gen', counter, n=EC('n')).save(O('gen'), 'value', when='last')
    runs = Executor(experiment, target='f', configs=[{'n': 2}, {'n': 3}], n_iters=None, finalize=True).run()
    assert [r.results['value'] for r in runs] == [{2: 1}, {3: 3}]
    assert all(r.exception is None for r in runs)


def test_exception_is_recorded_with_traceback_and_others_go_on():
    def fail_on_two(x):
        if x == 2:
            raise ArithmeticError('two')
        return x

    experiment = Experiment().add_callable('f', fail_on_two, x=EC('x'), save_to='out')
    runs = Executor(experiment, target='t', configs=[{'x': 1}, {'x': 2}], n_iters=2).run()
    assert runs[0].results == {'out': {0: 1, 1: 1}} and runs[0].exception is None
    assert 'ArithmeticError: two' in runs[1].exception and runs[1].results == {}


def test_debug_raises():
    experiment = Experiment().add_callable('f', lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        Executor(experiment, target='f', n_iters=1, debug=True).run()


def test_root_unit_runs_once_for_all_branches():
    calls = []

    def root():
        calls.append(1)
        return 10

    experiment = (Experiment().add_callable('root', root, root=True)
                  .add_callable('add', lambda a, b: a + b, a=O('root'), b=EC('x'), save_to='sum'))
    runs = Executor(experiment, target='f', configs=[{'x': 1}, {'x': 2}], n_iters=1).run()
    assert len(calls) == 1 and [r.results['sum'][0] for r in runs] == [11, 12]


def test_instances_storage_and_expressions():
    class Box:
        def __init__(self, size):
            self.size = size

        def area(self):
            return self.size ** 2

    def note(storage, value):
        storage.update_variable('noted', value)

    experiment = (Experiment().add_instance('box', Box, size=EC('size')).add_callable('box.area')
                  .add_callable('note', note, storage=S(), value=E().outputs['box.area']))
    [running] = Executor(experiment, target='f', configs=[{'size': 3}], n_iters=1).run()
    assert running.results['noted'] == {0: 9}


def test_pipeline_unit_uses_config():
    ppl = (Pipeline().init_variable('total', 0)
           .update(V('total'), V('total') + B().indices.sum() * C('k'))) << Dataset(6)
    experiment = (Experiment().add_pipeline('ppl', ppl.run_later(1, n_epochs=1, shuffle=False))
                  .save(E('ppl').v('total'), 'total', when='last'))
    runs = Executor(experiment, target='f', configs=[{'k': 1}, {'k': 10}], n_iters=6).run()
    assert [r.results['total'][5] for r in runs] == [15, 150]


def test_batchflow_get_metrics_unit_reads_the_pipeline_by_e_unit_pipeline():
    from flowpipe.research import get_metrics
    ppl = (Pipeline().init_variable('m')
           .gather_metrics('loss', loss=B().indices.mean() * 1.0, batch_len=B.size, save_to=V('m', mode='a'))
           ) << Dataset(6)
    experiment = (Experiment().add_pipeline('ppl', ppl.run_later(4, n_epochs=1, shuffle=False), when='last', run=True)
                  .add_callable(get_metrics, pipeline=E('ppl').pipeline, metrics_var='m', metrics_name='loss',
                                save_to='loss', when='last'))
    [running] = Executor(experiment, target='f', n_iters=1).run()
    assert running.exception is None and running.results['loss'] == {0: pytest.approx(2.5)}


def test_a_variable_a_pipeline_appends_to_is_recorded_as_it_is_at_each_iteration():
    ppl = (Pipeline().init_variable('sizes', []).update(V('sizes', mode='a'), B.size)) << Dataset(6)
    experiment = Experiment().add_pipeline('ppl', ppl.run_later(2, n_epochs=None), variables='sizes')
    [running] = Executor(experiment, target='f', n_iters=3).run()
    assert running.results['sizes'] == {0: [2], 1: [2, 2], 2: [2, 2, 2]}


def test_a_pipeline_whose_run_later_gives_no_limit_runs_until_the_research_stops_it():
    ppl = (Pipeline().init_variable('n', 0).update(V('n'), V('n') + 1)) << Dataset(6)
    experiment = Experiment().add_pipeline('ppl', ppl.run_later(2, n_epochs=None), variables='n')
    [running] = Executor(experiment, target='f', n_iters=7).run()
    assert running.results['n'] == {i: i + 1 for i in range(7)} and running.exception is None
    experiment = Experiment().add_pipeline('ppl', ppl.run_later(2, n_epochs=1), variables='n')
    [running] = Executor(experiment, target='f', n_iters=7).run()
    assert sorted(running.results['n']) == [0, 1, 2]        # one epoch of 3 batches, as run_later says


def test_save_to_length_mismatch_raises():
    experiment = Experiment().add_callable('f', lambda: (1, 2, 3), save_to=['a', 'b'])
    with pytest.raises(ValueError, match='to return 2 values'):
        Executor(experiment, target='f', n_iters=1, debug=True).run()


def test_bad_target_and_source():
    with pytest.raises(ValueError, match="target"):
        Executor(Experiment(), target='x')
    with pytest.raises(ValueError, match='instance.attribute'):
        Experiment().add_callable('nodot')
    with pytest.raises(ValueError, match='unit or an instance'):
        Executor(Experiment().add_callable('f', lambda x: x, x=E('ghost')), target='f', n_iters=1,
                 debug=True).run()



class Controller:
    """batchflow's controller form: the test pipeline imports the model of ``self.train_ppl``, a method reads
    ``self.test_ppl``'s variable and ``self.train_ppl``'s model; the model's width is the experiment's config."""

    def __init__(self):
        rng = np.random.default_rng(0)
        dataset = Dataset(12, preloaded={'x': rng.normal(size=(12, 3)).astype('float32'),
                                         'y': rng.integers(0, 2, 12)})
        config = {'inputs/x/shape': (3,), 'inputs/y/classes': 2, 'initial_block/inputs': 'x',
                  'body/units': (C('units'),)}
        self.train_ppl = (Pipeline().init_model('net', MLP, 'dynamic', config=config)
                          .train_model('net', x=B.x, y=B.y).run_later(4, n_iters=2)) << dataset
        self.test_ppl = (Pipeline().import_model('net', self.train_ppl).init_variable('seen', [])
                         .update(V('seen', mode='a'), M('net').iteration).run_later(4, n_epochs=1)) << dataset

    def seen(self):
        """The model's steps as the test pipeline saw them; the number of parameters of the trained model."""
        return self.test_ppl.v('seen'), sum(p.numel() for p in self.train_ppl.m('net').model.parameters())


def test_an_instances_pipelines_run_in_its_place_and_see_each_others_models():
    experiment = (Experiment().add_instance('controller', Controller)
                  .add_pipeline('controller.train_ppl')
                  .add_pipeline('controller.test_ppl', run=True, when='last')
                  .add_callable('controller.seen', when='last', save_to='seen'))
    runs = Executor(experiment, target='f', configs=[{'units': 5}, {'units': 7}], n_iters=None,
                    finalize=True).run()
    assert [run.exception for run in runs] == [None, None]
    # 3 inputs -> units -> 2 classes: 6 * units + 2 parameters; the test pipeline saw the model after 2 steps
    assert [run.results['seen'] for run in runs] == [{2: ([2, 2, 2], 32)}, {2: ([2, 2, 2], 44)}]


class Summer:
    def __init__(self):
        self.ppl = (Pipeline().init_variable('total', 0).update(V('total'), V('total') + C('k'))
                    .run_later(2, n_epochs=1)) << Dataset(4)


def test_a_root_instances_pipeline_run_by_each_branch_keeps_one_state_per_branch():
    experiment = Experiment().add_instance('summer', Summer, root=True).add_pipeline('summer.ppl', variables='total')
    runs = Executor(experiment, target='f', configs=[{'k': 1}, {'k': 10}], n_iters=2).run()
    assert [run.results['total'] for run in runs] == [{0: 1, 1: 2}, {0: 10, 1: 20}]
    assert runs[0].instances['summer'] is runs[1].instances['summer']
    assert runs[0].instances['summer'].ppl.v('total') == 0          # the shared instance's pipeline is left as it was


class Computed:
    @property
    def ppl(self):
        return (Pipeline().init_variable('total', 0).update(V('total'), V('total') + C('k'))
                .run_later(2, n_epochs=1)) << Dataset(4)


def test_an_instances_pipeline_given_by_a_property_runs_bound_to_the_config():
    experiment = Experiment().add_instance('computed', Computed).add_pipeline('computed.ppl', variables='total')
    [running] = Executor(experiment, target='f', configs=[{'k': 3}], n_iters=2).run()
    assert running.exception is None and running.results['total'] == {0: 3, 1: 6}
