"""A run with callbacks whose every rank captures its own output: what it prints, its bars and its warnings."""
import contextlib
import io
import warnings

from flowpipe import B, Pipeline, V, print0
from flowpipe.callbacks import EarlyStopping, Validate
from flowpipe.parallel import distributed

from ..parallel import dist_jobs


def train_and_capture():
    """Train 2 epochs with a progress bar, a validation with its own bar on every rank (``shard=False``) whose loss
    is nan (so ``EarlyStopping`` warns); this rank's stdout, stderr and warnings."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        print0('printed by rank 0')
        print(f'printed by rank {distributed.rank()}')
        data = dist_jobs.dataset()
        train = (Pipeline().init_model('net', config=dist_jobs.config())
                 .train_model('net', x=B.x, y=B.y)) << data
        val = (Pipeline().import_model('net', train).init_variable('losses', [])
               .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << data
        validate = Validate(val, batch_size=10, metrics={'loss': lambda p: float('nan')}, shard=False, bar='t')
        train.run(8, n_epochs=2, bar='t', callbacks=[validate, EarlyStopping('val/loss')])
        print0('done')
    return {'rank': distributed.rank(), 'out': out.getvalue(), 'err': err.getvalue(),
            'warnings': [str(warning.message) for warning in caught]}
