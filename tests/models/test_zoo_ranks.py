"""One network per family of the zoo (bottleneck ResNet, SE-ResNeXt, DenseNet, EfficientNet, VGG, UNet, ResUNet,
DenseUNet, EncoderDecoder) on 2 gloo ranks: two training steps under DDP (micro-batches of 3) and under FSDP2 sharding
whose units are the network's blocks equal one process on the whole global batch (float64, Adam, relative 1e-10, a sum
and a masked mean as losses); the sharded ranks' model file loads in one process and predicts what they predicted.
A layer norm stands for the default BatchNorm in the exact runs (docs/parallel.md: BatchNorm normalizes each
rank's part with its own statistics); with BatchNorm, under DDP and under sharding, the ranks keep equal parameters
and running statistics, a step's being those of two replicas in one process."""
import numpy as np
import pytest

from flowpipe.parallel import launch

from ..parallel.test_sharded import _rel
from . import zoo_jobs

# one launch per default dtype (both families' runs in it), about a minute on a loaded 2-core machine: slow
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]

TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
NAMES = list(zoo_jobs.FAMILIES)


@pytest.fixture(scope='module')
def reference(default_dtype):
    return zoo_jobs.one_process()


@pytest.fixture(scope='module')
def launched(default_dtype, tmp_path_factory):
    folder = tmp_path_factory.mktemp('zoo')
    return folder, launch(zoo_jobs.ranks, 2, args=(str(folder),), timeout=TIMEOUT)


@pytest.mark.parametrize('mode', ['ddp', 'full'])
@pytest.mark.parametrize('name', NAMES)
def test_two_ranks_equal_one_process_on_the_whole_batch(launched, reference, name, mode):
    _, ranks = launched
    for result in ranks:
        assert len(result[mode][name]['params']) == len(reference[name]['params'])
        assert _rel(result[mode][name]['params'], reference[name]['params']) < 1e-10
        np.testing.assert_allclose(result[mode][name]['loss'], reference[name]['loss'], rtol=1e-10)


def test_the_sharding_units_are_the_blocks_of_each_network(launched):
    _, ranks = launched
    units = {name: result['units'] for name, result in ranks[0]['full'].items()}
    # a body stage of repeated blocks gives one unit per block (the stage's layouts), a stage of one block is a unit
    assert units['ResNet50'] == ['', 'initial_block', *_blocks('parts', [3, 4, 6, 3]), 'head']
    assert units['DenseNet121'] == ['', 'initial_block', *_blocks('layers', [6]), 'body.downsample0',
                                    *_blocks('layers', [12], 1), 'body.downsample1', *_blocks('layers', [24], 2),
                                    'body.downsample2', *_blocks('layers', [16], 3), 'head']
    assert units['EfficientNetB0'] == ['', 'initial_block', 'body.block0', *_blocks('parts', [2, 2, 3, 3, 4], 1),
                                       'body.block6', 'head']
    assert units['VGG16'] == ['', *[f'body.block{i}' for i in range(5)], 'head']    # no initial_block
    for name in ('UNet', 'ResUNet', 'DenseUNet'):
        assert units[name] == ['', 'initial_block', 'encoder', 'embedding', 'decoder', 'head']
    assert all(result['units'] == units[name] for name, result in ranks[1]['full'].items())


def _blocks(inner, counts, first=0):
    """The unit names of the repeated blocks of the body stages from ``first`` on, ``counts[i]`` in a stage."""
    return [f'body.block{stage}.parts.0.{inner}.{index}' for stage, count in enumerate(counts, first)
            for index in range(count)]


@pytest.mark.parametrize('name', ['ResNet50', 'EfficientNetB0'])
def test_layout_layers_as_units_make_each_residual_or_mbconv_block_a_unit(launched, reference, name):
    _, ranks = launched
    for result in ranks:
        assert _rel(result['layer_units'][name]['params'], reference[name]['params']) < 1e-10
    units = ranks[0]['layer_units'][name]['units']
    blocks = {'ResNet50': [3, 4, 6, 3], 'EfficientNetB0': [1, 2, 2, 3, 3, 4, 1]}[name]
    for stage, count in enumerate(blocks):      # each repetition of a stage's block (its MultiLayer) is a unit
        assert [unit for unit in units if unit.startswith(f'body.block{stage}.') and unit.count('parts') == 2] == [
            f'body.block{stage}.parts.0.parts.{index}' for index in range(count)]


@pytest.mark.parametrize('name', NAMES)
def test_the_sharded_ranks_file_loads_in_one_process_and_predicts_the_same(launched, reference, name):
    folder, ranks = launched
    model_class = zoo_jobs.FAMILIES[name][0]
    model = model_class.from_file(str(folder / f'{name}.model'))
    assert _rel([p.detach().numpy() for p in model.model.parameters()], reference[name]['params']) < 1e-10
    images, _ = zoo_jobs.batch(zoo_jobs.FAMILIES[name][2])
    predictions = model.predict(images)
    for result in ranks:
        np.testing.assert_allclose(result['full'][name]['predictions'], predictions, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('key', ['batch_norm', 'batch_norm_full'])
def test_with_batch_norm_the_ranks_keep_equal_parameters_and_running_statistics(launched, reference, key):
    """docs/parallel.md and docs/distributed.md: each rank normalizes its part, and the running statistics are
    averaged over the ranks after every step (the batch counts are rank 0's), under DDP and under sharding: the
    ranks stay equal bit for bit, and a step is the one of two replicas in one process (which normalize the same
    parts). The second step is compared between the ranks only: BatchNorm over 4 items on 1x1 and 2x2 maps scales
    the first step's rounding up to 1e-7 in the second step's gradients."""
    _, (first, second) = launched
    for step in (0, 1):
        for ours, theirs in ((first[key]['params'][step], second[key]['params'][step]),
                             (first[key]['buffers'][step], second[key]['buffers'][step])):
            assert len(ours) == len(theirs) > 0
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(a, b)
    expected = reference['batch_norm']
    assert _rel(first[key]['params'][0], expected['params'][0]) < 1e-10
    assert _rel(first[key]['buffers'][0], expected['buffers'][0]) < 1e-10
    np.testing.assert_allclose(first[key]['loss'][0], expected['loss'][0], rtol=1e-10)
