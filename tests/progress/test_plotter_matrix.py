"""flowpipe.plot's 'matrix' mode (values written in the cells, colour map, colour bar, tick labels), the `dilate`
option, and a plot drawn on again (positions, subplots and layers, update, redraw, show); read back from the
figure's artists."""
import numpy as np
import pytest

matplotlib = pytest.importorskip('matplotlib')
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from flowpipe import plot  # noqa: E402
from flowpipe.plotter.morphology import dilate  # noqa: E402

PNG = b'\x89PNG\r\n\x1a\n'
INLINE = 'module://matplotlib_inline.backend_inline'


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close('all')


def texts(ax):
    return [text.get_text() for text in ax.texts]


def drawn(ax, layer=-1):
    """The pixels a mask layer draws (not masked)."""
    return (~np.ma.getmaskarray(ax.images[layer].get_array())).astype(int)


def test_matrix_writes_each_value_in_its_cell(tmp_path):
    matrix = np.array([[1, 20], [3, 4]])
    result = plot(matrix, mode='matrix', title='counts', path=tmp_path / 'matrix.png')
    assert (tmp_path / 'matrix.png').read_bytes()[:8] == PNG
    (ax,) = result.axes
    assert texts(ax) == ['1', '20', '3', '4']
    assert [text.get_position() for text in ax.texts] == [(0, 0), (1, 0), (0, 1), (1, 1)]    # (column, row)
    colors = [matplotlib.colors.to_rgb(text.get_color()) for text in ax.texts]
    assert colors == [(1, 1, 1), (0, 0, 0), (1, 1, 1), (1, 1, 1)]    # black on the one light cell of magma
    image = ax.images[0]
    assert image.get_cmap().name == 'magma' and np.array_equal(image.get_array(), matrix)
    assert len(result.figure.axes) == 2 and result.subplots[0].colorbar is not None    # a colour bar by default
    assert ax.get_title() == 'counts' and not ax.xaxis.get_gridlines()[0].get_visible()
    tick = ax.xaxis.get_major_ticks()[0]
    assert tick.label2.get_visible() and not tick.label1.get_visible()     # column numbers above
    assert ax.get_ylim()[0] > ax.get_ylim()[1]                              # row 0 at the top


def test_matrix_formats_colours_and_tick_labels():
    shares = np.array([[0.5, 0.25], [0.125, 1.0]])
    (ax,) = plot(shares, mode='matrix', show=False).axes
    assert texts(ax) == ['0.50', '0.25', '0.12', '1.00']
    result = plot(shares, mode='matrix', cmap='viridis', colorbar=False, label_format='.0%', label_color='red',
                  label_size=7, vmin=0, vmax=2, xtick_labels=['a', 'b'], ytick_labels=['c', 'd'],
                  xtick_rotation=45, ytick_size=9, show=False)
    (ax,) = result.axes
    assert texts(ax) == ['50%', '25%', '12%', '100%'] and ax.texts[0].get_fontsize() == 7
    assert {matplotlib.colors.to_rgb(text.get_color()) for text in ax.texts} == {(1, 0, 0)}    # all cells dark
    assert ax.images[0].get_cmap().name == 'viridis' and ax.images[0].get_clim() == (0, 2)
    assert len(result.figure.axes) == 1
    assert list(ax.get_xticks()) == [0, 1] and [label.get_text() for label in ax.get_xticklabels()] == ['a', 'b']
    assert [label.get_text() for label in ax.get_yticklabels()] == ['c', 'd']
    assert ax.get_xticklabels()[0].get_rotation() == 45 and ax.get_yticklabels()[0].get_fontsize() == 9
    (ax,) = plot(shares, mode='matrix', xtick_color='red', xtick_ha='left', show=False).axes   # matplotlib's ticks
    assert {label.get_color() for label in ax.get_xticklabels()} == {'red'}
    assert {label.get_horizontalalignment() for label in ax.get_xticklabels()} == {'left'}
    (ax,) = plot(np.array([[1, 2.5]]), mode='matrix', label_format={int: 'd', float: '.3f'}, show=False).axes
    assert texts(ax) == ['1.000', '2.500']    # a float array's values are floats
    ax = plot([np.array([[1, 2]]), np.array([[3, 4]])], mode='matrix', combine='separate', show=False,
              label_format=['d', '03d'])[1].ax
    assert texts(ax) == ['003', '004']
    (ax,) = plot([np.eye(3)] * 3, xtick_labels=['a', 'b'], show=False).axes     # a subplot's, not one per layer
    assert [label.get_text() for label in ax.get_xticklabels()] == ['a', 'b']
    with pytest.raises(ValueError, match="2-d array in mode='matrix'"):
        plot(np.zeros((2, 2, 2)), mode='matrix', show=False)
    with pytest.raises(TypeError, match='label_format'):
        plot(shares, mode='matrix', label_format=3, show=False)


def test_confusion_matrix_is_drawn_in_matrix_mode(tmp_path):
    from flowpipe.models.metrics import ClassificationMetrics
    metrics = ClassificationMetrics(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2]), fmt='labels', num_classes=3)
    ax = metrics.plot_confusion_matrix(classes=['a', 'b', 'c'], path=tmp_path / 'cm.png', xtick_rotation=45)
    assert ax.images[0].get_cmap().name == 'Blues' and len(ax.figure.axes) == 2    # the colour bar
    assert texts(ax) == ['1', '0', '0', '1', '1', '0', '0', '0', '1']
    assert [label.get_text() for label in ax.get_yticklabels()] == ['a', 'b', 'c']
    assert ax.get_xticklabels()[0].get_rotation() == 45 and ax.get_xlabel() == 'Actual class'
    ax = metrics.plot_confusion_matrix(normalize=True, path=tmp_path / 'share.png', colorbar=False, cmap='magma')
    assert texts(ax)[:2] == ['0.50', '0.00'] and len(ax.figure.axes) == 1 and ax.images[0].cmap.name == 'magma'


def test_dilate_thickens_a_mask_before_drawing():
    image, mask = np.zeros((7, 5)), np.zeros((7, 5), dtype=int)
    mask[3, 2] = 1
    expected = np.zeros((7, 5), dtype=int)
    expected[2:5, 2] = 1        # batchflow's default kernel: 3 rows by 1 column
    (ax,) = plot([image, mask], dilate=[False, True], show=False).axes
    assert np.array_equal(drawn(ax), expected) and np.array_equal(ax.images[0].get_array(), image)
    expected[1:6, 2] = 1        # twice
    assert np.array_equal(drawn(plot([image, mask], dilate=2, show=False).axes[0]), expected)
    square = drawn(plot([image, mask], dilate=(3, 3), show=False).axes[0])
    assert np.array_equal(np.argwhere(square), [(row, col) for row in (2, 3, 4) for col in (1, 2, 3)])
    cross = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    (ax,) = plot([image, mask], dilate={'kernel': cross, 'iterations': 1}, show=False).axes
    assert np.array_equal(np.argwhere(drawn(ax)), [(2, 2), (3, 1), (3, 2), (3, 3), (4, 2)])
    (ax,) = plot(mask, dilate=True, transpose=(1, 0), show=False).axes     # transposed first, then dilated
    assert np.array_equal(np.argwhere(ax.images[0].get_array()), [(1, 3), (2, 3), (3, 3)])


def test_dilate_takes_the_largest_neighbour():
    values = np.array([[0.0, 0.0, 0.0], [0.0, 2.0, np.nan], [0.0, 5.0, 0.0]])
    result = dilate(values, np.ones((1, 3), dtype=bool))
    assert np.array_equal(result, [[0, 0, 0], [2, 2, 2], [5, 5, 5]])       # NaN ignored, edges kept
    corner = dilate(np.eye(3, dtype=bool), np.ones((2, 2), dtype=bool))    # centre at (1, 1): from up and left
    assert corner.dtype == bool and np.array_equal(corner, [[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    rgb = np.zeros((3, 3, 3), dtype=np.uint8)
    rgb[1, 1] = (10, 20, 30)
    result = dilate(rgb, np.ones((3, 1), dtype=bool), iterations=1)
    assert result[:, 1].tolist() == [[10, 20, 30]] * 3 and not result[:, [0, 2]].any()


def test_dilate_errors():
    image = np.zeros((4, 4))
    with pytest.raises(ValueError, match='positive int'):
        plot(image, dilate=0, show=False)
    with pytest.raises(ValueError, match=r'\(height, width\)'):
        plot(image, dilate=(0, 3), show=False)
    with pytest.raises(TypeError, match='dilate as True'):
        plot(image, dilate='thick', show=False)
    with pytest.raises(TypeError, match="dict keys"):
        plot(image, dilate={'anchor': (0, 0)}, show=False)
    with pytest.raises(ValueError, match='nonzero'):
        plot(image, dilate=np.zeros((3, 3)), show=False)


def test_later_plot_calls_fill_other_cells():
    image = np.random.default_rng(0).random((6, 8))
    result = plot([image, image.T], positions=[0, 2], ncols=2, nrows=2, combine='separate', title=['a', 'b'],
                  show=False)
    assert len(result.subplots) == 4 and len(result.axes) == 2
    assert [subplot.ax.axison for subplot in result.subplots] == [True, False, True, False]
    same = result.plot([image, image], positions=[1, 3], mode='histogram', combine='separate', bins=5,
                       title=['c', 'd'], show=False)
    assert same is result and [ax.get_title() for ax in result.axes] == ['a', 'c', 'b', 'd']
    assert len(result[1].ax.patches) == 5 and result[3].ax.axison
    result(image > 0.5, positions=0, cmap='red', show=False)    # over the image: a mask layer
    assert len(result[0]) == 2 and result[0][1].artist.get_alpha() == 0.5
    with pytest.raises(ValueError, match='layout on the first plot call'):
        result.plot(image, positions=1, ncols=3)
    with pytest.raises(ValueError, match="among the plot's 4 cells"):
        result.plot(image, positions=4)
    with pytest.raises(ValueError, match='2 different cell numbers'):
        result.plot([image, image], combine='separate', positions=[1, 1])
    with pytest.raises(ValueError, match='layout on the first plot call'):
        result.plot(image, positions=1, axes=result.axes[0])
    result[1].disable()
    assert not result[1].ax.axison
    result[1].enable()
    assert result[1].ax.axison
    with pytest.raises(TypeError, match="subplot's index"):
        result['first']


def test_subplots_layers_texts_and_updates():
    image = np.arange(12.0).reshape(3, 4)
    result = plot([[image, image > 5], np.arange(4.0), None], mode='image', colorbar=[True, False],
                  show=False)       # the empty cell needs no item of a list
    assert len(result.axes) == 3 and not result[-1].ax.axison
    text = result[-1].add_text('empty', size=20)
    assert text.get_text() == 'empty' and text.get_fontsize() == 20 and text.get_bbox_patch() is not None
    result[0][0].update(image * 10)
    assert np.array_equal(result[0][0].artist.get_array(), image * 10)
    assert result[0][0].artist.get_clim() == (0, 110)        # colour limits follow the new values
    result[0](image > 2, cmap='red', colorbar=True)           # one colour bar a subplot: the latest
    assert len(result.figure.axes) == 4 and len(result[0]) == 3
    result[0].clear()
    assert not result[0].ax.images and result[0].colorbar is None and len(result.figure.axes) == 3
    result[0](image, mode='matrix', label_format='.0f')
    assert texts(result[0].ax)[:3] == ['0', '1', '2']
    with pytest.raises(ValueError, match="mode 'image' or 'curve'"):
        result[0][0].update(image)
    curves = plot([np.arange(3.0), (np.arange(2.0), np.ones(2))], mode='curve', combine='separate', show=False)
    curves[1][0].update((np.arange(5.0), np.arange(5.0) ** 2))
    assert curves[1][0].artist.get_ydata().tolist() == [0, 1, 4, 9, 16] and curves[1].ax.get_ylim()[1] >= 16


def test_redraw_and_show(tmp_path, monkeypatch):
    result = plot(np.eye(3), title='eye', path=tmp_path / 'eye.png')
    result[0].add_text('later')
    with pytest.warns(UserWarning, match='path='):
        result.redraw()
    with pytest.warns(UserWarning, match='path='):
        result.show()
    result.save(tmp_path / 'again.png')
    assert (tmp_path / 'again.png').read_bytes()[:8] == PNG
    display = pytest.importorskip('IPython.display')
    shown = []
    monkeypatch.setattr(display, 'display', shown.append)
    monkeypatch.setattr(plt, 'get_backend', lambda: INLINE)
    result.redraw()       # in a notebook: displayed under the cell, and pyplot lets it go (shown once)
    assert shown == [result.figure] and not plt.fignum_exists(result.figure.number)
    from IPython.core.formatters import DisplayFormatter
    assert DisplayFormatter().format(result) == ({}, {}) and shown == [result.figure] * 2


def test_augment_mask_gives_binary_layers_colours_of_their_own():
    image = np.random.default_rng(1).random((5, 5))
    first, second = (image > 0.5).astype(int), image < 0.2
    (ax,) = plot([image, first, second], cmap='viridis', augment_mask=True, show=False).axes
    assert ax.images[0].get_cmap().name == 'viridis'         # not zeros and ones: its cmap
    colors = [ax.images[index].get_cmap()(1.0) for index in (1, 2)]
    assert colors == [matplotlib.colors.to_rgba(name) for name in ('mediumseagreen', 'orchid')]
    assert np.array_equal(drawn(ax, 1), first)               # zeros transparent
    (ax,) = plot([image, first], cmap='viridis', show=False).axes
    assert ax.images[1].get_cmap().name == 'viridis'         # without it, the cmap given
    (ax,) = plot([image, first], cmap=['viridis', 'red'], augment_mask=True, show=False).axes
    assert ax.images[1].get_cmap()(1.0) == matplotlib.colors.to_rgba('red')    # a colour given is kept


def test_show_with_a_window_backend(monkeypatch):
    result = plot(np.eye(3), show=False)
    monkeypatch.setattr(plt, 'get_backend', lambda: 'qtagg')
    with pytest.raises(ValueError, match="figure pyplot holds"):
        result.show()                           # closed by show=False: nothing can show it in a window
    figure = plt.figure()
    result = plot(np.eye(3), axes=figure.add_subplot())
    shown = []
    monkeypatch.setattr(result.figure, 'show', lambda: shown.append(True))
    result.redraw()
    assert shown == [True]


def test_wrapped_titles_and_loss_options():
    title = 'a long title of several words'
    result = plot([np.eye(2), np.eye(2)], combine='separate', title=title, title_wrap_width=12,
                  xlabel='x,y,z', xlabel_wrap_width=3, xlabel_wrap_delimiter=',', suptitle='one two',
                  suptitle_wrap_width=3, show=False)
    assert result.axes[0].get_title() == 'a long title \nof several \nwords'
    assert result.axes[1].get_xlabel() == 'x,y,\nz' and result.figure.get_suptitle() == 'one \ntwo'
    loss = np.arange(10.0)
    (ax,) = plot((loss, np.full(10, 0.1)), mode='loss', final_window=4, log_lr=True, window=None, show=False).axes
    assert ax.get_legend().get_texts()[0].get_text() == 'loss (mean of the last 4: 7.5)'
    assert ax.figure.axes[1].get_yscale() == 'log'


def test_batchflow_colour_map():
    (ax,) = plot(np.eye(3), cmap='batchflow', show=False).axes
    cmap = ax.images[0].get_cmap()
    magma = matplotlib.colormaps['magma']
    assert cmap.name == 'batchflow' and cmap(0.0) == magma(0.0) and cmap(1.0) == (1, 1, 1, 1)    # into white
    assert np.allclose(cmap(0.5), magma(0.5 * 256 / 230), atol=0.01)        # magma over nine tenths
    (ax,) = plot(np.eye(2), mode='matrix', cmap='batchflow', show=False).axes
    assert ax.images[0].get_cmap().name == 'batchflow'
