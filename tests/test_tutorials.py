"""The tutorials run as written: every notebook under a real Jupyter kernel (nbclient, ipykernel), in its folder.

Where nbclient or ipykernel is missing, the code cells run in order as plain Python in one namespace instead.
Each test then checks facts the notebook establishes (expressions over its variables, evaluated at its end), so
a change that breaks a tutorial fails here. ``tutorials/make_notebooks.py --run`` writes the notebooks from their
cell lists and stores them executed; tests keep the two in sync and check the stored outputs. The ``python`` code blocks of ``docs/pipelines.md`` run the same way
(their asserts are the checks).
"""
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / 'tutorials'


def _builder():
    spec = importlib.util.spec_from_file_location('make_notebooks', TUTORIALS / 'make_notebooks.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain(value):
    return value.tolist() if hasattr(value, 'tolist') else str(value)


def run_notebook(name, **facts):
    """Execute the notebook (a kernel where one is installed) with one torch thread, so that it runs at a steady
    pace on a shared machine; returns ``facts`` evaluated at its end, as JSON."""
    builder = _builder()
    if builder.has_kernel():
        return builder.execute_with_kernel(TUTORIALS / name, facts, threads=1)
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        namespace = builder.execute(TUTORIALS / name)
    finally:
        torch.set_num_threads(threads)
    values = {key: eval(expression, namespace) for key, expression in facts.items()}
    return json.loads(json.dumps(values, default=_plain))


@pytest.mark.parametrize('name', sorted(_builder().NOTEBOOKS))
def test_notebook_is_valid_nbformat4_and_in_sync_with_its_cells(name):
    builder = _builder()
    notebook = json.loads((TUTORIALS / name).read_text(encoding='utf-8'))
    assert notebook['nbformat'] == 4
    sys.path.insert(0, str(TUTORIALS))
    try:
        spec = importlib.util.spec_from_file_location(builder.NOTEBOOKS[name], TUTORIALS / f'{builder.NOTEBOOKS[name]}.py')
        cells = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cells)
    finally:
        sys.path.remove(str(TUTORIALS))
    assert builder.strip_outputs(notebook) == builder.make_notebook(cells.CELLS), \
        f"{name} differs from its cell list: run `python tutorials/make_notebooks.py --run`"
    sources = [''.join(cell['source']) for cell in notebook['cells'] if cell['cell_type'] == 'code']
    assert sources and not any(line.lstrip().startswith('%') for source in sources for line in source.splitlines())
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.reads(json.dumps(notebook), as_version=4))


# Absolute paths of a machine: the folders users, temporary files and checkouts usually live in.
_MACHINE_PATH = re.compile(r'(?<![\w.~])/(home|Users|tmp|var|root|work|private|opt|mnt)/')


def _outputs_text(cell):
    return ''.join(''.join(output.get('text', output.get('data', {}).get('text/plain', '')))
                   for output in cell['outputs'])


@pytest.mark.parametrize('name', sorted(_builder().NOTEBOOKS))
def test_notebook_is_stored_executed_with_small_clean_outputs(name):
    path = TUTORIALS / name
    notebook = json.loads(path.read_text(encoding='utf-8'))
    code = [cell for cell in notebook['cells'] if cell['cell_type'] == 'code']
    assert [cell['execution_count'] for cell in code] == list(range(1, len(code) + 1)), \
        f"{name} is stored without outputs: run `python tutorials/make_notebooks.py --run`"
    assert any(cell['outputs'] for cell in code)
    for cell in code:
        text = _outputs_text(cell)
        assert not _MACHINE_PATH.search(text), f"{name} shows a path of the machine that ran it: {text[:200]!r}"
        assert '\r' not in text and 'IProgress not found' not in text
        assert not any(output.get('output_type') == 'error' for output in cell['outputs'])
    assert path.stat().st_size < 100_000


def test_devices_notebook_shows_its_measured_table():
    notebook = json.loads((TUTORIALS / '03_devices.ipynb').read_text(encoding='utf-8'))
    table = [_outputs_text(cell) for cell in notebook['cells']
             if cell['cell_type'] == 'code' and "{'layout':<28}" in ''.join(cell['source'])]
    assert len(table) == 1
    rows = [line for line in table[0].splitlines() if 'MiB' in line]
    assert [row.split('  ')[0] for row in rows] == ['one device', '2 replicas', '3 replicas',
                                                    '2 replicas, microbatch 16']


def test_stored_outputs_are_cleaned_up():
    builder = _builder()
    bar = [{'output_type': 'stream', 'name': 'stderr', 'text': '\r  0%|  | 0/2\r 50%|# | 1/2'},
           {'output_type': 'stream', 'name': 'stderr', 'text': ['\r100%|##| 2/2\n']},
           {'output_type': 'stream', 'name': 'stdout', 'text': f"saved to {builder.HERE.parent / 'x.pt'}\n"},
           {'output_type': 'stream', 'name': 'stdout', 'text': ''}]
    assert builder.clean_outputs(bar) == [{'output_type': 'stream', 'name': 'stderr', 'text': ['100%|##| 2/2']},
                                          {'output_type': 'stream', 'name': 'stdout', 'text': ['saved to ./x.pt']}]


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_01_pipelines():
    facts = run_notebook('01_pipelines.ipynb', epoch_batches='epoch_batches', seen="counting.v('seen')",
                         shapes='[list(shape) for shape in shapes]', same="first.v('means') == second.v('means')",
                         means="len(first.v('means'))", combined="[combined.v('batches'), combined.v('done')]",
                         lazy_batches='lazy_batches')
    assert facts['epoch_batches'] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert facts['seen'] == 0                 # reset('variables') gave the declared default back
    assert facts['shapes'] == [[64, 1, 16, 16]] * 3
    assert facts['same'] is True and facts['means'] == 12
    assert facts['combined'] == [4, True]
    assert facts['lazy_batches'] == 8         # 2 epochs of 360 items in batches of 90


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_02_training():
    facts = run_notebook('02_training.ipynb', losses='losses', accuracy='float(accuracy)',
                         loaded_accuracy='float(loaded_accuracy)', same_with_prefetch='same_with_prefetch',
                         same_after_resume='bool(same_after_resume)',
                         resumed_batches="len(resumed.v('loss_history'))",
                         profiled="'train_model' in profiled.profile_summary()")
    losses = facts['losses']
    assert len(losses) == 4 * (1437 // 64)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert facts['accuracy'] > 0.8
    assert facts['loaded_accuracy'] == facts['accuracy']
    assert facts['same_with_prefetch'] is True
    assert facts['same_after_resume'] is True and facts['resumed_batches'] == 10
    assert facts['profiled'] is True


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_03_devices():
    facts = run_notebook('03_devices.ipynb', table='table', plan50="model.device_plan(50)",
                         plan2="pipelines['3 replicas'].m('cnn').device_plan(2)", no_bn='no_bn_difference',
                         weighted='weighted_difference',
                         threads='[thread.name for thread in __import__("threading").enumerate()]')
    table = facts['table']
    assert list(table) == ['one device', '2 replicas', '3 replicas', '2 replicas, microbatch 16']
    activations = [table[name][1] for name in table]
    assert activations[0] > 1.8 * activations[1] > 0 and activations[1] > activations[2] > activations[3]
    assert all(row[2] > 0.8 for row in table.values())         # every layout trains
    assert 'chunk of 16 -> shards [8, 8]' in facts['plan50'] and '(cpu:2 idle)' in facts['plan2']
    assert facts['no_bn'] < 1e-12 and facts['weighted'] < 1e-12
    assert not [name for name in facts['threads'] if name.startswith('flowpipe-')]   # the models were closed


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_04_data_parallel_from_scratch():
    facts = run_notebook('04_data_parallel_from_scratch.ipynb', shards='[len(s) for s in image_shards]',
                         agree='replicas_agree', by_hand='by_hand_difference', broadcast='broadcast_difference',
                         flowpipe='flowpipe_difference', scratch='from_scratch_difference')
    assert facts['shards'] == [17, 17, 16]
    assert facts['agree'] == 0.0
    assert max(facts['by_hand'], facts['broadcast'], facts['flowpipe'], facts['scratch']) < 1e-12


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_05_memory_and_microbatches():
    facts = run_notebook('05_memory_and_microbatches.ipynb', accumulation='accumulation_difference', rows='rows',
                         results='results', warned='warned_only_for_tiny_pieces',
                         message="caught['BatchNorm, 2 devices x microbatch 2'][0]")
    assert facts['accumulation'] < 1e-12
    rows = facts['rows']
    assert [row['pieces'] for row in rows] == [1, 2, 4, 8]
    assert rows[-1]['activations'] < 0.2 * rows[0]['activations']         # activations shrink with the piece
    for key in ('gradients', 'optimizer state', 'weights'):                # the rest does not
        assert len({row[key] for row in rows}) == 1
    results = facts['results']
    one, tiny, larger = (results[name] for name in ('BatchNorm, one device', 'BatchNorm, 2 devices x microbatch 2',
                                                     'BatchNorm, 2 devices x microbatch 16'))
    assert tiny[0] > one[0] + 0.5 and tiny[1] < one[1] - 0.2 and larger[1] > one[1] - 0.1
    group_one, group_tiny = results['GroupNorm, one device'], results['GroupNorm, 2 devices x microbatch 2']
    assert abs(group_one[0] - group_tiny[0]) < 0.02
    assert facts['warned'] == ['BatchNorm, 2 devices x microbatch 2']
    assert 'as few as 1 item' in facts['message']


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_06_model_parallel():
    facts = run_notebook('06_model_parallel.ipynb', difference='split_difference', auto='auto_placement',
                         deep='deep_placement', deep_loss='deep_loss', losses='losses',
                         plan="split.m('cnn').device_plan(64)")
    assert facts['difference'] == 0.0
    assert facts['auto'] == {'initial_block': 'cpu:0', 'body': 'cpu:0', 'head': 'cpu:1'}
    assert sorted(set(facts['deep'].values())) == ['cpu:0', 'cpu:1', 'cpu:2']
    assert np.isfinite(facts['deep_loss'])
    assert np.mean(facts['losses'][-5:]) < 0.5 * np.mean(facts['losses'][:5])
    assert 'initial_block on cpu:0' in facts['plan'] and 'chunk sizes [32, 32]' in facts['plan']


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_07_distributed():
    facts = run_notebook('07_distributed.ipynb', seen="[len(ranks[rank]['seen'][0]) for rank in (0, 1)]",
                         difference='difference', uneven_difference='uneven_difference',
                         rank_loss="ranks[1]['loss']", alone_loss="alone['loss']", failure='str(failure)',
                         sharded_difference='sharded_difference', adam_steps='adam_steps',
                         sharded_plan="sharded[0]['plan']")
    assert facts['seen'] == [25, 25]
    assert facts['sharded_difference'] < 1e-10 and facts['adam_steps'] == [5]
    assert "sharding 'full'" in facts['sharded_plan']
    assert facts['difference'] < 1e-10 and facts['uneven_difference'] < 1e-10
    np.testing.assert_allclose(facts['rank_loss'], facts['alone_loss'], rtol=1e-10)
    assert 'rank 1 failed: ValueError: rank 1 cannot read its data' in facts['failure']


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_08_training_run():
    facts = run_notebook('08_training_run.ipynb', rows='rows', stopped='early.stopped_epoch', keras_stop='keras_stop',
                         best_score='best.best_score', best_epoch='best_epoch', restored='restored_accuracy',
                         kept='kept', changes='changes',
                         tb_matches_csv='tb_matches_csv', tb_tags="sorted(events.Tags()['scalars'])")
    rows = facts['rows']
    assert facts['stopped'] is not None and len(rows) == facts['stopped'] + 1 < 60
    assert facts['keras_stop'] == facts['stopped']            # Keras's rule, recomputed from metrics.csv
    accuracies = [float(row['val/accuracy']) for row in rows]
    assert facts['best_score'] == max(accuracies) and facts['best_epoch'] == accuracies.index(max(accuracies))
    assert facts['restored'] == facts['best_score']           # the reloaded file is the best epoch's model
    assert len(facts['kept']) == 2 and f"epoch-{facts['best_epoch']:04d}.model" in facts['kept']
    assert facts['changes'] and all(after == before * 0.5 for _, before, after in facts['changes'])
    assert facts['tb_matches_csv'] is True
    assert facts['tb_tags'] == ['lr', 'step', 'train/loss', 'val/accuracy', 'val/loss']


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_09_research():
    pytest.importorskip('distributed')
    facts = run_notebook('09_research.ipynb', rows='len(df)', experiments="df['id'].nunique()",
                         table='table.values.tolist()', best='best_lr', same='bool(same_on_dask)',
                         first="float(curves.xs(0, level='iteration').mean())",
                         final="float(last['loss'].mean())")
    assert facts['rows'] == 8 * 60 and facts['experiments'] == 8
    assert len(facts['table']) == 2 and all(len(row) == 2 for row in facts['table'])
    assert facts['final'] < facts['first']                     # the grid trains
    assert facts['best'] in (3e-3, 3e-2)
    assert facts['same'] is True                               # Dask's table is the local pool's



@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_10_segmentation():
    pytest.importorskip('matplotlib')
    sizes = "{name: __import__('os').path.getsize(f'{folder}/{name}.png') for name in ('curves', 'predicted')}"
    facts = run_notebook('10_segmentation.ipynb', parameters='parameters', output_shape='list(output_shape)',
                         same='same_network', ready_parameters='sum(p.numel() for p in ready.model.parameters())',
                         at_init='at_init', history='history', batches='len(losses)', per_class='per_class',
                         found='found', predicted='list(predicted.shape)', figures=sizes)
    # 'cna' to 8, two encoder stages 'cna cna' of 8 and 16, an embedding of 32, the decoder back, a 1x1 head to 3
    assert facts['parameters'] == facts['ready_parameters'] == 30384 and facts['same'] is True
    assert facts['output_shape'] == [2, 3, 32, 32] and facts['predicted'] == [4, 32, 32]
    assert len(facts['history']) == 8 and facts['batches'] == 8 * (288 // 16)
    initial, final = facts['at_init'], facts['history'][-1]
    assert initial['iou'] < 0.3 and final['iou'] > 0.75 and final['iou'] > initial['iou'] + 0.4   # it learns
    assert final['dice'] > final['iou']                       # Dice = 2 IoU / (1 + IoU) for each class and mask
    assert len(facts['per_class']) == 3 and min(facts['per_class']) > 0.6
    assert all(len(values) == 2 and min(values) > 0.7 for values in facts['found'].values())
    assert all(0 < size < 60_000 for size in facts['figures'].values())

def doc_blocks(path):
    """The ```python blocks of a markdown file, in order."""
    return re.findall(r'^```python\n(.*?)^```', path.read_text(encoding='utf-8'), flags=re.S | re.M)


def test_pipelines_guide_examples_run():
    path = ROOT / 'docs' / 'pipelines.md'
    blocks = doc_blocks(path)
    assert len(blocks) > 20
    namespace = {'__name__': '__main__'}
    for number, source in enumerate(blocks):
        exec(compile(source, f'{path.name}[block {number}]', 'exec'), namespace)
    assert namespace['flow'].v('kept') == [0, 2]


def test_doc_images_exist_and_are_small():
    for page in (ROOT / 'docs' / 'pipelines.md', *sorted(TUTORIALS.glob('nb0*.py'))):
        for target in re.findall(r'\]\((\.\./img/[^)]+)\)', page.read_text(encoding='utf-8')):
            image = (page.parent / target).resolve()
            assert image.is_file(), f"{page.name} shows {target}, which does not exist"
            assert image.stat().st_size < 200_000


@pytest.mark.slow     # a notebook under a kernel: run in CI or with FLOWPIPE_SLOW=1
def test_11_language_model():
    facts = run_notebook('11_language_model.ipynb', same_windows='same_windows', val_loss='val_loss',
                         vocab='vocab_size', groups='groups', layouts='layout_differences',
                         accumulated='accumulated_difference', ranks='rank_differences',
                         same_generation='same_generation')
    assert facts['same_windows'] is True
    assert facts['val_loss'] < np.log(facts['vocab']) - 1.5          # it learned: chance is ln(vocab)
    assert facts['groups'] == [[10, 0.1], [18, 0.0]]
    assert max(facts['layouts'].values()) < 1e-12 and max(facts['ranks']) < 1e-12 and len(facts['ranks']) == 2
    assert facts['accumulated'] > 1e-3               # the mean of micro-batch means weighs the padded ones wrong
    assert facts['same_generation'] is True
