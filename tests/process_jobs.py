"""Targets for ``test_processes.py``'s child processes, and a script: ``python process_jobs.py CHECKPOINTS MARKS``
yields a ``target='processes'`` run's batches with checkpoints in CHECKPOINTS (resuming from them), printing each
batch's items; its workers touch ``MARKS/began-<batch>`` as they start one."""
import os
import sys
import threading
import time

import numpy as np


def obey(tasks, ready):
    """End at the first message."""
    ready.set()
    tasks.get()


def hang(tasks, ready):
    """Never read the task queue, never end."""
    ready.set()
    threading.Event().wait()


def hang_writing(path):
    """Write this process's pid to ``path``, then never end."""
    with open(path, 'a') as file:
        file.write(f'{os.getpid()}\n')
    threading.Event().wait()


def _mark(folder, number):
    open(os.path.join(folder, f'began-{number}'), 'w').close()
    time.sleep(0.2)


def pipeline(marks):
    from flowpipe import B, Dataset, I
    dataset = Dataset(32, preloaded={'x': np.arange(32.0)})
    return dataset.p.call(_mark, marks, I('c')).update(B.x, B.x * 2)


def main(checkpoints, marks):
    from flowpipe import Checkpoint
    batches = pipeline(marks).gen_batch(4, n_epochs=3, shuffle=3, prefetch=2, target='processes',
                                        checkpoint=Checkpoint(checkpoints, every=100), resume=True)
    for batch in batches:
        print(batch.x.tolist(), flush=True)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
