"""What a figure in ``img/`` draws, kept inside its PNG, and how two such records are compared.

A figure's pixels depend on matplotlib, FreeType and the fonts installed, so "is ``img/`` current?" cannot be
answered by comparing pixels on every machine. ``make_figures.py`` stores, in a ``tEXt`` chunk of each PNG, a
record of what the figure shows: the numbers drawn (``data``) and a digest of the code that draws them
(``code``). ``differences`` compares two records: the same code, the same structure (keys, lengths, strings,
integers, flags) and every float within ``RTOL`` relative (or ``ATOL`` absolute, for round-off-sized values).
No library version changes a record; a change of the data, the training or the drawing code does.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from pathlib import Path
from typing import Any

KEY = 'flowpipe:figure'
RTOL = 1e-2     # the trained curves of another CPU's arithmetic stay within this; a changed run does not
ATOL = 1e-12    # differences of round-off size (the float64 layout differences) count as equal
SIGNATURE = b'\x89PNG\r\n\x1a\n'


def digest(*sources: str) -> str:
    """A short digest of source texts, independent of line endings."""
    text = '\n'.join(source.replace('\r\n', '\n') for source in sources)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]


def _chunks(raw: bytes) -> list[tuple[bytes, bytes]]:
    if not raw.startswith(SIGNATURE):
        raise ValueError(f"Expected a PNG file (it starts with {SIGNATURE!r}). Received: {raw[:8]!r}.")
    found, at = [], len(SIGNATURE)
    while at < len(raw):
        length, kind = struct.unpack('>I4s', raw[at:at + 8])
        found.append((kind, raw[at + 8:at + 8 + length]))
        at += 12 + length
    return found


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF)


def stamp(path: Path, record: dict[str, Any]) -> None:
    """Store ``record`` (JSON) in the PNG at ``path``, replacing an earlier record; the pixels are unchanged."""
    text = json.dumps(record, sort_keys=True, separators=(',', ':'))
    body = [_chunk(kind, data) for kind, data in _chunks(Path(path).read_bytes())
            if not (kind == b'tEXt' and data.startswith(KEY.encode() + b'\0'))]
    body.insert(len(body) - 1, _chunk(b'tEXt', KEY.encode() + b'\0' + text.encode('latin-1')))
    Path(path).write_bytes(SIGNATURE + b''.join(body))


def read(path: Path) -> dict[str, Any] | None:
    """The record stored in the PNG at ``path``, or None where it has none."""
    for kind, data in _chunks(Path(path).read_bytes()):
        if kind == b'tEXt' and data.startswith(KEY.encode() + b'\0'):
            return json.loads(data[len(KEY) + 1:].decode('latin-1'))
    return None


def differences(made: Any, kept: Any, where: str = '') -> list[str]:
    """Where the records ``made`` and ``kept`` differ, each place as ``'path: made vs kept'``; empty if equal."""
    if isinstance(made, dict) and isinstance(kept, dict):
        if sorted(made) != sorted(kept):
            return [f'{where or "/"}: keys {sorted(made)} vs {sorted(kept)}']
        return [line for key in made for line in differences(made[key], kept[key], f'{where}/{key}')]
    if isinstance(made, list) and isinstance(kept, list):
        if len(made) != len(kept):
            return [f'{where}: {len(made)} values vs {len(kept)}']
        return [line for i, (a, b) in enumerate(zip(made, kept)) for line in differences(a, b, f'{where}[{i}]')]
    if isinstance(made, float) and isinstance(kept, float):
        if math.isclose(made, kept, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(made) and math.isnan(kept)):
            return []
        return [f'{where}: {made!r} vs {kept!r}']
    return [] if type(made) is type(kept) and made == kept else [f'{where}: {made!r} vs {kept!r}']
