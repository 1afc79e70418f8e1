"""flowpipe.plot: subplots from the data's nesting, per-subplot and per-layer parameters, masks over images,
histograms, curves, losses, saving; read back from the figure's artists."""
import numpy as np
import pytest

matplotlib = pytest.importorskip('matplotlib')
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from flowpipe import plot  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close('all')


@pytest.fixture
def image():
    return np.random.default_rng(0).random((12, 16))


@pytest.fixture
def mask(image):
    return (image > 0.6).astype(np.int64)


def test_one_array_is_one_subplot_saved_to_path(image, tmp_path):
    result = plot(image, title='image', cmap='viridis', path=tmp_path / 'one.png')
    assert (tmp_path / 'one.png').stat().st_size > 0
    (ax,) = result.axes
    assert ax.get_title() == 'image' and len(ax.images) == 1
    assert ax.images[0].get_cmap().name == 'viridis'
    assert np.array_equal(ax.images[0].get_array(), image)
    result.save(tmp_path / 'again.pdf')
    plot(image, savepath=tmp_path / 'batchflow.png', detach='save', show=False).save(tmp_path / 'b.png', detach=True)
    assert (tmp_path / 'b.png').exists()
    assert (tmp_path / 'again.pdf').exists() and (tmp_path / 'batchflow.png').exists()


def test_overlay_draws_a_mask_over_the_image(image, mask):
    result = plot([image, mask], show=False)
    (ax,) = result.axes
    below, above = ax.images
    assert below.get_alpha() is None and above.get_alpha() == 0.5
    drawn = above.get_array()
    assert np.array_equal(np.ma.getmaskarray(drawn), mask == 0)    # zeros left transparent
    assert above.get_cmap()(1.0) == matplotlib.colors.to_rgba('mediumseagreen')


def test_separate_with_per_subplot_parameters_and_grid(image, mask):
    result = plot([image, mask, image], combine='separate', title=['a', 'b', 'c'], cmap=['gray', 'red', 'magma'],
                  ncols=2, show=False)
    assert [ax.get_title() for ax in result.axes] == ['a', 'b', 'c']
    assert result.axes[2].images[0].get_cmap().name == 'magma'
    grid = result.figure.axes
    assert len(grid) == 4 and not grid[3].axison    # 2 x 2, the fourth switched off
    assert result.axes[1].get_subplotspec().get_geometry()[:2] == (2, 2)


def test_nested_lists_mix_overlays_and_separate_subplots(image, mask):
    result = plot([[image, mask], image], title=['with mask', 'alone'], alpha=[[1, 0.3], 1], colorbar=True,
                  show=False)
    assert result.combine == 'mixed'
    first, second = result.axes
    assert len(first.images) == 2 and len(second.images) == 1
    assert first.images[1].get_alpha() == 0.3
    assert len(result.figure.axes) == 4    # two subplots, a colour bar each


def test_list_title_of_one_subplot_is_joined_and_labels_make_a_legend(image, mask):
    (ax,) = plot([image, mask], title=['image', 'mask'], label=[None, 'mask'], show=False).axes
    assert ax.get_title() == 'image, mask'
    (handle,) = ax.get_legend().legend_handles
    assert handle.get_facecolor()[:3] == matplotlib.colors.to_rgb('mediumseagreen')


def test_histograms_curves_and_losses(tmp_path):
    values = np.random.default_rng(1).normal(size=200)
    (ax,) = plot([values, values + 3], mode='histogram', bins=10, show=False).axes
    assert len(ax.patches) == 20 and ax.get_xlabel() == 'Values'
    result = plot([np.arange(5.0), (np.arange(3.0), np.arange(3.0) ** 2)], mode='curve', combine='separate',
                  label=['a', 'b'], xlabel='step', show=False)
    assert np.array_equal(result.axes[1].lines[0].get_ydata(), [0, 1, 4])
    (ax,) = plot([3, 1, 2], mode='curve', show=False).axes       # a list of numbers is one curve
    assert len(ax.lines) == 1 and ax.lines[0].get_ydata().tolist() == [3, 1, 2]
    assert [text.get_text() for text in result.axes[0].get_legend().get_texts()] == ['a']
    (ax,) = plot((np.linspace(1, 0, 50), np.full(50, 0.1)), mode='loss', window=10, path=tmp_path / 'loss.pdf').axes
    assert len(ax.lines) == 2 and (tmp_path / 'loss.pdf').exists()
    assert len(ax.figure.axes) == 2    # the learning rate on its own axis


def test_value_masking_channels_and_tensors(image):
    torch = pytest.importorskip('torch')
    (ax,) = plot(torch.tensor(image), mask='<0.5', show=False).axes
    assert np.array_equal(np.ma.getmaskarray(ax.images[0].get_array()), image < 0.5)
    (ax,) = plot(image, vmin='0.1', vmax=0.9, show=False).axes
    assert np.allclose(ax.images[0].get_clim(), (np.quantile(image, 0.1), 0.9))
    (ax,) = plot(image - 0.2, vrange=True, show=False).axes
    low, high = ax.images[0].get_clim()
    assert low == -high == -np.abs(image - 0.2).max()
    rgb = np.random.default_rng(2).random((3, 8, 8))
    (ax,) = plot(rgb, transpose=(1, 2, 0), show=False).axes
    assert ax.images[0].get_array().shape == (8, 8, 3)


def test_draws_on_given_axes(image):
    figure, axes = plt.subplots(1, 3)
    result = plot([image, image], combine='separate', axes=axes)
    assert result.figure is figure and len(axes[0].images) == 1 and not axes[2].images


def test_without_path_in_a_script_warns(image):
    with pytest.warns(UserWarning, match="path="):
        plot(image)


def test_errors(image):
    with pytest.raises(ValueError, match="mode"):
        plot(image, mode='pie')
    with pytest.raises(ValueError, match="combine"):
        plot([image], combine='stack')
    with pytest.raises(TypeError, match="titel"):
        plot(image, titel='x')
    with pytest.raises(ValueError, match="an item for each subplot"):
        plot([image, image, image], combine='separate', title=['a', 'b'], show=False)
    with pytest.raises(ValueError, match="room for 3"):
        plot([image] * 3, combine='separate', ncols=1, nrows=2)
    with pytest.raises(ValueError, match="transpose"):
        plot(np.zeros((3, 8, 8)), show=False)
    with pytest.raises(ValueError, match="detach"):
        plot(image, detach='thread', show=False)
    with pytest.raises(ValueError, match="comparison"):
        plot(image, mask={'value': 1}, show=False)
    with pytest.raises(ValueError, match="colour map's name"):
        plot(image, cmap='no such map', show=False)
