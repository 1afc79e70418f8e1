"""The README's examples run as written, in a folder of their own, with only what ``make demo`` installs.

Its Python blocks run in order in one fresh interpreter (a new process, so nothing of the suite's imports or
settings helps them), and the test checks what the page says they show: the loss falls, the accuracy is that of a
trained model, the loaded model predicts as the saved one, and the model trained on two devices with micro-batches
is the one-device model to float rounding.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / 'README.md').read_text(encoding='utf-8')


def _blocks():
    return re.findall(r'```python\n(.*?)```', README, re.S)


def test_the_readme_has_the_first_pipeline_the_devices_and_the_demo():
    blocks = _blocks()
    assert len(blocks) == 3
    assert "Dataset(600, preloaded=" in blocks[0] and "TorchModel.from_file('mlp.pt')" in blocks[0]
    assert "'device': ['CPU:0', 'CPU:1'], 'microbatch': 8" in blocks[1]
    assert 'ResNet18' in blocks[2]


def test_the_readme_examples_run_as_written(tmp_path):
    program = tmp_path / 'readme.py'
    program.write_text('\n'.join(_blocks()), encoding='utf-8')
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert float(re.search(r'last loss ([\d.]+)', out).group(1)) < 0.8            # from ln 3 = 1.10 at the start
    assert float(re.search(r'accuracy ([\d.]+)', out).group(1)) > 0.8             # chance is 1/3
    assert re.search(r'^True$', out, re.M), out
    assert float(re.search(r'largest difference ([\d.e+-]+)', out).group(1)) < 1e-5
    assert (tmp_path / 'mlp.pt').is_file()
