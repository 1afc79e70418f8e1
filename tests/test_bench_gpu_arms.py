"""The GPU arms of bench/pipeline.py and bench/checkpoint_activations.py say why they cannot run where the GPUs they
need are missing (one GPU per rank for the pipeline, one GPU for checkpointing), instead of failing inside a job."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args):
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason='2 GPUs here: the arm would run')
def test_the_pipeline_bench_on_cuda_wants_a_gpu_per_rank():
    done = run_bench('bench/pipeline.py', '--device', 'cuda')
    assert done.returncode == 2
    assert 'Expected 2 GPUs for --device cuda: one per rank, over NCCL.' in done.stderr
    assert 'NCCL refuses two ranks on one GPU' in done.stderr and 'does not send CUDA tensors' in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason='a GPU here: the arm would run')
def test_the_checkpointing_bench_on_cuda_wants_a_gpu():
    done = run_bench('bench/checkpoint_activations.py', '--device', 'cuda')
    assert done.returncode == 1
    assert 'Expected a CUDA device for --device cuda. Received: torch sees none here.' in done.stderr
