"""Writes a stand-in for CIFAR-10's archive: ``cifar-10-python.tar.gz`` in the publisher's layout (a
``cifar-10-batches-py`` folder with ``data_batch_1`` ... ``data_batch_5`` and ``test_batch``, each a pickled dict
of ``b'data'``, N x 3072 uint8, and ``b'labels'``), holding a few random images with random labels.

Test-only: ``scripts/batchflow_compat.sh`` puts it where batchflow's ``CIFAR10()`` (the system's temporary folder)
and flowpipe's (``$FLOWPIPE_DATA/cifar10``) look for the archive, for both the batchflow reference run and the
flowpipe run, so that batchflow's Research tests that train on ``CIFAR10()`` run on a machine without network.
It is not CIFAR-10 and nothing learns from it; it only has CIFAR-10's format.

Usage: python cifar10_standin.py FOLDER [IMAGES_PER_FILE]
"""
import io
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np

NAMES = (*(f'data_batch_{i}' for i in range(1, 6)), 'test_batch')


def write(folder: str, per_file: int = 32, seed: int = 0) -> Path:
    """Writes ``FOLDER/cifar-10-python.tar.gz`` with ``per_file`` random images in each of the six batches."""
    rng = np.random.default_rng(seed)
    path = Path(folder) / 'cifar-10-python.tar.gz'
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, 'w:gz') as archive:
        for name in NAMES:
            content = {b'batch_label': f'stand-in {name}'.encode(),
                       b'data': rng.integers(0, 256, (per_file, 3 * 32 * 32), dtype=np.uint8),
                       b'labels': rng.integers(0, 10, per_file).tolist()}
            raw = pickle.dumps(content, protocol=2)
            member = tarfile.TarInfo(f'cifar-10-batches-py/{name}')
            member.size = len(raw)
            archive.addfile(member, io.BytesIO(raw))
    return path


if __name__ == '__main__':
    write(sys.argv[1], *map(int, sys.argv[2:3]))
