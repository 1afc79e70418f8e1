"""Sphinx configuration of flowpipe's API reference: ``python -m sphinx -W -b html docs/api docs/api/_build``
(``make docs``). The pages are made from the docstrings: each package's public names (its ``__all__``), once each,
and every pipeline action with its parameters (``_ext/flowpipe_reference.py``)."""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..')))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), '_ext')))

project = 'flowpipe'
author = 'the flowpipe authors'
extensions = ['sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'flowpipe_reference']
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True      # a class's Attributes section as fields: a property of the same name is documented once
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_preserve_defaults = True
html_theme = 'alabaster'
exclude_patterns = ['_build']
suppress_warnings = ['ref.python']      # cross-references to torch's and numpy's names, which are not documented here
