"""Targets for ``test_processes.py``'s child processes."""
import os
import threading


def obey(tasks, ready):
    """End at the first message."""
    ready.set()
    tasks.get()


def hang(tasks, ready):
    """Never read the task queue, never end."""
    ready.set()
    threading.Event().wait()


def hang_writing(path):
    """Write this process's pid to ``path``, then never end."""
    with open(path, 'a') as file:
        file.write(f'{os.getpid()}\n')
    threading.Event().wait()
