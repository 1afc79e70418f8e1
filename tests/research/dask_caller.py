"""Run by the tests of a research on a Dask cluster of separate processes (the repository root on ``PYTHONPATH``):
``python tests/research/dask_caller.py ADDRESS NAME FOLDER`` runs ``dask_jobs.research(NAME, FOLDER)`` with 2 tasks in
flight on the cluster at ``ADDRESS``, and prints ``done`` and its ``dask_jobs.table``."""
import sys

from tests.research import dask_jobs

if __name__ == '__main__':
    address, name, folder = sys.argv[1:4]
    research = dask_jobs.research(name, folder).run(n_iters=1, workers=2, bar=False, seed=5, executor=address)
    print('done', dask_jobs.table(research), flush=True)
