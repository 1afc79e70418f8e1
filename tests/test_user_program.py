"""The SPEC §1 user program, as written, on the shipped Digits data set (and the demo built on it)."""

import numpy as np
import pytest
import torch

from flowpipe import B, C, D, Pipeline, V
from flowpipe.__main__ import main
from flowpipe.models.torch import ResNet18
from flowpipe.opensets import Digits


def _user_program(config, n_epochs=None, n_iters=None):
    dataset = Digits(bar=True)                             # .train / .test subsets, D.num_classes

    model_config = {'inputs/images/shape': B.image_shape,
                    'inputs/labels/classes': D.num_classes,
                    'initial_block/inputs': 'images',
                    'device': C('device'),
                    'microbatch': C('microbatch')}

    template = (Pipeline()
                .init_variable('loss_history', [])
                .init_model('dynamic', ResNet18, 'conv_nn', config=model_config)
                .resize((32, 32))
                .to_array()
                .train_model('conv_nn', fetches='loss',
                             images=B.images, labels=B.labels,
                             save_to=V('loss_history', mode='a'), use_lock=True))

    pipeline = template << dataset.train << config
    pipeline.next_batch(64)
    pipeline.run(64, shuffle=True, n_epochs=n_epochs, n_iters=n_iters, bar=True, drop_last=True, prefetch=10)
    return dataset, pipeline


def _accuracy(dataset, pipeline):
    test = (Pipeline()
            .import_model('conv_nn', pipeline)
            .init_variable('true', [])
            .init_variable('predicted', [])
            .update(V('true', mode='e'), B.labels)
            .resize((32, 32))
            .to_array()
            .predict_model('conv_nn', images=B.images, fetches='labels', save_to=V('predicted', mode='e'))
            ) << dataset.test
    test.run(128, n_epochs=1)
    return np.mean(np.asarray(test.v('predicted')) == np.asarray(test.v('true')))


def test_program_builds_the_model_from_the_data_and_places_it():
    torch.manual_seed(0)
    dataset, pipeline = _user_program({'device': ['CPU:0', 'CPU:1'], 'microbatch': 16}, n_iters=2)
    model = pipeline.m('conv_nn')
    assert isinstance(model, ResNet18) and model.spec.input_shape == (1, 32, 32) and model.spec.num_outputs == 10
    assert model.plan.num_replicas == 2 and model.plan.microbatch == 16
    assert len(pipeline.v('loss_history')) == 3 and model.iteration == 3
    assert 'chunk sizes [16, 16, 16, 16]' in repr(model)
    model.close()


@pytest.mark.slow
@pytest.mark.parametrize('config', [{'device': 'cpu', 'microbatch': None},
                                    {'device': ['CPU:0', 'CPU:1'], 'microbatch': 16}])
def test_program_reaches_high_accuracy(config):
    torch.manual_seed(0)
    dataset, pipeline = _user_program(config, n_epochs=1)
    accuracies = [_accuracy(dataset, pipeline)]
    while accuracies[-1] <= 0.9 and len(accuracies) < 4:  # one more epoch, as a user would run it
        pipeline.run(64, shuffle=True, n_epochs=1, bar=True, drop_last=True, prefetch=10)
        accuracies.append(_accuracy(dataset, pipeline))
    history = pipeline.v('loss_history')
    assert accuracies[-1] > 0.9, f'held-out accuracy per epoch {accuracies}, losses {history[::10]}'
    assert np.mean(history[-5:]) < 0.5 * np.mean(history[:5]), f'losses {history[::10]}'
    pipeline.m('conv_nn').close()


@pytest.mark.parametrize('command', [['demo'], []])  # python -m flowpipe demo ..., flowpipe-demo ...
def test_demo_prints_the_held_out_accuracy(command, capsys):
    assert main([*command, '--model', 'MLP', '--epochs', '1', '--no-bar', '--device', 'CPU:0,CPU:1']) == 0
    accuracy = float(capsys.readouterr().out.split('held-out accuracy:')[1].split()[0])
    assert 0.5 < accuracy <= 1.0


@pytest.mark.parametrize('argv, message', [(['demo', '--epochs', '0'], 'positive --epochs'),
                                           (['demo', '--model', 'ResNet50'], 'invalid choice'),
                                           (['demo', '--device', ','], 'Expected a device')])
def test_demo_rejects_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_demo_on_a_missing_gpu_prints_one_line_with_the_available_devices():
    import subprocess
    import sys

    import torch
    if torch.cuda.device_count() > 4:
        pytest.skip('this machine has the GPUs the test asks for')
    done = subprocess.run([sys.executable, '-m', 'flowpipe', 'demo', '--device', 'GPU:4', '--no-bar'],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 2 and done.stdout == ''
    assert 'Traceback' not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Received: 'GPU:4'" in done.stderr and 'Available:' in done.stderr and 'cpu:0' in done.stderr


@pytest.mark.parametrize('argv', [['demo', '--device', 'CPU:0,CPU:1', '--microbatch', '0'],
                                  ['demo', '--device', 'TPU:0']])
def test_demo_rejects_placements_before_training(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith('flowpipe: error: Expected') and len(err.strip().splitlines()) == 1


def test_flowpipe_demo_script_help_lists_the_demo_options(capsys):
    from pathlib import Path

    from flowpipe.__main__ import demo_main
    with pytest.raises(SystemExit) as exit_info:
        demo_main(['--help'])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('usage: flowpipe-demo') and all(option in out for option in ('--device', '--microbatch',
                                                                                        '--epochs', '--model'))
    pyproject = (Path(__file__).resolve().parent.parent / 'pyproject.toml').read_text(encoding='utf-8')
    assert 'flowpipe-demo = "flowpipe.__main__:demo_main"' in pyproject



# the import names of the test extra's packages (pyproject.toml), which the demo's venv does not have
EXTRAS = {'PIL', 'dask', 'distributed', 'ipykernel', 'ipywidgets', 'jupyter', 'matplotlib', 'nbclient', 'nbformat',
          'notebook', 'onnx', 'onnxscript', 'pandas', 'psutil', 'pytest', 'pytest_timeout', 'safetensors',
          'tensorboard'}


def test_the_demo_needs_no_optional_extra(tmp_path):
    """``make demo`` installs flowpipe's dependencies only (scripts/setup.sh demo): the demo runs where no package
    of the test extra can be imported (a copy of site-packages without them, with Python's site set-up off)."""
    import os
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path
    site = Path(sysconfig.get_paths()['purelib'])
    for entry in site.iterdir():
        if entry.name.split('.')[0].split('-')[0] not in EXTRAS and not entry.name.endswith('.pth'):
            (tmp_path / entry.name).symlink_to(entry)
    root = Path(__file__).resolve().parent.parent
    code = ("import importlib.util, sys; from flowpipe.__main__ import main; "
            f"assert not any(importlib.util.find_spec(name) for name in {sorted(EXTRAS)!r}); "
            "sys.exit(main(['demo', '--model', 'MLP', '--epochs', '1']))")
    done = subprocess.run([sys.executable, '-S', '-c', code], capture_output=True, text=True, timeout=900,
                          env={**os.environ, 'PYTHONPATH': f'{root}{os.pathsep}{tmp_path}'})
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'held-out accuracy:' in done.stdout


@pytest.mark.slow     # the demo as it runs by default: two epochs of ResNet18
@pytest.mark.parametrize('threads', [2, 1])
def test_the_demo_prints_the_accuracy_the_docs_give(threads):
    import re
    from pathlib import Path

    from flowpipe.__main__ import demo
    page = (Path(__file__).resolve().parent.parent / 'docs' / 'models.md').read_text(encoding='utf-8')
    claimed = [float(value) for value in re.findall(r'`held-out accuracy: ([0-9.]+)`', page)]
    assert len(claimed) == 2, claimed                   # with torch's 2 threads, then with one
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        accuracy = demo(bar=False)
    finally:
        torch.set_num_threads(previous)
    assert abs(accuracy - claimed[0 if threads == 2 else 1]) <= 0.01, (threads, accuracy, claimed)
