"""A small dataset and batch class shared by the pipeline and execution tests."""
import numpy as np

from flowpipe.batch import Batch, action
from flowpipe.data import Dataset


class NumBatch(Batch):
    """A batch of numbers with a few cheap actions."""
    components = ('x',)

    @action
    def add(self, value=1):
        self.x = self.x + value
        return self

    @action
    def scale(self, factor):
        self.x = self.x * factor
        return self

    @action
    def fail(self, message='boom'):
        raise RuntimeError(message)

    @action
    def absorb(self, other):
        self.x = self.x + other.x
        return self

    @action(use_lock=True)
    def record(self, store):
        store.append(self.indices.tolist())
        return self


def make_dataset(size=10, **attributes):
    """A dataset of ``size`` items whose component ``x`` equals the item number."""
    return Dataset(size, batch_class=NumBatch, preloaded={'x': np.arange(size)}, **attributes)
