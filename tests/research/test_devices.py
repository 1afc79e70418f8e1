"""flowpipe.research.devices: shares of devices per worker slot and branch."""
import pytest

from flowpipe.research.devices import split_devices


def test_none_adds_no_device():
    assert split_devices(None, 2, 1) == [[None], [None]]


def test_one_device_per_slot():
    assert split_devices(['CPU:0', 'CPU:1'], 2, 1) == [['CPU:0'], ['CPU:1']]


def test_several_devices_per_slot_go_together():
    assert split_devices(['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3'], 2, 1) == [[['CPU:0', 'CPU:1']], [['CPU:2', 'CPU:3']]]


def test_fewer_devices_than_slots_are_shared_by_neighbours():
    assert split_devices(['CPU:0', 'CPU:1'], 2, 2) == [['CPU:0', 'CPU:0'], ['CPU:1', 'CPU:1']]


def test_nested_shares_as_given():
    assert split_devices([['CPU:0'], ['CPU:1', 'CPU:2']], 2, 1) == [['CPU:0'], [['CPU:1', 'CPU:2']]]
    assert split_devices([[['CPU:0'], ['CPU:1']]], 1, 2) == [['CPU:0', 'CPU:1']]


def test_bad_nesting_raises():
    with pytest.raises(ValueError, match='Expected nested devices'):
        split_devices([['CPU:0'], ['CPU:1'], ['CPU:2']], 2, 1)


@pytest.mark.gpu
def test_gpu_pattern_is_expanded_and_given_to_experiments():
    import torch

    from flowpipe.research import EC, Research
    count = torch.cuda.device_count()
    assert split_devices('GPU:*', 1, 1) == [[[f'cuda:{i}' for i in range(count)] if count > 1 else 'cuda:0']]
    research = Research().add_callable('device', lambda device: str(device), device=EC('device'), save_to='device')
    research.run(parallel=False, dump_results=False, bar=False, devices='GPU:0')
    assert research.results.rows()[0]['device'] == 'GPU:0'
