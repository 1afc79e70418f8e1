"""What a W&B offline run wrote, read back from its ``.wandb`` files (W&B's Python package has no reader of them:
its public API needs a server). A ``.wandb`` file is a LevelDB log (32 KiB blocks of records, each a 7-byte header
— crc, length, kind — and a chunk; kinds 1 full, 2 first, 3 middle, 4 last) after a 7-byte ``:W&B`` header, and
each record a ``wandb_internal_pb2.Record``."""
import glob
import json
import os
import struct

BLOCK, HEADER = 32768, 7


def records(path):
    """The ``Record`` messages of one ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2
    with open(path, 'rb') as file:
        data = file.read()
    assert data[:4] == b':W&B', f'{path} is not a W&B data file'
    position, chunks = HEADER, b''
    while position + HEADER <= len(data):
        left = BLOCK - position % BLOCK
        _, length, kind = struct.unpack('<IHB', data[position:position + HEADER])
        if left < HEADER or (length == 0 and kind == 0):       # a block's padding
            position += left
            continue
        chunks += data[position + HEADER:position + HEADER + length]
        position += HEADER + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b''
            yield record


def run_folders(folder, run_id):
    """The offline run folders of W&B run ``run_id`` under ``folder`` (one per part of a resumed run), in order,
    their files complete: W&B's service may still write a finished run's file, ``wandb.teardown()`` waits for it."""
    import wandb
    wandb.teardown()
    return sorted(glob.glob(os.path.join(folder, 'wandb', f'offline-run-*-{run_id}*')), key=os.path.getmtime)


def history(folder, run_id):
    """``[(step, {name: value})]`` that W&B run ``run_id`` logged, over all its offline parts."""
    found = []
    for part in run_folders(folder, run_id):
        for record in records(os.path.join(part, f'run-{run_id}.wandb')):
            if record.WhichOneof('record_type') == 'history':
                values = {item.key or '/'.join(item.nested_key): json.loads(item.value_json)
                          for item in record.history.item}
                found.append((record.history.step.num,
                              {name: value for name, value in values.items() if not name.startswith('_')}))
    return found


def config(folder, run_id):
    """``{name: value}`` of W&B run ``run_id``'s config, as its first part recorded it."""
    for record in records(os.path.join(run_folders(folder, run_id)[0], f'run-{run_id}.wandb')):
        if record.WhichOneof('record_type') == 'run':
            return {item.key: json.loads(item.value_json) for item in record.run.config.update}
    return {}


def exit_code(folder, run_id):
    """The exit code the last part of W&B run ``run_id`` ended with (``None``: no exit record)."""
    for record in records(os.path.join(run_folders(folder, run_id)[-1], f'run-{run_id}.wandb')):
        if record.WhichOneof('record_type') == 'exit':
            return record.exit.exit_code
    return None
