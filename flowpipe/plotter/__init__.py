"""Plots of data for notebooks and reports: images with masks, matrices, histograms, curves and losses (batchflow's
``plot``), on matplotlib, which flowpipe does not depend on (``pip install 'flowpipe[figures]'``)."""
from .plot import Plot, plot
from .subplot import Layer, Subplot

__all__ = ['Layer', 'Plot', 'Subplot', 'plot']
