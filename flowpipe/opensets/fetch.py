"""Downloading an open set's files: atomic writes, optional progress bar, and a clear message offline."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from tqdm.auto import tqdm

__all__ = ['download', 'fetch_missing']

TIMEOUT = 30  # seconds without a byte before a download counts as failed: offline machines fail fast
_CHUNK = 1 << 20


def download(url: str, dest: str | os.PathLike, bar: bool = False) -> Path:
    """Download ``url`` to ``dest`` atomically: the bytes go to a temporary file that is renamed at the end.

    An interrupted download therefore never leaves a truncated file under the final name.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f'.{dest.name}.', suffix='.part', dir=dest.parent)
    try:
        with os.fdopen(fd, 'wb') as out, urlopen(url, timeout=TIMEOUT) as response:
            total = response.headers.get('Content-Length') if getattr(response, 'headers', None) else None
            with tqdm(total=int(total) if total else None, unit='B', unit_scale=True, desc=dest.name,
                      disable=not bar, leave=False) as progress:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    progress.update(len(chunk))
        os.replace(tmp_name, dest)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return dest


def fetch_missing(folder: Path, files: Mapping[str, str], what: str, bar: bool = False) -> None:
    """Download those of ``files`` (``{file name: url}``) that ``folder`` lacks.

    Raises:
        FileNotFoundError: a download failed (no network, server error); the message lists the files to put
            into ``folder`` by hand and where to get them.
    """
    missing = {name: url for name, url in files.items() if not (folder / name).exists()}
    for name, url in missing.items():
        try:
            download(url, folder / name, bar=bar)
        except (URLError, OSError, ValueError) as error:
            listing = '\n'.join(f'  {folder / n}  <-  {u}' for n, u in missing.items())
            raise FileNotFoundError(
                f"Expected the {what} files in {str(folder)!r}, and could not download {name!r} ({error}). "
                f"Put these files there by hand (or pass path= to the folder that has them):\n{listing}"
            ) from error

