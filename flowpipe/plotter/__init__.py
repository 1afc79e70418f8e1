"""Plots of data for notebooks and reports: images with masks, histograms, curves and losses (batchflow's
``plot``), on matplotlib, which flowpipe does not depend on (``pip install 'flowpipe[figures]'``)."""
from .plot import Plot, plot

__all__ = ['Plot', 'plot']
