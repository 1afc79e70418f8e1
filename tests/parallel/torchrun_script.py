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
    # The results are written: leave without the interpreter's finalization, as launch()'s workers do. torch keeps
    # a DDP job's gloo threads alive to the end, and one that releases a collective's tensors while Python finalizes
    # aborts the process (see docs/distributed.md), which torchrun would report as a failed job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
