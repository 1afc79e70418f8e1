"""A training run with a checkpoint that a test stops with a signal: ``python signal_script.py FOLDER OUT DTYPE
[--at K]`` trains ``checkpoint_cases``' pipeline with checkpoints in FOLDER (resuming from them when there are
some) and saves the final state to OUT. With ``--at K`` it prints ``batch K`` when batch K's training step is
done and waits for a line on its standard input before going on (the test sends its signal in between)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_cases as cases  # noqa: E402
from flowpipe import Checkpoint, I  # noqa: E402

#: the batch at which the run reports and waits; outside the pipeline's definition, so a resume sees the same one
PAUSE = {'at': None}


def pause(number):
    if number == PAUSE['at']:
        print(f'batch {number}', flush=True)
        sys.stdin.readline()


def pipeline():
    return cases.pipeline().call(pause, I('c'))


def main(folder, out, dtype, at):
    torch.set_num_threads(1)
    torch.set_default_dtype(getattr(torch, dtype))
    PAUSE['at'] = at
    done = pipeline().run(**cases.RUN, prefetch=2, checkpoint=Checkpoint(folder, every=100), resume=True)
    torch.save(cases.outcome(done), out)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5]) if '--at' in sys.argv else None)
