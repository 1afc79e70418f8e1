"""The ports in ``examples/`` run on small settings and end with ``accuracy=<share> steps=<optimizer steps>``
(``imagenet.py``: ``top1=<share> top5=<share> best=<share> steps=<optimizer steps>``). Its exact resume and
``scripts/mnist_reference.py`` are slow-marked (run in CI)."""
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flowpipe.models.torch import ResNet18

ROOT = Path(__file__).resolve().parents[1]
SHARE = r'(0\.\d+|1\.0+)'
LAST_LINE = re.compile(rf'accuracy={SHARE} steps=(\d+)')
IMAGENET_LINE = re.compile(rf'top1={SHARE} top5={SHARE} best={SHARE} steps=(\d+)')


def run_script(path: Path, *args: str) -> list[str]:
    """Run a script of this checkout as a user would, with this checkout's flowpipe; the lines it printed."""
    env = {**os.environ, 'PYTHONPATH': f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def launch(name: str, *args: str) -> str:
    """Run ``examples/<name>``; its last printed line."""
    return (run_script(ROOT / 'examples' / name, *args) or [''])[-1]


def run_example(name: str, *args: str) -> tuple[float, int, str]:
    """Run ``examples/<name>``; its test accuracy, optimizer steps and last line."""
    last = launch(name, *args)
    match = LAST_LINE.fullmatch(last)
    assert match, f"unexpected last line {last!r}"
    return float(match[1]), int(match[2]), last


def test_pytorch_mnist_takes_dataloaders_steps_and_learns():
    # 330 items in batches of 64 are 6 batches per epoch (the last one of 10 items), as DataLoader makes them:
    # 12 steps in 2 epochs, where one stream cut across the epochs would take ceil(660 / 64) = 11
    accuracy, steps, _ = run_example('pytorch_mnist.py', '--epochs', '2', '--subset', '330', '--seed', '3')
    assert steps == 2 * math.ceil(330 / 64) == 12
    assert accuracy > 0.3         # chance is 0.1 over ten digits
    # the variants docs/porting.md compares: one stream of batches cut across the epochs
    _, steps, _ = run_example('pytorch_mnist.py', '--epochs', '2', '--subset', '330', '--seed', '3',
                              '--no-whole-epochs', '--no-shuffle', '--randomness', 'torch')
    assert steps == math.ceil(2 * 330 / 64) == 11


@pytest.mark.slow
def test_mnist_reference_loop_takes_dataloaders_steps_and_learns():
    # scripts/mnist_reference.py: the original's loop in plain PyTorch, on all 1,437 training digits
    lines = run_script(ROOT / 'scripts' / 'mnist_reference.py', '--epochs', '1', '--seeds', '2')
    assert len(lines) == 1
    match = re.fullmatch(rf'seed=2 accuracy={SHARE} steps=(\d+)', lines[0])
    assert match, f"unexpected line {lines[0]!r}"
    assert int(match[2]) == math.ceil(1437 / 64) == 23 and float(match[1]) > 0.3


def test_keras_mlp_learns_and_gives_the_same_numbers_on_every_layout():
    # 400 training items: 320 trained on in batches of 256 (2 per epoch), 80 validated; 400 test items
    lines = {}
    for layout in ('single', 'data', 'model'):
        accuracy, steps, lines[layout] = run_example('keras_mnist_mlp.py', '--epochs', '3', '--subset', '400',
                                                     '--layout', layout)
        assert steps == 3 * math.ceil(320 / 256) == 6
        assert accuracy > 0.2         # chance is 0.1
    assert lines['data'] == lines['single'] == lines['model']


def run_imagenet(*args: str) -> tuple[dict[str, float], str]:
    """Run ``examples/imagenet.py``; the numbers of its last line (top1, top5, best, steps) and the line."""
    last = launch('imagenet.py', *args)
    match = IMAGENET_LINE.fullmatch(last)
    assert match, f"unexpected last line {last!r}"
    return dict(zip(('top1', 'top5', 'best', 'steps'), map(float, match.groups()))), last


def best_weights(folder: Path) -> tuple[str, dict]:
    """The one model file ``ModelCheckpoint`` kept in ``folder/best``, loaded: its name and its weights."""
    files = sorted((folder / 'best').glob('*.model'))
    assert len(files) == 1, files
    return files[0].name, ResNet18.from_file(str(files[0])).model.state_dict()


SMALL = ('--image-size', '16', '--width', '8', '-b', '16', '--lr', '0.02', '--seed', '0')


@pytest.fixture(scope='module')
def imagenet(tmp_path_factory) -> tuple[Path, dict[str, float], str]:
    """A Digits ImageFolder made by ``--make-data`` (6 classes of 8 images) and a 2-epoch run on it: the folder
    (``data/``, ``whole/``: that run's checkpoints), the run's numbers and its last line."""
    folder = tmp_path_factory.mktemp('imagenet')
    launch('imagenet.py', '--make-data', str(folder / 'data'), '--classes', '6', '--per-class', '8')
    numbers, line = run_imagenet('--data', str(folder / 'data'), *SMALL, '--epochs', '2',
                                 '--checkpoints', str(folder / 'whole'))
    return folder, numbers, line


def test_imagenet_trains_on_a_made_imagefolder_and_keeps_the_best_model(imagenet):
    folder, whole, _ = imagenet
    assert sorted(path.name for path in (folder / 'data' / 'val').iterdir()) == [str(digit) for digit in range(6)]
    # 48 training images in batches of 16: 3 steps per epoch
    assert whole['steps'] == 2 * math.ceil(48 / 16) == 6
    assert 0 <= whole['top1'] <= whole['top5'] <= 1 and whole['top1'] <= whole['best']
    name, _ = best_weights(folder / 'whole')
    # the best file validates to the best epoch's top-1
    evaluated, _ = run_imagenet('--data', str(folder / 'data'), *SMALL,
                                '--evaluate', str(folder / 'whole' / 'best' / name))
    epoch = int(name.removeprefix('epoch-').removesuffix('.model'))
    assert evaluated['top1'] == whole['best'] and evaluated['steps'] == 3 * (epoch + 1)


@pytest.mark.slow
def test_imagenet_resumes_a_shorter_run_to_the_uninterrupted_one(imagenet):
    folder, _, whole_line = imagenet
    common = ('--data', str(folder / 'data'), *SMALL, '--checkpoints', str(folder / 'resumed'))
    shorter, _ = run_imagenet(*common, '--epochs', '1', '-j', '0')
    assert shorter['steps'] == 3
    _, resumed_line = run_imagenet(*common, '--epochs', '2', '--resume')
    assert resumed_line == whole_line
    name, weights = best_weights(folder / 'whole')
    resumed_name, resumed_weights = best_weights(folder / 'resumed')
    assert resumed_name == name and weights.keys() == resumed_weights.keys()
    assert all(torch.equal(weights[key], resumed_weights[key]) for key in weights)


NANOGPT_LINE = re.compile(r'val=(\d+\.\d+) best=(\d+\.\d+) steps=(\d+) tokens=(\d+) full_val=(\d+\.\d+)')
NANOGPT_SMALL = ('--seed', '3', '--max_iters=24', '--eval_interval=8', '--eval_iters=3', '--n_layer=2', '--n_head=2',
                 '--n_embd=32', '--block_size=16', '--batch_size=6', '--gradient_accumulation_steps=2',
                 '--lr_decay_iters=24', '--warmup_iters=4', '--learning_rate=3e-3', '--log_interval=8')


@pytest.fixture(scope='module')
def pychars(tmp_path_factory) -> Path:
    """The character corpus ``examples/nanogpt_prepare.py`` makes of Python's own sources, 60,000 characters."""
    folder = tmp_path_factory.mktemp('pychars')
    lines = run_script(ROOT / 'examples' / 'nanogpt_prepare.py', '--out', str(folder), '--chars', '60000')
    assert re.fullmatch(r'vocab_size=\d+ chars=60000 out=.*', lines[-1])
    return folder


def run_nanogpt(data: Path, out: Path, *args: str, command: tuple = ()) -> tuple[dict[str, float], list[str]]:
    lines = (subprocess.run([*command, str(ROOT / 'examples' / 'nanogpt.py'), '--data', str(data), '--out_dir',
                             str(out), *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, 'PYTHONPATH': str(ROOT)}, check=True).stdout.strip().splitlines()
             if command else run_script(ROOT / 'examples' / 'nanogpt.py', '--data', str(data), '--out_dir', str(out),
                                        *args))
    match = NANOGPT_LINE.fullmatch(lines[-1])
    assert match, f"unexpected last line {lines[-1]!r}"
    return dict(zip(('val', 'best', 'steps', 'tokens', 'full_val'), map(float, match.groups()))), lines


def test_nanogpt_trains_on_the_made_corpus_and_prints_its_figures(pychars, tmp_path):
    import numpy as np
    numbers, lines = run_nanogpt(pychars, tmp_path, *NANOGPT_SMALL)
    assert numbers['steps'] == 24 and numbers['tokens'] == 24 * 6 * 2 * 16
    vocab = len(set(np.fromfile(pychars / 'train.bin', dtype=np.uint16)) | set(
        np.fromfile(pychars / 'val.bin', dtype=np.uint16)))
    assert numbers['full_val'] < math.log(vocab) - 0.5 and numbers['best'] <= numbers['val']   # it learned
    # estimates at steps 0, 8, 16, 24, one step line each 8 steps, the best file of the best estimate
    assert [line.split(' – ')[0] for line in lines if line.startswith('step ')] == [
        'step 0/24', 'step 8/24', 'step 16/24', 'step 24/24']
    assert sum(line.startswith('iter ') for line in lines) == 3
    assert len(list((tmp_path / 'best').glob('step-*.model'))) == 1


def test_nanogpt_refuses_an_unknown_config_name(pychars, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / 'examples' / 'nanogpt.py'), '--data', str(pychars),
                           '--n_layers=2'], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, 'PYTHONPATH': str(ROOT)})
    assert done.returncode != 0 and "Received: '--n_layers=2'" in done.stderr


@pytest.mark.slow
def test_nanogpt_under_torchrun_gives_one_processs_figures_and_resumes_a_finished_run(pychars, tmp_path):
    one, _ = run_nanogpt(pychars, tmp_path / 'one', *NANOGPT_SMALL)
    again, _ = run_nanogpt(pychars, tmp_path / 'one', *NANOGPT_SMALL)        # resumed from its last checkpoint
    assert again == one
    two, _ = run_nanogpt(pychars, tmp_path / 'two', *NANOGPT_SMALL, command=(
        sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2'))
    assert two['steps'] == one['steps'] and two['tokens'] == one['tokens']
    for key in ('val', 'best', 'full_val'):
        assert two[key] == pytest.approx(one[key], abs=2e-4)        # the same step to float reordering
