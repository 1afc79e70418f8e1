"""The SPEC §9 program, as written, under ``torchrun --standalone --nproc_per_node=2`` (gloo on 127.0.0.1), then
``MLP.from_file('sharded.model')`` in this one plain process predicts what the sharded model predicted."""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 900

PROGRAM = """
from flowpipe import Pipeline, B, V, D
from flowpipe.opensets import Digits
from flowpipe.models.torch import MLP

config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
          'initial_block/inputs': 'images', 'body/units': (256, 256), 'sharding': 'full',
          'optimizer': 'Adam'}
train = (Pipeline()
         .init_variable('loss', [])
         .init_model('net', MLP, config=config)
         .to_array().multiply(1 / 255)
         .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss', mode='a'))
         ) << Digits().train
train.run(64, n_epochs=2, shuffle=3)
print(train.m('net').device_plan())      # says: sharded, the mesh, bytes per rank
train.m('net').save('sharded.model')     # every rank calls it; the full state is written once
"""

# the test's own lines after the program: what the sharded model predicts for the test set (each rank its shard,
# gathered on rank 0), then leave without the interpreter's finalization, as the torchrun test scripts do
PREDICT = """
import os, sys
import numpy as np
from flowpipe.parallel import distributed
test = (Pipeline().import_model('net', train).init_variable('proba', []).to_array().multiply(1 / 255)
        .predict_model('net', images=B.images, fetches='proba', save_to=V('proba', mode='a'))) << Digits().test
test.run(100)
proba = distributed.gather_batches(test.v('proba'))
if distributed.is_main():
    np.save('sharded_proba.npy', proba)
sys.stdout.flush()
os._exit(0)
"""


def predict_in_one_process(path):
    from flowpipe import B, Pipeline, V
    from flowpipe.models.torch import MLP
    from flowpipe.opensets import Digits
    model = MLP.from_file(path)
    test = (Pipeline().import_model('net', model).init_variable('proba', []).to_array().multiply(1 / 255)
            .predict_model('net', images=B.images, fetches='proba', save_to=V('proba', mode='a'))) << Digits().test
    test.run(100)
    return np.concatenate(test.v('proba'))


@pytest.mark.slow
def test_the_sharded_program_runs_under_torchrun_and_its_model_loads_in_one_process(tmp_path):
    script = tmp_path / 'program.py'
    script.write_text(PROGRAM + PREDICT)
    env = {**os.environ, 'PYTHONPATH': ROOT, 'MASTER_ADDR': '127.0.0.1', 'GLOO_SOCKET_IFNAME': 'lo',
           'FLOWPIPE_DIST_TIMEOUT': '300', 'OMP_NUM_THREADS': '1'}
    done = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                           str(script)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-4000:]
    for said in ("sharding 'full'", 'mesh: 1-D, 2 ranks', 'this rank holds: parameters'):     # the printed plan
        assert said in done.stdout, done.stdout[-3000:]
    assert sorted(name for name in os.listdir(tmp_path) if name.startswith('sharded')) == [
        'sharded.model', 'sharded_proba.npy']
    sharded = np.load(tmp_path / 'sharded_proba.npy')
    proba = predict_in_one_process(str(tmp_path / 'sharded.model'))
    assert proba.shape == sharded.shape and proba.shape[1] == 10
    np.testing.assert_allclose(proba, sharded, rtol=1e-5, atol=1e-6)
