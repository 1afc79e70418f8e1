"""Downloads are atomic and report progress; failures leave nothing behind."""
import io

import pytest

from flowpipe.opensets import fetch


class FakeResponse(io.BytesIO):
    def __init__(self, payload, fail_after=None):
        super().__init__(payload)
        self.headers = {'Content-Length': str(len(payload))}
        self.fail_after = fail_after

    def read(self, size=-1):
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError('connection lost (test)')
        return super().read(min(size, 4) if size > 0 else size)


def test_download_writes_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, 'urlopen', lambda url, timeout=None: FakeResponse(b'0123456789'))
    path = fetch.download('https://example.org/file.bin', tmp_path / 'sub' / 'file.bin', bar=True)
    assert path.read_bytes() == b'0123456789'
    assert [p.name for p in path.parent.iterdir()] == ['file.bin']


def test_interrupted_download_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, 'urlopen', lambda url, timeout=None: FakeResponse(b'0123456789', fail_after=4))
    with pytest.raises(ConnectionResetError):
        fetch.download('https://example.org/file.bin', tmp_path / 'file.bin')
    assert list(tmp_path.iterdir()) == []


def test_fetch_missing_skips_present_files_and_explains_failures(tmp_path, monkeypatch):
    (tmp_path / 'a.gz').write_bytes(b'present')
    asked = []

    def offline(url, timeout=None):
        asked.append(url)
        raise fetch.URLError('no route to host')
    monkeypatch.setattr(fetch, 'urlopen', offline)
    with pytest.raises(FileNotFoundError) as error:
        fetch.fetch_missing(tmp_path, {'a.gz': 'https://x/a.gz', 'b.gz': 'https://x/b.gz'}, 'TEST')
    assert asked == ['https://x/b.gz']
    assert 'b.gz' in str(error.value) and 'a.gz' not in str(error.value).split('by hand')[1]
    assert str(tmp_path) in str(error.value) and 'no route to host' in str(error.value)
