"""A module that a hostile file names: importing it leaves a mark (the file ``HOSTILE_CANARY`` names), so a test
can tell whether a reader imported what a file named."""
import os

if os.environ.get('HOSTILE_CANARY'):
    open(os.environ['HOSTILE_CANARY'], 'w').close()


def anything(*args):
    """What the hostile file calls."""
    return args
