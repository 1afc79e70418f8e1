"""A character corpus for ``examples/nanogpt.py``, made from text every Python installation holds: the standard
library's own ``.py`` files, in sorted order, kept to ASCII, until ``--chars`` characters. It writes what nanoGPT's
``data/shakespeare_char/prepare.py`` writes: ``train.bin`` (the first 90 %) and ``val.bin`` (the rest) as uint16
character ids, and ``meta.pkl`` with ``vocab_size``, ``itos`` and ``stoi``.

    python examples/nanogpt_prepare.py --out data/pychars --chars 1000000
"""
import argparse
import os
import pickle
import sysconfig
from pathlib import Path

import numpy as np


def corpus(chars: int) -> str:
    """The first ``chars`` ASCII characters of the standard library's ``.py`` files, in sorted path order."""
    parts, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()['stdlib']).glob('*.py')):
        text = path.read_text(encoding='utf-8', errors='ignore').encode('ascii', errors='ignore').decode()
        parts.append(text[:chars - total])
        total += len(parts[-1])
        if total >= chars:
            break
    return ''.join(parts)


def prepare(out: str, chars: int = 1_000_000) -> dict:
    """Write ``train.bin``, ``val.bin`` and ``meta.pkl`` into ``out``; the meta."""
    data = corpus(chars)
    itos = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(itos)}
    ids = np.array([stoi[ch] for ch in data], dtype=np.uint16)
    cut = int(len(ids) * 0.9)
    os.makedirs(out, exist_ok=True)
    ids[:cut].tofile(os.path.join(out, 'train.bin'))
    ids[cut:].tofile(os.path.join(out, 'val.bin'))
    meta = {'vocab_size': len(itos), 'itos': dict(enumerate(itos)), 'stoi': stoi}
    with open(os.path.join(out, 'meta.pkl'), 'wb') as file:
        pickle.dump(meta, file)
    return meta


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', required=True)
    parser.add_argument('--chars', type=int, default=1_000_000)
    args = parser.parse_args()
    meta = prepare(args.out, args.chars)
    print(f"vocab_size={meta['vocab_size']} chars={args.chars} out={args.out}")
