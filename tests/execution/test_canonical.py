"""The canonical description of a run: whole values, evaluated model configs, the same in every process."""
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, C, D, Dataset, F, Pipeline
from flowpipe.execution.canonical import describe, differences, digest, flat, label
from flowpipe.execution.canonical_values import text
from flowpipe.execution.run import RunArgs


def _double(value):
    return value * 2


def test_values_are_written_whole_and_in_a_fixed_order():
    assert text((8,)) == '(8,)' and text([1, 2.5, None]) == '[1, 2.5, None]'
    assert text({'b': 1, 'a': {'d': 'x', 'c': (1, 2)}}) == "{'a': {'c': (1, 2), 'd': 'x'}, 'b': 1}"
    assert text({'zeta', 'alpha', 'mid'}) == "{'alpha', 'mid', 'zeta'}"
    assert text('x' * 200) == repr('x' * 200)
    assert text(np.arange(3)) == 'array([0, 1, 2], dtype=int64)'
    big, other = np.zeros(100), np.zeros(100)
    other[99] = 1
    assert text(big) != text(other) and 'shape=(100,)' in text(big)


def test_functions_by_name_and_lambdas_by_code():
    assert text(_double) == f'{__name__}._double'
    first, second, again = (lambda x: x + 1), (lambda x: x + 2), (lambda x: x + 1)
    assert text(first) != text(second) and text(first) == text(again)
    assert text(functools.partial(_double, 3)) == f'partial({__name__}._double, 3)'


def test_a_network_is_its_class_and_structure_not_its_weights():
    torch.manual_seed(0)
    one = nn.Linear(3, 2)
    two = nn.Linear(3, 2)
    assert text(one) == text(two) == 'torch.nn.modules.linear.Linear: Linear(in_features=3, out_features=2, bias=True)'
    assert text(nn.Linear(3, 4)) != text(one)


def test_expressions_by_structure():
    assert text(B.x * 2) == "B('x') * 2"
    assert text(F(_double)(B.x)) != text(F(lambda value: value)(B.x))
    assert text(F(_double)(B.x)).startswith("F(_double)(B('x')) [structure ")


def _trainer(**config):
    full = {'body': {'units': (8,)}, 'optimizer': {'name': 'SGD', 'lr': C('lr')}, 'inputs/x/shape': B.x.shape,
            'inputs/y/classes': D.size, **config}
    return Pipeline().init_model('net', config=full).train_model('net', x=B.x) << Dataset(10) << {'lr': 0.1}


def test_a_model_config_is_every_key_evaluated_where_it_can_be_before_the_first_batch():
    models = describe(_trainer(), RunArgs(batch_size=2))['models']
    assert models == {'net': {'body/units': '(8,)', 'optimizer/name': "'SGD'", 'optimizer/lr': '0.1',
                              'inputs/x/shape': "B('x').shape", 'inputs/y/classes': '10'}}


def test_differences_name_each_key_and_only_the_first_action_that_differs():
    mine = describe(_trainer().call(_double, 1).call(_double, 2), RunArgs(batch_size=2))
    other = describe((_trainer(body={'units': (16,)}) << {'lr': 0.5}).call(_double, 3).call(_double, 4),
                     RunArgs(batch_size=3))
    found = {label(key): values for key, values in differences([flat(mine), flat(other)])}
    assert found == {'batch_size': ['2', '3'], 'config lr': ['0.1', '0.5'],
                     "model 'net' body/units": ['(8,)', '(16,)'], "model 'net' optimizer/lr": ['0.1', '0.5'],
                     'action #2': [f'call({__name__}._double, 1)', f'call({__name__}._double, 3)']}
    assert digest(mine) == digest(json.loads(json.dumps(mine))) != digest(other)


_SCRIPT = '''
from flowpipe import Dataset, Pipeline
from flowpipe.execution.canonical import describe, digest
from flowpipe.execution.run import RunArgs
pipeline = Pipeline().init_model('net', config={'names': {'zeta', 'alpha', 'mid'}}).call(print, {'b', 'a'})
print(digest(describe(pipeline << Dataset(4), RunArgs(batch_size=2))))
'''


def test_the_digest_is_the_same_in_every_process():
    digests = set()
    for seed in ('1', '2'):
        env = {**os.environ, 'PYTHONHASHSEED': seed}
        done = subprocess.run([sys.executable, '-c', _SCRIPT], env=env, capture_output=True, text=True, check=True,
                              timeout=None)
        digests.add(done.stdout.strip())
    assert len(digests) == 1


@pytest.mark.parametrize('config', [{'model': nn.Linear(2, 2)}, {'units': np.ones(50)}])
def test_a_description_is_json(config):
    description = describe(Pipeline().init_model('net', config=config) << Dataset(4), RunArgs(batch_size=2))
    assert json.loads(json.dumps(description)) == description
