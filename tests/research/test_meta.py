"""flowpipe.research.meta: git_meta, env_meta, memory_ratio and executor_class of Research.run."""
import subprocess

import pytest
import torch

from flowpipe.research import Research
from flowpipe.research.meta import check_free_memory, git_state


def _research(name):
    return Research(name=name, domain={'x': [1]}).add_callable('twice', lambda x: 2 * x, x=1, save_to='y')


def test_git_and_env_meta_are_kept_with_the_research(tmp_path, monkeypatch):
    repo = tmp_path / 'repo'
    repo.mkdir()
    for args in (['init', '-q'], ['-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-q', '--allow-empty',
                                  '-m', 'start']):
        subprocess.run(['git', *args], cwd=repo, check=True)
    (repo / 'new.txt').write_text('x')
    monkeypatch.chdir(repo)
    research = _research(str(tmp_path / 'r')).run(n_iters=1, parallel=False, bar=False, git_meta=True,
                                                  env_meta=True)
    git = research.meta['git']
    assert len(git['commit']) == 40 and git['changed_files'] == ['new.txt']
    assert research.meta['env']['torch'] == torch.__version__
    assert Research.load(str(tmp_path / 'r'), trusted=True).meta == research.meta


def test_without_git_meta_nothing_is_read_and_outside_a_repository_the_error_is_kept(tmp_path):
    research = _research(str(tmp_path / 'r')).run(n_iters=1, parallel=False, bar=False)
    assert research.meta == {'git': None, 'env': None}
    assert 'error' in git_state(str(tmp_path))


def test_memory_ratio_without_a_gpu_among_the_devices_is_refused(tmp_path):
    with pytest.raises(ValueError, match='Expected GPUs in devices with memory_ratio'):
        _research(str(tmp_path / 'r')).run(n_iters=1, parallel=False, bar=False, devices=['CPU:0', 'CPU:1'],
                                            memory_ratio=0.9)
    with pytest.raises(ValueError, match=r'memory_ratio as a number in \(0, 1\]'):
        check_free_memory(['CPU:0'], 1.5)


def test_executor_class_is_refused_with_executor_as_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r'run\(executor=\.\.\.\)'):
        _research(str(tmp_path / 'r')).run(n_iters=1, parallel=False, bar=False, executor_class=object)


@pytest.mark.gpu
def test_memory_ratio_passes_on_a_free_gpu_and_names_a_busy_one():
    if not torch.cuda.is_available():
        pytest.skip('needs a CUDA device')
    check_free_memory('GPU:0', 0.01, checks=1, delay=0)
    with pytest.raises(RuntimeError, match='cuda:0'):
        check_free_memory('GPU:0', 1.0, checks=2, delay=0)
