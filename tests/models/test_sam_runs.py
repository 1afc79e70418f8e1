"""SAM and weight averaging in whole runs: config keys, checkpoints resumed bit-exactly, distributed jobs."""
import copy

import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, I, Pipeline, V
from flowpipe.models.torch import TorchModel
from flowpipe.parallel import launch

from ..parallel.test_sam import sam_reference
from . import sam_jobs

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


class Crash(Exception):
    """The failure a test injects into a run."""


#: the batch at which `crash` raises (set by the test: the pipeline's definition must not change on resume)
TRIGGER = {'at': None}


def crash(number):
    if number == TRIGGER['at']:
        raise Crash(f'batch {number}')


def model_config(**extra):
    return {'model': sam_jobs.network(), 'inputs/x/shape': (sam_jobs.N_FEATURES,),
            'inputs/y/classes': sam_jobs.N_CLASSES, 'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': 0.5,
                                                                                'momentum': 0.9}, **extra}


@pytest.mark.parametrize('individual', [True, False])
def test_the_config_keys_make_every_step_a_sam_step(individual):
    x, y = sam_jobs.global_batch()
    expected, losses = sam_reference(sam_jobs.network(), x, y, individual, steps=2)
    model = TorchModel(model_config(sam_rho=sam_jobs.RHO, sam_individual_norm=individual,
                                    device=['CPU:0', 'CPU:1'], microbatch=5))
    with model:
        fetched = [model.train(x=x, y=y, fetches='loss') for _ in range(2)]
        assert fetched == pytest.approx(losses, rel=1e-12)
        for a, b in zip(model.model.parameters(), expected.parameters()):
            torch.testing.assert_close(a.detach(), b, rtol=1e-12, atol=1e-12)


def test_train_keywords_override_the_config_for_one_step():
    x, y = sam_jobs.global_batch()
    expected, _ = sam_reference(sam_jobs.network(), x, y, False)
    model = TorchModel(model_config())
    model.train(x=x, y=y, sam_rho=sam_jobs.RHO, sam_individual_norm=False)
    for a, b in zip(model.model.parameters(), expected.parameters()):
        torch.testing.assert_close(a.detach(), b, rtol=1e-12, atol=1e-12)
    assert model.sam is None and 'sam=' not in repr(model)
    assert 'sam=Sam(rho=0.05, individual_norm=False)' in repr(TorchModel(model_config(sam_rho=0.05,
                                                                                     sam_individual_norm=False)))
    with pytest.raises(ValueError, match='sam_rho'):
        TorchModel(model_config(sam_rho=-1))


def run_pipeline():
    rng = np.random.default_rng(0)
    n = 30
    dataset = Dataset(n, preloaded={'x': rng.normal(size=(n, sam_jobs.N_FEATURES)),
                                    'y': rng.integers(0, sam_jobs.N_CLASSES, n)})
    config = model_config(device=['CPU:0', 'CPU:1'], microbatch=3, sam_rho=sam_jobs.RHO,
                          optimizer={'name': 'Adam', 'lr': 0.01}, decay={'name': 'exp', 'gamma': 0.9},
                          weights_averaging={'start_iter': 2, 'last_iter': 9, 'frequency': 2,
                                             'swalr': {'swa_lr': 0.001, 'anneal_epochs': 2}})
    config['model'].insert(2, torch.nn.Dropout(0.2))
    return (Pipeline().init_variable('loss', []).init_model('net', config=config)
            .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
            .call(crash, I('c'))) << dataset


def outcome(done):
    model = done.m('net')
    state = {'params': [p.detach().clone() for p in model.model.parameters()],
             'averaging': copy.deepcopy(model.averaging.state()), 'loss': list(done.v('loss')),
             'lr': model.optimizer.param_groups[0]['lr']}
    model.close()
    return state


def test_a_run_resumed_mid_run_ends_bit_exactly_as_the_uninterrupted_one(tmp_path):
    run = {'batch_size': 4, 'n_epochs': 2, 'shuffle': 5}           # 16 batches: the network takes the average at 9
    reference = outcome(run_pipeline().run(**run))
    assert reference['averaging']['iterations'] == [2, 4, 6, 8, 9] and reference['averaging']['finalized']
    TRIGGER['at'] = 5
    try:
        with pytest.raises(Crash):
            run_pipeline().run(**run, checkpoint=tmp_path)
    finally:
        TRIGGER['at'] = None
    resumed = outcome(run_pipeline().run(**run, checkpoint=tmp_path, resume=True))
    assert resumed['loss'] == reference['loss'] and resumed['lr'] == reference['lr']
    assert all(torch.equal(a, b) for a, b in zip(resumed['params'], reference['params']))
    assert resumed['averaging']['iterations'] == reference['averaging']['iterations']
    for key, value in reference['averaging']['averaged'].items():
        assert torch.equal(resumed['averaging']['averaged'][key], value), key
    assert resumed['averaging']['swalr'] == reference['averaging']['swalr']


@pytest.mark.slow
@pytest.mark.parametrize('individual', [True, False])
def test_two_launched_ranks_take_the_hand_written_sam_step(individual):
    x, y = sam_jobs.global_batch()
    expected, losses = sam_reference(sam_jobs.network(), x, y, individual, steps=2)
    for microbatch in (None, 2):
        ranks = launch(sam_jobs.engine_steps, 2, args=(individual,), kwargs={'microbatch': microbatch},
                       timeout=TIMEOUT)
        for result in ranks:
            np.testing.assert_allclose(result['losses'], losses, rtol=1e-12)
            for a, b in zip(result['params'], expected.parameters()):
                np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_every_rank_holds_the_same_average_as_one_process():
    alone = sam_jobs.averaged_run(microbatch=2)
    ranks = launch(sam_jobs.averaged_run, 2, kwargs={'microbatch': 2}, timeout=TIMEOUT)
    first, second = ranks
    assert all(np.array_equal(a, b) for a, b in zip(first['averaged'], second['averaged']))
    assert all(np.array_equal(a, b) for a, b in zip(first['params'], second['params']))
    assert first['updates'] == second['updates'] == alone['updates']
    for a, b in zip(first['averaged'], alone['averaged']):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(first['loss'], alone['loss'], rtol=1e-10)
    assert first['lr'] == pytest.approx(alone['lr'], rel=1e-12)
