"""Data given where ``Dataset`` takes its index (``Dataset(X, y)``, ``Dataset(X)``, ``Dataset({'x': X})``) is refused
with the ``preloaded=`` form, describing the array by its shape instead of printing it."""
import numpy as np
import pytest
import torch

from flowpipe import Dataset

X, Y = np.zeros((100, 3)), np.arange(100)


@pytest.mark.parametrize('arguments', [(X, Y), (X,), ({'x': X, 'y': Y},), ((X, Y),), (np.linspace(0, 1, 5),),
                                       (torch.zeros(10, 3),)], ids=['X, y', 'X', 'dict', 'tuple', 'floats', 'tensor'])
def test_data_given_as_the_index_shows_the_preloaded_form(arguments):
    with pytest.raises(TypeError, match=r"Expected Dataset's first argument to say which items there are.*"
                                        r"Received: .*shape.*Dataset\(len\(X\), preloaded=\{'x': X, 'y': y\}\)") as info:
        Dataset(*arguments)
    assert '0., 0.' not in str(info.value) and len(str(info.value)) < 400      # the array is not printed


def test_an_array_given_as_the_batch_class_shows_the_preloaded_form():
    with pytest.raises(TypeError, match=r"batch_class, to be a Batch class\. Received: ndarray of shape \(100,\).*"
                                        r"preloaded="):
        Dataset(100, Y)


def test_the_forms_that_work_are_unchanged():
    dataset = Dataset(len(X), preloaded={'x': X, 'y': Y})
    assert len(dataset) == 100 and dataset.next_batch(10).x.shape == (10, 3)
    assert len(Dataset(np.arange(5))) == 5 and len(Dataset(np.array(['a', 'b']))) == 2
