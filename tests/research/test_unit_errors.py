"""A unit whose function yields where a value is to be saved fails its own experiment, recorded with the fix,
instead of ending the whole research with "cannot pickle 'generator' object" when its record is stored."""
from flowpipe.research import EC, Option, Research


def unit(lr):
    yield lr                # a generator function given to add_callable


def plain(lr):
    return lr


def test_a_unit_returning_a_generator_fails_its_experiment_naming_the_fix(tmp_path):
    research = Research(name=str(tmp_path / 'r'), domain=Option('lr', [0.1])).add_callable(
        'step', unit, lr=EC('lr'), save_to='value').add_callable('other', plain, lr=EC('lr'), save_to='copy')
    research.run(n_iters=1, parallel=False, bar=False)
    failures = research.monitor.exceptions
    assert len(failures) == 1
    assert ("TypeError: Expected unit 'step' to return a value to save as 'value'. Received: a generator"
            in failures[0]['traceback'])
    assert 'add_generator(...)' in failures[0]['traceback']


def test_a_generator_unit_takes_one_item_per_iteration(tmp_path):
    def counting(lr):
        for step in range(3):
            yield lr * step
    research = Research(name=str(tmp_path / 'r'), domain=Option('lr', [1.0])).add_generator(
        'step', counting, lr=EC('lr'), save_to='value')
    research.run(n_iters=3, parallel=False, bar=False)
    assert not research.monitor.exceptions
    assert sorted(research.results.df['value']) == [0.0, 1.0, 2.0]
