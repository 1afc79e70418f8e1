"""``import batchflow`` in any process that has ``scripts/batchflow_shim`` and ``scripts`` on ``PYTHONPATH``:
installs the import alias of ``scripts/batchflow_alias.py`` and becomes ``flowpipe`` itself.

``scripts/batchflow_compat.sh`` puts this folder on ``PYTHONPATH`` so that the processes a test starts (Research's
worker processes, spawned or from a forkserver, which import the test module to find its classes) resolve
``batchflow`` as the pytest process does. It is not a batchflow: nothing here is imported by flowpipe.
"""
import sys

import batchflow_alias
import flowpipe

batchflow_alias.install()
sys.modules[__name__] = flowpipe    # the import statement hands back what sys.modules holds under the name
