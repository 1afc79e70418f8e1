"""set_gpus: choosing visible GPUs by free memory, tested with a fake nvidia-smi."""
import pytest

from flowpipe import DeviceError, set_gpus
from flowpipe import gpus


def test_chooses_the_freest_gpus(monkeypatch):
    monkeypatch.setattr(gpus, 'free_gpus', lambda: [(2, 0.99), (0, 0.95), (1, 0.2)])
    monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
    assert set_gpus(2) == [2, 0]
    import os
    assert os.environ['CUDA_VISIBLE_DEVICES'] == '2,0'


def test_too_few_gpus_is_a_device_error(monkeypatch):
    monkeypatch.setattr(gpus, 'free_gpus', lambda: [(0, 0.5)])
    with pytest.raises(DeviceError, match='Expected 1 GPU.*0.5'):
        set_gpus(1)
    monkeypatch.setattr(gpus, 'free_gpus', lambda: [])
    with pytest.raises(DeviceError, match='no GPU'):
        set_gpus(1)


def test_tensorflow_models_point_to_torch():
    with pytest.raises(ImportError, match='flowpipe.models.torch'):
        import flowpipe.models.tf  # noqa: F401
