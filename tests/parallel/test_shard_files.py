"""A damaged folder of shards (a sharded checkpoint's) names the file that is missing or truncated and the way on,
instead of DCP's bare CheckpointException; written and read in one process."""
import os

import pytest
import torch

from flowpipe.parallel import sharded_state


def _saved(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    folder = str(tmp_path / 'checkpoint-000000004.shards')
    sharded_state.save_shards(folder, {'net': sharded_state.sharded_state(net, optimizer)})
    shard = next(name for name in os.listdir(folder) if name.endswith('.distcp'))
    return folder, os.path.join(folder, shard), {'net': sharded_state.sharded_state(net, optimizer)}


def test_a_truncated_shard_is_named(tmp_path):
    folder, shard, states = _saved(tmp_path)
    whole = open(shard, 'rb').read()
    with open(shard, 'wb') as file:
        file.write(whole[:len(whole) // 2])
    with pytest.raises(ValueError, match=rf"Expected the shard file '{shard}' of at least {len(whole)} bytes.*"
                                         rf"Received: {len(whole) // 2} bytes: it is truncated.*resume from an "
                                         r"earlier one"):
        sharded_state.load_shards(folder, states)


def test_a_missing_shard_is_named(tmp_path):
    folder, shard, states = _saved(tmp_path)
    os.unlink(shard)
    with pytest.raises(FileNotFoundError, match=rf"Expected the shard file '{shard}'.*Received: no such file"):
        sharded_state.load_shards(folder, states)


def test_truncated_metadata_is_named(tmp_path):
    folder, _, states = _saved(tmp_path)
    metadata = os.path.join(folder, '.metadata')
    with open(metadata, 'rb') as file:
        head = file.read(20)
    with open(metadata, 'wb') as file:
        file.write(head)
    with pytest.raises(ValueError, match=rf"Expected the DCP metadata of '{folder}'.*cannot be read"):
        sharded_state.load_shards(folder, states)

