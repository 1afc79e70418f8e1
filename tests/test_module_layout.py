"""The split of ``TorchModel``, of the run and of the pipeline into modules a reader can hold in their head: each under the size guide,
every public name importable from where it was, and pickles naming the classes' modules as before (so that files
and checkpoints written before the split still load)."""
import importlib
import pickle
from pathlib import Path

import dill
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

#: the modules that the split made of ``models/torch/model.py``, ``execution/run.py`` and two of ``pipeline/``
SPLIT = ('flowpipe/models/torch/model.py', 'flowpipe/models/torch/building.py', 'flowpipe/models/torch/steps.py',
         'flowpipe/models/torch/files.py', 'flowpipe/execution/run.py', 'flowpipe/execution/run_loop.py',
         'flowpipe/pipeline/pipeline.py', 'flowpipe/pipeline/profiling.py', 'flowpipe/pipeline/model_actions.py',
         'flowpipe/pipeline/loaded_models.py')


@pytest.mark.parametrize('path', SPLIT)
def test_each_part_is_under_the_size_guide_and_says_what_it_is_for(path):
    text = (ROOT / path).read_text()
    assert len(text.splitlines()) < 400, f'{path} has {len(text.splitlines())} lines'
    module = importlib.import_module(path[:-3].replace('/', '.'))
    assert module.__doc__ and len(module.__doc__.split()) > 20


@pytest.mark.parametrize('module, names', [
    ('flowpipe.models.torch.model', ('FETCHES', 'TorchModel', 'check_fetches')),
    ('flowpipe.models.torch', ('FETCHES', 'TorchModel')),
    ('flowpipe.execution.run', ('RunArgs', 'iterate', 'next_batch', 'run_pipeline', 'whole_batches')),
    ('flowpipe.execution', ('RunArgs', 'iterate', 'next_batch', 'run_pipeline')),
    ('flowpipe.pipeline.model_actions', ('PendingModel', 'load_model', 'loaded_files', 'mark_loaded')),
])
def test_public_names_stay_where_they_were(module, names):
    loaded = importlib.import_module(module)
    assert set(names) <= set(loaded.__all__)
    assert all(hasattr(loaded, name) for name in names)


def test_the_model_is_assembled_from_its_parts():
    from flowpipe.models.torch.building import ModelBuilding
    from flowpipe.models.torch.files import ModelFiles
    from flowpipe.models.torch.model import TorchModel
    from flowpipe.models.torch.steps import ModelSteps
    assert TorchModel.__module__ == 'flowpipe.models.torch.model'
    assert TorchModel.train is ModelSteps.train and TorchModel.predict is ModelSteps.predict
    assert TorchModel.save is ModelFiles.save and TorchModel.load is ModelFiles.load
    assert TorchModel.build_network is ModelBuilding.build_network
    assert TorchModel.__reduce__.__module__ == TorchModel.from_file.__module__ == 'flowpipe.models.torch.model'


def test_pickles_name_the_classes_where_they_always_were():
    from flowpipe.execution.run import RunArgs
    from flowpipe.models.torch import SimpleCNN, TorchModel
    built = TorchModel({'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'model': torch.nn.Linear(4, 3), 'loss': 'ce'})
    built.train(x=np.ones((2, 4), 'float32'), y=np.array([0, 1]))
    data = pickle.dumps(built)
    assert b'flowpipe.models.torch.model' in data and b'TorchModel' in data
    copy = pickle.loads(data)
    assert copy.iteration == 1 and type(copy) is TorchModel
    pending = pickle.dumps(SimpleCNN({'inputs/labels/classes': 3, 'body/filters': (4,)}))
    assert b'flowpipe.models.torch.ready' in pending and type(pickle.loads(pending)) is SimpleCNN
    args = dill.dumps(RunArgs.merge(None, batch_size=3, n_epochs=2))
    assert b'flowpipe.execution.run' in args and b'RunArgs' in args
    assert dill.loads(args) == RunArgs(batch_size=3, n_epochs=2)


def test_the_pipeline_keeps_its_profile_accessors_and_no_instance_dict():
    from tests.pipeline.helpers import make_dataset
    pipeline = make_dataset().p.add(1)
    assert not hasattr(pipeline, '__dict__')            # still only the slots of its definition and state
    assert pipeline.profiler is None and pipeline.profile_info is None and pipeline.profile_rows is None
    pipeline.run(5, profile=True)
    assert pipeline.profiler is not None and '0: add' in pipeline.profile_summary()
