"""Token data: sequential windows hold every target once; random windows are windows of the tokens, keyed by the
run's seed and the item's place in the global batch; packed documents reset positions and masks at ``eot``;
sequences pad with ``ignore_index``; a mapped token file is described without a full checksum and travels to
workers as its place on disk."""
import os

import dill
import numpy as np
import pytest

from flowpipe import B, Pipeline, V
from flowpipe.data import TokenSequences, TokenWindows, open_tokens
from flowpipe.data.shards import Shard
from flowpipe.data.token_files import SAMPLES, TokenFile, mapped_text, sampled_digest
from flowpipe.data.tokens import window_starts
from flowpipe.execution import canonical_values


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / 'train.bin'
    np.random.default_rng(1).integers(0, 65, size=5000).astype(np.uint16).tofile(path)
    return str(path)


@pytest.mark.parametrize('pad_last', [False, True])
def test_sequential_windows_hold_every_target_token_once_in_order(pad_last):
    tokens = np.arange(103) % 50
    windows = TokenWindows(tokens, 10, sequential=True, pad_last=pad_last)
    assert len(windows) == (11 if pad_last else 10)
    batch = windows.create_batch(windows.indices)
    targets, inputs = batch.targets.ravel(), batch.inputs.ravel()
    valid = targets != -100
    np.testing.assert_array_equal(targets[valid], tokens[1:1 + valid.sum()])
    np.testing.assert_array_equal(inputs[valid], tokens[:valid.sum()])
    assert valid.sum() == (102 if pad_last else 100) and batch.inputs.dtype == np.int64
    if pad_last:
        assert (batch.inputs[-1, 3:] == 0).all() and (batch.targets[-1, 2:] == -100).all()


def test_random_windows_are_windows_of_the_tokens_keyed_by_seed_and_place(token_file):
    tokens = open_tokens(token_file)
    windows = TokenWindows(token_file, 16, size=40)
    first, again = next(windows.gen_batch(8, seed=3)), next(windows.gen_batch(8, seed=3))
    np.testing.assert_array_equal(first.inputs, again.inputs)
    for x, y in zip(first.inputs, first.targets):
        start = int(np.flatnonzero([np.array_equal(tokens[s:s + 16], x) for s in range(len(tokens) - 16)])[0])
        np.testing.assert_array_equal(y, tokens[start + 1:start + 17])
    other = next(windows.gen_batch(8, seed=4))
    assert not np.array_equal(first.inputs, other.inputs)
    batches = list(windows.gen_batch(8, n_iters=3, seed=3))
    assert not np.array_equal(batches[0].inputs, batches[1].inputs)
    # a rank's shard: the rows its items get in the whole batch, whatever the other items
    index = windows.index.subset(np.arange(3, 6))
    index.shard = Shard(3, 6, 8)
    shard = windows.create_batch(index)
    shard.seed = first.seed
    np.testing.assert_array_equal(shard.inputs, first.inputs[3:6])


def test_window_starts_cover_the_range_evenly():
    starts = window_starts(np.random.SeedSequence(0), np.arange(20000), 7)
    assert starts.min() == 0 and starts.max() == 6
    counts = np.bincount(starts, minlength=7)
    assert counts.min() > 2600 and counts.max() < 3100        # 2857 expected each: 5 sigma is about 250


def test_a_run_trains_on_the_windows_gen_batch_gives_for_its_seed(token_file):
    windows = TokenWindows(token_file, 8)
    done = (Pipeline().init_variable('x', []).update(V('x', mode='a'), B.inputs)) << windows
    done.run(4, n_iters=3, seed=9, shuffle=True)
    for got, want in zip(done.v('x'), windows.gen_batch(4, n_iters=3, seed=9)):
        np.testing.assert_array_equal(got, want.inputs)


def test_packed_documents_reset_positions_and_the_mask_at_end_of_text():
    documents = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    windows = TokenWindows.from_documents(documents, 4, eot=0, reset=True, sequential=True)
    np.testing.assert_array_equal(windows.tokens, [1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 0])
    batch = windows.create_batch(windows.indices)
    np.testing.assert_array_equal(batch.inputs, [[1, 2, 3, 0], [4, 5, 0, 6]])
    np.testing.assert_array_equal(batch.positions, [[0, 1, 2, 3], [0, 1, 2, 0]])
    document = np.array([0, 0, 0, 1])
    want = (document[:, None] == document[None, :]) & np.tril(np.ones((4, 4), dtype=bool))
    np.testing.assert_array_equal(batch.attention_mask[1], want)
    assert batch.attention_mask[0].sum() == 10 and batch.attention_mask.dtype == bool


class _Encoding:
    def __init__(self, ids):
        self.ids = ids


@pytest.mark.parametrize('tokenizer', [
    lambda text: [ord(c) - 96 for c in text],
    type('Encoder', (), {'encode': lambda self, text: [ord(c) - 96 for c in text]})(),
    lambda text: _Encoding([ord(c) - 96 for c in text]),
    lambda text: {'input_ids': [ord(c) - 96 for c in text]},
])
def test_text_documents_go_through_the_tokenizer(tokenizer):
    sequences = TokenSequences(['abc', 'de'], tokenizer=tokenizer)
    batch = sequences.create_batch(sequences.indices)
    np.testing.assert_array_equal(batch.inputs, [[1, 2], [4, 0]])
    np.testing.assert_array_equal(batch.targets, [[2, 3], [5, -100]])
    np.testing.assert_array_equal(batch.attention_mask, [[1, 1], [1, 0]])


def test_sequences_pad_to_the_longest_of_their_batch_and_keep_max_length():
    sequences = TokenSequences([[5, 6, 7, 8, 9], [1, 2], [3]], max_length=3, ignore_index=-1, pad_token=7)
    batch = sequences.create_batch([1, 2])
    np.testing.assert_array_equal(batch.inputs, [[1], [7]])
    np.testing.assert_array_equal(batch.targets, [[2], [-1]])
    whole = sequences.create_batch(sequences.indices)
    np.testing.assert_array_equal(whole.inputs[0], [5, 6, 7])
    np.testing.assert_array_equal(whole.targets[0], [6, 7, 8])


def test_text_without_a_tokenizer_and_bad_arguments_are_refused(token_file, tmp_path):
    with pytest.raises(ValueError, match='tokenizer='):
        TokenSequences(['some text'])
    with pytest.raises(ValueError, match='block_size \\+ 1'):
        TokenWindows(np.arange(10), 10)
    with pytest.raises(ValueError, match='eot='):
        TokenWindows(np.arange(100), 10, reset=True)
    with pytest.raises(ValueError, match='block_size as an int'):
        TokenWindows(np.arange(100), 0)
    with pytest.raises(ValueError, match='token dtype'):
        open_tokens(token_file, 'float32')
    odd = tmp_path / 'odd.bin'
    odd.write_bytes(b'abc')
    with pytest.raises(ValueError, match='whole uint16 tokens'):
        open_tokens(odd)
    with pytest.raises(FileNotFoundError, match='tofile'):
        open_tokens(tmp_path / 'missing.bin')
    with pytest.raises(TypeError, match='1-D array'):
        TokenWindows(np.zeros((4, 40), dtype=np.int64), 4)


def test_a_mapped_file_is_described_by_size_and_sampled_chunks_not_a_full_checksum(token_file, monkeypatch):
    tokens = open_tokens(token_file)
    text = canonical_values.text(tokens)
    assert text.startswith('memmap(dtype=uint16, shape=(5000,), file bytes=10000, sampled blake2b=')
    in_memory = canonical_values.text(np.array(tokens))
    assert 'crc32=' in in_memory                             # arrays in memory keep their full checksum
    monkeypatch.setattr(canonical_values.zlib, 'crc32', lambda *a: pytest.fail('a full checksum of a mapped file'))
    assert canonical_values.text(tokens) == text
    assert canonical_values.text(tokens[100:]) != text        # a view: its own shape and samples
    changed = np.array(tokens)
    changed[0] += 1                                          # the first chunk is always sampled
    changed.tofile(token_file)
    assert canonical_values.text(open_tokens(token_file)) != text


def test_the_sampled_digest_reads_only_its_chunks():
    class Counting(np.ndarray):
        read = 0

        def __getitem__(self, key):
            value = super().__getitem__(key)
            Counting.read += np.size(value)
            return value
    array = np.arange(10 ** 6, dtype=np.uint32).view(Counting)
    digest = sampled_digest(array)
    assert Counting.read <= SAMPLES * 4096 // 4 and len(digest) == 16
    assert digest != sampled_digest(np.arange(10 ** 6, dtype=np.uint32) + (np.arange(10 ** 6) == 0))


def test_a_dataset_over_a_mapped_file_travels_as_its_place_on_disk(token_file):
    tokens = open_tokens(token_file)
    windows = TokenWindows(tokens[1000:], 16, sequential=True)
    payload = dill.dumps(windows)
    assert len(payload) < 4000 < windows.tokens.nbytes        # the tokens stay in the file
    back = dill.loads(payload)
    assert isinstance(back.tokens, np.memmap)
    np.testing.assert_array_equal(back.tokens, tokens[1000:])
    np.testing.assert_array_equal(back.create_batch([3]).inputs, windows.create_batch([3]).inputs)
    assert TokenFile.of(np.array(tokens)) is None
    with open(token_file, 'ab') as file:
        file.write(b'\0\0')
    with pytest.raises(ValueError, match='changed during the run'):
        dill.loads(payload)
    assert os.path.getsize(token_file) == 10002
    assert mapped_text(np.arange(100)) is None


def test_a_runs_description_holds_its_tokens_so_a_checkpoint_of_other_tokens_is_refused(token_file, monkeypatch):
    from flowpipe.execution import canonical
    from flowpipe.execution.run import RunArgs

    def described(windows):
        done = Pipeline().init_variable('x', []) << windows
        return canonical.describe(done, RunArgs(batch_size=4, n_iters=2))['dataset']
    mapped = described(TokenWindows(token_file, 8))
    assert 'memmap(dtype=uint16, shape=(5000,), file bytes=10000, sampled blake2b=' in mapped
    assert 'random windows of 8' in mapped
    tokens = np.array(open_tokens(token_file))
    assert 'crc32=' in described(TokenWindows(tokens, 8))
    tokens[2500] += 1
    assert described(TokenWindows(tokens, 8)) != described(TokenWindows(np.array(open_tokens(token_file)), 8))
    assert described(TokenWindows(token_file, 8, sequential=True)) != mapped
