"""A script run by ``torchrun`` in the tests: trains as ``dist_jobs.train`` does and writes each rank's result.

Usage: ``torchrun ... tests/parallel/torchrun_script.py OUT_DIR`` (the repository root on ``PYTHONPATH``).
"""
import os
import sys

import dill

from tests.parallel import dist_jobs

if __name__ == '__main__':
    result = dist_jobs.scenarios([('whole', {'batch_size': 7}), ('microbatch', {'batch_size': 5, 'microbatch': 2})])
    with open(os.path.join(sys.argv[1], f'rank{os.environ["RANK"]}.pkl'), 'wb') as file:
        dill.dump(result, file)
