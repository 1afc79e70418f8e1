"""Token data for language models: ``TokenWindows`` (windows of a token file or array, packed documents) and
``TokenSequences`` (one item per sequence, padded per batch); their batches are
``flowpipe.batch.TokenBatch``-es.

A batch holds ``inputs`` and ``targets``, ``(items, block_size)`` int64 arrays, the targets the inputs shifted by
one token (nanoGPT's ``x`` and ``y``).

**Random windows** (``TokenWindows(tokens, block_size)``): item ``j`` of the run's batch ``seq`` (its place in the
global batch, whatever rank, replica or micro-batch trains on it) starts at a token drawn by a counter-based hash
keyed by the batch's seed (the run's seed and ``seq``: ``flowpipe.execution.seeds``) and ``j``: splitmix64's
finalizer, twice, over ``key + (j + 1) * 0x9E3779B97F4A7C15``, modulo the number of starts ``len(tokens) -
block_size`` (the modulo's bias is under ``count / 2**64``). One device, replicas, micro-batches, 2 ranks and a run
resumed on any of them so train on the same tokens, and a resumed run draws what the uninterrupted one would have.
The windows are cut when the run gives the batch its seed; the item ids do not matter (an epoch is ``size`` draws:
by default about the number of tokens, ``(len(tokens) - 1) // block_size``), so ``shuffle`` changes nothing.

**Sequential windows** (``sequential=True``): item ``k`` is the window starting at ``k * block_size``: every
target token once, in order, for evaluation; ``pad_last=True`` keeps the last, shorter window, its missing inputs
``pad_token`` and its missing targets ``ignore_index`` (which ``'loss': 'ce'`` leaves out).

**Packed documents** (``TokenWindows.from_documents``): the documents, each followed by the end-of-text token
``eot``, as one token array; ``reset=True`` (with any ``eot``) adds ``positions``, each token's position in its
document (0 after an ``eot``), and ``attention_mask``, ``(items, block_size, block_size)`` bools: causal and
within one document (``True``: may attend), for ``scaled_dot_product_attention``'s ``attn_mask``.

**Sequences** (``TokenSequences``): each item one sequence; a batch pads to its longest (inputs ``pad_token``,
targets ``ignore_index``) and holds ``attention_mask``, ``(items, length)`` int64, 1 on real tokens.

Text documents are tokenized by ``tokenizer=``: a callable (a Hugging Face tokenizer) or an object with
``encode`` (``tiktoken``, ``tokenizers``); what it returns may be ids, an object with ``ids`` or a mapping with
``input_ids``. A token file is mapped, never read whole (``flowpipe.data.token_files``).
"""
from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from .arrays import object_array
from .dataset import Dataset
from .index import DatasetIndex
from .token_files import TokenFile, mapped_text, open_tokens

if TYPE_CHECKING:
    from ..batch.tokens import TokenBatch

__all__ = ['IGNORE_INDEX', 'TokenSequences', 'TokenWindows', 'document_positions', 'pad_sequences', 'tokenize',
           'window_starts']

#: the targets a loss leaves out by default (torch's ``cross_entropy``'s ``ignore_index``)
IGNORE_INDEX = -100
_WINDOWS_KEY = 0x746F6B656E73       # the seed tree's child the windows draw from ('tokens'), apart from R(...)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer in place on a uint64 array (numpy's array arithmetic wraps)."""
    values ^= values >> np.uint64(30)
    values *= _C1
    values ^= values >> np.uint64(27)
    values *= _C2
    values ^= values >> np.uint64(31)
    return values


def window_starts(seed: np.random.SeedSequence, places: np.ndarray, count: int) -> np.ndarray:
    """The first token of the random windows of the items at ``places`` of a batch with ``seed``: int64 in
    ``[0, count)`` (see the module docstring)."""
    child = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, _WINDOWS_KEY))
    key = child.generate_state(1, np.uint64)[0]
    counters = np.asarray(places, dtype=np.uint64) + np.uint64(1)
    counters *= _GOLDEN
    counters += key
    return (_mix(_mix(counters)) % np.uint64(count)).astype(np.int64)


def _token_batch(batch_class: type | None) -> type:
    """``batch_class``, ``flowpipe.batch.TokenBatch`` by default (batch imports data: imported when used)."""
    if batch_class is None:
        from ..batch.tokens import TokenBatch
        batch_class = TokenBatch
    return batch_class


def _global_places(index: DatasetIndex) -> np.ndarray:
    """The places of a batch's items in the run's global batch (a rank's shard starts past the others')."""
    shard = getattr(index, 'shard', None)
    return np.arange(shard.start, shard.stop) if shard is not None else np.arange(len(index))


def _as_tokens(tokens: Any, dtype: Any) -> np.ndarray:
    if isinstance(tokens, (str, os.PathLike)):
        return open_tokens(tokens, dtype)
    array = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if array.ndim != 1 or array.dtype.kind not in 'iu':
        raise TypeError(f"Expected tokens as a token file, or a 1-D array or list of integer ids. Received: "
                        f"{type(tokens).__name__} of dtype {array.dtype} and shape {array.shape}")
    return array


class TokenWindows(Dataset):
    """Windows of ``block_size + 1`` tokens: random ones for training, sequential ones for evaluation.

    Args:
        tokens: a token file's path (read as ``dtype``, mapped), an ``np.memmap`` or array of ids, or a list.
        block_size: the tokens of each item's ``inputs`` (its ``targets`` are the next ones).
        sequential: non-overlapping windows in order, one item each, instead of random ones.
        size: the items of an epoch of random windows (``(len(tokens) - 1) // block_size`` by default).
        dtype: the dtype of a token file.
        eot: the end-of-text token, which ends each document (for ``reset``).
        reset: add ``positions`` and ``attention_mask`` reset after each ``eot`` (see the module docstring).
        pad_last: keep the last, shorter sequential window, padded.
        pad_token, ignore_index: what pads the inputs and the targets.
        **attributes: dataset attributes (``vocab_size=65``, read as ``D.vocab_size``).

    Raises:
        ValueError: fewer than ``block_size + 1`` tokens, a ``block_size`` below 1, or ``reset`` without ``eot``.
    """

    def __init__(self, tokens: Any, block_size: int, *, sequential: bool = False, size: int | None = None,
                 dtype: Any = 'uint16', eot: int | None = None, reset: bool = False, pad_last: bool = False,
                 pad_token: int = 0, ignore_index: int = IGNORE_INDEX, batch_class: type | None = None,
                 **attributes: Any):
        array = _as_tokens(tokens, dtype)
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
            raise ValueError(f"Expected block_size as an int >= 1. Received: block_size={block_size!r}")
        if len(array) < block_size + 1:
            raise ValueError(f"Expected at least block_size + 1 = {block_size + 1} tokens for one window. "
                             f"Received: {len(array)} tokens; use a smaller block_size or more text")
        if reset and eot is None:
            raise ValueError("Expected eot= (the end-of-text token id) with reset=True: documents end at it. "
                             "Received: eot=None")
        targets = len(array) - 1
        if sequential:
            count = targets // block_size + (1 if pad_last and targets % block_size else 0)
        else:
            count = max(1, targets // block_size) if size is None else int(size)
        super().__init__(count, batch_class=_token_batch(batch_class), **attributes)
        self.tokens, self._file = array, TokenFile.of(array)
        self.block_size, self.sequential, self.eot, self.reset = int(block_size), sequential, eot, reset
        self.pad_token, self.ignore_index = pad_token, ignore_index

    @classmethod
    def from_documents(cls, documents: Sequence[Any], block_size: int, eot: int, *,
                       tokenizer: Any = None, **kwargs: Any) -> TokenWindows:
        """Windows of ``documents`` (texts or id sequences, see ``tokenize``) packed into one array, each followed
        by ``eot``; ``kwargs`` as ``TokenWindows``' (``reset=True``, ``sequential=True``...)."""
        pieces = [np.append(ids, eot) for ids in tokenize(documents, tokenizer)]
        packed = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        if packed.size and packed.min() >= 0:
            packed = packed.astype(np.uint16 if packed.max() < 1 << 16 else np.uint32)
        return cls(packed, block_size, eot=eot, **kwargs)

    def __repr__(self) -> str:
        kind = 'sequential' if self.sequential else 'random'
        return (f"{type(self).__name__}({kind} windows of {self.block_size} of {len(self.tokens)} tokens, "
                f"size={len(self)})")

    def data_text(self) -> str:
        """The tokens and windows, for a run's canonical description: a checkpoint of other tokens is refused (a
        mapped file by its size and sampled chunks, ``flowpipe.data.token_files``; an array by its checksum)."""
        tokens = self.tokens
        described = mapped_text(tokens) or (f'array(dtype={tokens.dtype}, shape={tokens.shape}, '
                                            f'crc32={zlib.crc32(np.ascontiguousarray(tokens).data)})')
        kind = 'sequential' if self.sequential else 'random'
        return (f'{kind} windows of {self.block_size} of tokens {described}, eot={self.eot!r}, '
                f'reset={self.reset!r}, pad={self.pad_token!r}/{self.ignore_index!r}')

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if state.get('_file') is not None:       # a mapped file travels as where it lies, mapped again there
            state['tokens'] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.tokens is None:
            self.tokens = self._file.open()

    def create_batch(self, index: Any, pos: bool = False) -> TokenBatch:
        """A batch of the items ``index``; a random-window batch is cut when it gets its seed."""
        index = self.batch_index(index, pos)
        batch = self.batch_class(index, dataset=self, check=False)
        if self.sequential:
            self.fill(batch, None)
        else:
            batch._windows = self
        return batch

    def gen_batch(self, batch_size: int, shuffle: bool | int = False, n_iters: int | None = None,
                  n_epochs: int | None = None, drop_last: bool = False, seed: Any = None,
                  whole_epochs: bool = False) -> Iterator[TokenBatch]:
        """Batches without a pipeline, batch ``k`` seeded as a run's batch ``k`` with root ``seed`` (fresh
        entropy for ``None``)."""
        root = np.random.SeedSequence(seed).entropy
        for seq, batch in enumerate(super().gen_batch(batch_size, shuffle, n_iters, n_epochs, drop_last, seed,
                                                      whole_epochs)):
            batch.seed = np.random.SeedSequence(root, spawn_key=(1, seq))
            yield batch

    def next_batch(self, *args: Any, **kwargs: Any) -> TokenBatch:
        """The next batch of the iteration kept in the index, with fresh random windows."""
        batch = super().next_batch(*args, **kwargs)
        if batch._windows is not None:
            batch.seed = np.random.SeedSequence()
        return batch

    def fill(self, batch: TokenBatch, seed: np.random.SeedSequence | None) -> None:
        """Cut ``batch``'s windows: sequential ones by item id, random ones keyed by ``seed`` and the items'
        places in the global batch."""
        size, tokens = self.block_size, self.tokens
        if self.sequential:
            starts = batch.index.indices.astype(np.int64) * size
        else:
            starts = window_starts(seed, _global_places(batch.index), len(tokens) - size)
        positions = starts[:, None] + np.arange(size + 1)
        inside = positions < len(tokens)
        windows = tokens[np.minimum(positions, len(tokens) - 1)].astype(np.int64)
        inputs, targets = np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])
        if not inside.all():
            inputs[~inside[:, :-1]] = self.pad_token
            targets[~inside[:, 1:]] = self.ignore_index
        data = {'inputs': inputs, 'targets': targets}
        if self.reset:
            data.update(document_positions(inputs, self.eot))
        batch.set_tokens(data)


def document_positions(inputs: np.ndarray, eot: int) -> dict[str, np.ndarray]:
    """``positions`` and ``attention_mask`` of windows of packed documents: a document starts at a window's start
    and after each ``eot`` (see the module docstring)."""
    items, length = inputs.shape
    starts = np.zeros((items, length), dtype=bool)
    starts[:, 0] = True
    starts[:, 1:] = inputs[:, :-1] == eot
    steps = np.broadcast_to(np.arange(length), (items, length))
    first = np.maximum.accumulate(np.where(starts, steps, 0), axis=1)
    documents = np.cumsum(starts, axis=1)
    causal = np.tril(np.ones((length, length), dtype=bool))
    mask = (documents[:, :, None] == documents[:, None, :]) & causal
    return {'positions': (steps - first).astype(np.int64), 'attention_mask': mask}


def _encode(tokenizer: Any, text: str) -> Any:
    if callable(tokenizer):
        encoded = tokenizer(text)
    elif callable(getattr(tokenizer, 'encode', None)):
        encoded = tokenizer.encode(text)
    else:
        raise TypeError(f"Expected tokenizer= as a callable or an object with encode(text) (tiktoken, tokenizers). "
                        f"Received: {tokenizer!r:.80}")
    if hasattr(encoded, 'ids'):
        encoded = encoded.ids
    elif hasattr(encoded, 'keys') and 'input_ids' in encoded:
        encoded = encoded['input_ids']
    return encoded


def tokenize(documents: Sequence[Any], tokenizer: Any = None) -> list[np.ndarray]:
    """Each document as a 1-D int64 array of ids: a text through ``tokenizer`` (see the module docstring), ids
    as they are.

    Raises:
        ValueError: a text document without a tokenizer.
        TypeError: a document that is neither a text nor a sequence of integer ids.
    """
    if isinstance(documents, (str, bytes)):
        raise TypeError("Expected a list of documents. Received: one str; wrap it in a list")
    result = []
    for number, document in enumerate(documents):
        if isinstance(document, str):
            if tokenizer is None:
                raise ValueError(f"Expected tokenizer= to turn text documents into ids. Received: document {number} "
                                 f"is text ({document[:30]!r}...) and tokenizer=None; pass e.g. "
                                 f"tokenizer=tiktoken.get_encoding('gpt2')")
            document = _encode(tokenizer, document)
        ids = np.asarray(document)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in 'iu'):
            raise TypeError(f"Expected each document as a text or a 1-D sequence of integer ids. Received: "
                            f"document {number} of dtype {ids.dtype} and shape {ids.shape}")
        result.append(ids.astype(np.int64))
    return result


class TokenSequences(Dataset):
    """One sequence per item; a batch pads its sequences to the longest (see the module docstring).

    Args:
        documents: texts (with ``tokenizer``) or sequences of ids.
        tokenizer: see ``tokenize``.
        max_length: keep at most this many inputs of a sequence (its first ``max_length + 1`` tokens).
        pad_token, ignore_index: what pads the inputs and the targets.
        **attributes: dataset attributes.
    """

    def __init__(self, documents: Sequence[Any], tokenizer: Any = None, *, max_length: int | None = None,
                 pad_token: int = 0, ignore_index: int = IGNORE_INDEX, batch_class: type | None = None,
                 **attributes: Any):
        sequences = tokenize(documents, tokenizer)
        if max_length is not None:
            sequences = [ids[:max_length + 1] for ids in sequences]
        super().__init__(len(sequences), batch_class=_token_batch(batch_class), **attributes)
        self.sequences = object_array(sequences)
        self.pad_token, self.ignore_index = pad_token, ignore_index

    def create_batch(self, index: Any, pos: bool = False) -> TokenBatch:
        """A batch of the items ``index``, padded to its longest sequence."""
        index = self.batch_index(index, pos)
        batch = self.batch_class(index, dataset=self, check=False)
        batch.set_tokens(pad_sequences(self.sequences[self._data_index.get_pos(index.indices)], self.pad_token,
                                       self.ignore_index))
        return batch


def pad_sequences(sequences: Sequence[np.ndarray], pad_token: int = 0,
                  ignore_index: int = IGNORE_INDEX) -> dict[str, np.ndarray]:
    """``inputs``, ``targets`` and ``attention_mask`` of sequences padded to the longest (at least 1 position)."""
    length = max([len(ids) - 1 for ids in sequences] + [1])
    inputs = np.full((len(sequences), length), pad_token, dtype=np.int64)
    targets = np.full((len(sequences), length), ignore_index, dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.int64)
    for row, ids in enumerate(sequences):
        used = max(len(ids) - 1, 0)
        inputs[row, :used], targets[row, :used], mask[row, :used] = ids[:used], ids[1:used + 1], 1
    return {'inputs': inputs, 'targets': targets, 'attention_mask': mask}

