"""A pipelined run's checkpoint resumes on another layout, and a one-process or DDP checkpoint resumes pipelined:
2 stages on 2 gloo processes resumed in one process and under DDP on 2; a one-process and a DDP checkpoint
resumed as 2 stages on 2; 2 pipelines of 2 stages on 4 resumed as one pipeline of 3 stages on 3 and under DDP on 2,
2 stages on 2 resumed as 2 x 2 on 4. Each continued run ends with the parameters and losses of the run never
stopped (float64, 1e-10 relative, under a float32 and a float64 default dtype), each pipelined rank holds its stage
only, and the lists of items hold every item once, as ``relayout.rank_state`` shares them out."""
import shutil

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import pipeline_relayout_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
STAGE_1 = ['2.bias', '2.weight', '4.bias', '4.weight']           # by parameter bytes: ['0'] | ['1', ..., '4']


@pytest.fixture(scope='module')
def reference(default_dtype):
    return jobs.train()


@pytest.fixture(scope='module')
def written(tmp_path_factory, default_dtype):
    """The stopped runs: 'one' in one process, 'pp' (2 stages), 'ddp' and 'dropout' (2 stages, masks by item) on 2
    ranks; their results by name."""
    root = tmp_path_factory.mktemp('written')
    done = {'one': [jobs.train(str(root / 'one'), jobs.STOP_AT)]}
    ranks = launch(jobs.runs, 2, args=([('pp', (str(root / 'pp'), {'stages': 2}, None)),
                                        ('ddp', (str(root / 'ddp'), {}, None)),
                                        ('dropout', (str(root / 'dropout'), {'stages': 2, 'dropout': True}, None))],),
                   timeout=TIMEOUT)
    done.update({name: [rank[name] for rank in ranks] for name in ('pp', 'ddp', 'dropout')})
    return root, done


def _copy(written, name, tmp_path):
    shutil.copytree(written[0] / name, tmp_path / name)
    return str(tmp_path / name)


def _continues(result, reference, before):
    """The uninterrupted run's parameters and losses; the lists ``before`` (per part) come first."""
    for name, value in reference['params'].items():
        assert float(np.max(np.abs(result['params'][name] - value)) / np.max(np.abs(value))) < 1e-10, name
    np.testing.assert_allclose(result['loss'], reference['loss'], rtol=1e-10)
    for got, want in zip(result['ids'], before):
        np.testing.assert_array_equal(got, want)


def _parts(results):
    """The lists every part read before the stop, part after part (a pipeline's first stage reads its part)."""
    return [ids for result in results for ids in result['ids']]


@pytest.mark.parametrize('stages', [2, None])
def test_a_pipelined_checkpoint_resumes_in_one_process(written, reference, tmp_path, stages):
    result = jobs.train(_copy(written, 'pp', tmp_path), stages=stages)
    _continues(result, reference, reference['ids'])          # the pipeline read whole batches: one part
    assert len(result['ids']) == len(reference['ids'])
    np.testing.assert_array_equal(np.concatenate(result['draws']), np.concatenate(reference['draws']))


def test_a_pipelined_checkpoint_with_dropout_by_item_resumes_in_one_process(written, tmp_path):
    result = jobs.train(_copy(written, 'dropout', tmp_path), dropout=True)
    _continues(result, jobs.train(dropout=True), written[1]['dropout'][0]['ids'])


@pytest.fixture(scope='module')
def on_two(written, tmp_path_factory):
    copy = tmp_path_factory.mktemp('two')
    jobs_ = [('pp-ddp', (_copy(written, 'pp', copy), None, {})),
             ('ddp-pp', (_copy(written, 'ddp', copy), None, {'stages': 2})),
             ('one-pp', (_copy(written, 'one', copy), None, {'stages': 2})),
             ('dropout-ddp', (_copy(written, 'dropout', copy), None, {'dropout': True}))]
    return launch(jobs.runs, 2, args=(jobs_,), timeout=TIMEOUT)


def test_a_pipelined_checkpoint_resumes_under_ddp(written, reference, on_two):
    for rank in range(2):
        result = on_two[rank]['pp-ddp']
        _continues(result, reference, reference['ids'][:jobs.STOP_AT])    # the whole batches, then its halves
        assert result['stages'] is None and len(result['held']) == len(reference['params'])
    for batch, whole in enumerate(reference['ids'][jobs.STOP_AT:]):
        halves = [on_two[rank]['pp-ddp']['ids'][jobs.STOP_AT + batch] for rank in range(2)]
        np.testing.assert_array_equal(np.concatenate(halves), whole)


def test_a_pipelined_checkpoint_with_dropout_by_item_resumes_under_ddp(on_two):
    reference = jobs.train(dropout=True)
    for rank in range(2):
        _continues(on_two[rank]['dropout-ddp'], reference, reference['ids'][:jobs.STOP_AT])


@pytest.mark.parametrize('name', ['ddp-pp', 'one-pp'])
def test_a_one_process_or_ddp_checkpoint_resumes_pipelined(written, reference, on_two, name):
    before = _parts(written[1][name.split('-')[0]])              # DDP's two parts merged, or one process's
    for rank in range(2):
        result = on_two[rank][name]
        _continues(result, reference, before)
        assert result['stages'] == 2 and (result['held'] == STAGE_1) == (rank == 1)
        assert len(result['ids']) == len(before) + len(reference['ids']) - jobs.STOP_AT
        for got, want in zip(result['ids'][len(before):], reference['ids'][jobs.STOP_AT:]):
            np.testing.assert_array_equal(got, want)     # one pipeline: every stage reads the whole later batches


@pytest.fixture(scope='module')
def on_four(written, tmp_path_factory):
    """2 x 2 on 4 written, while 2 stages on 2 resume as 2 x 2 on 4; its checkpoint's folder."""
    root = tmp_path_factory.mktemp('four')
    jobs_ = [('2x2', (str(root / '2x2'), {'stages': 2}, None)),
             ('pp-2x2', (_copy(written, 'pp', root), None, {'stages': 2}))]
    return launch(jobs.runs, 4, args=(jobs_,), timeout=TIMEOUT), root / '2x2'


def test_two_stages_resume_as_two_pipelines_of_two_stages(written, reference, on_four):
    resumed = on_four[0]
    for rank in range(4):
        result = resumed[rank]['pp-2x2']
        _continues(result, reference, reference['ids'][:jobs.STOP_AT])
        assert (result['held'] == STAGE_1) == (rank >= 2)
    for batch, whole in enumerate(reference['ids'][jobs.STOP_AT:]):      # pipelines (0, 2) and (1, 3)
        np.testing.assert_array_equal(resumed[0]['pp-2x2']['ids'][jobs.STOP_AT + batch],
                                      resumed[2]['pp-2x2']['ids'][jobs.STOP_AT + batch])
        parts = [resumed[rank]['pp-2x2']['ids'][jobs.STOP_AT + batch] for rank in (0, 1)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_two_pipelines_of_two_stages_resume_as_one_pipeline_of_three(reference, on_four, tmp_path):
    written, folder = on_four
    resumed = launch(jobs.runs, 3, args=([('3', (_copy((folder.parent,), '2x2', tmp_path), None,
                                                 {'stages': 3}))],), timeout=TIMEOUT)
    before = _parts([rank['2x2'] for rank in written[:2]])      # ranks 0 and 1: the pipelines' first stages
    for rank in range(3):
        result = resumed[rank]['3']
        _continues(result, reference, before)
        assert result['stages'] == 3 and len(result['held']) == 2       # stages ['0'], ['1', '2'], ['3', '4']
        assert len(result['ids']) == len(before) + len(reference['ids']) - jobs.STOP_AT


def test_two_pipelines_of_two_stages_resume_under_ddp_on_two(reference, on_four, tmp_path):
    written, folder = on_four
    resumed = launch(jobs.runs, 2, args=([('ddp', (_copy((folder.parent,), '2x2', tmp_path), None, {}))],),
                     timeout=TIMEOUT)
    for rank in range(2):        # as many parts: each DDP rank continues its pipeline's lists
        _continues(resumed[rank]['ddp'], reference, written[rank]['2x2']['ids'])
        assert len(resumed[rank]['ddp']['ids']) == len(reference['ids'])


def test_sharded_checkpoints_of_a_pipelined_model_are_refused_naming_the_fix(tmp_path):
    for errors in launch(jobs.sharded_refused, 2, args=(str(tmp_path),), timeout=TIMEOUT):
        assert len(errors) == 2          # writing under the pipeline, and resuming DDP's shards pipelined
        for error in errors:
            assert 'Received: Checkpoint(sharded=True) shards to write or read for a model with pipeline=2' in error
            assert 'Drop sharded=True' in error
