"""A GroupByKey on local disk, for the local runner: its memory is one shard's, whatever the input.

The local runner (Beam's FnApiRunner) holds a GroupByKey's elements in its own memory until the
grouping is done: grouping a million spans by trace held every span (about 13 KB of Python
objects each, 12.7 GB for the bench's agent). `SpillGroupByKey` gives what GroupByKey gives,
(key, its values), in three steps:

1. each bundle appends its (key, value) pairs, pickled, to one file of its own, in blocks per
   shard of keys (crc32 of the pickled key), each block zlib-compressed, and says where each
   shard's blocks are (one small index element per bundle);
2. once every bundle has written (the indexes are a side input: the runner runs the grouping
   only after the spilling), each shard is read on its own, on whichever worker gets it, its
   values kept pickled and grouped by key; a shard larger than `shard_bytes` is first split into
   smaller ones on disk, again by its keys, so no shard needs more memory than that;
3. each key's values are unpickled as they are iterated.

A key's values arrive in no particular order (as GroupByKey's). The files live in `folder`, which
its owner removes when the run ends (pipelines.evaluate: a temporary folder of the run's); the
split files of step 2 are removed as soon as their shard is grouped. Written by hand: Beam has no
disk-backed grouping for its local runner, and on a distributed runner the service's shuffle is
the right thing (pipelines.stages.read uses GroupByKey there).
"""
from __future__ import annotations

import errno
import math
import os
import pickle
import struct
import uuid
import zlib
from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

SHARDS = 256
SHARD_BYTES = 64 * 1024 * 1024  # pickled bytes a shard may hold before it is split
BLOCK_BYTES = 128 * 1024  # a shard's buffer is compressed and written at this size
_FRAME = struct.Struct("<II")  # a pair: its pickled key's length, its pickled value's length
_BLOCK = struct.Struct("<QII")  # where a block is: offset, compressed size, size


class SpillError(OSError):
    """The spill folder could not be written (full, gone, not writable); the message names it."""


def _shard(key: bytes, shards: int, level: int) -> int:
    return zlib.crc32(key, level) % shards


class _SpillFile:
    """One file of blocks, each of one shard's pairs: written by one bundle (or one split)."""

    def __init__(self, folder: str, shards: int, level: int):
        self.path = os.path.join(folder, f"spill-{uuid.uuid4().hex}.bin")
        self._shards, self._level = shards, level
        self._buffers: dict[int, bytearray] = {}
        self._index: dict[int, list[tuple[int, int, int]]] = {}
        self._file = None
        self._offset = 0

    def add(self, key: bytes, value: bytes) -> None:
        shard = _shard(key, self._shards, self._level)
        buffer = self._buffers.get(shard)
        if buffer is None:
            buffer = self._buffers[shard] = bytearray()
        buffer += _FRAME.pack(len(key), len(value))
        buffer += key
        buffer += value
        if len(buffer) >= BLOCK_BYTES:
            self._write(shard, buffer)
            buffer.clear()

    def _write(self, shard: int, buffer: bytearray) -> None:
        data = zlib.compress(buffer, 1)
        try:
            if self._file is None:
                self._file = open(self.path, "wb")
            self._file.write(data)
        except OSError as e:
            raise _spill_error(self.path, e) from None
        self._index.setdefault(shard, []).append((self._offset, len(data), len(buffer)))
        self._offset += len(data)

    def close(self) -> dict[int, bytes]:
        """Flush, close: {shard: its blocks' places, packed}."""
        for shard, buffer in self._buffers.items():
            if buffer:
                self._write(shard, buffer)
        self._buffers = {}
        if self._file is not None:
            try:
                self._file.close()
            except OSError as e:
                raise _spill_error(self.path, e) from None
        return {shard: b"".join(_BLOCK.pack(*place) for place in places) for shard, places in self._index.items()}


def _spill_error(path: str, error: OSError) -> SpillError:
    why = "the disk is full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else str(error)
    return SpillError(error.errno, f"cannot write the local run's spill file {path}: {why} (a local run groups "
                                   f"large inputs on disk: set TMPDIR to a folder with room)")


def _blocks(path: str, places: bytes) -> Iterator[bytes]:
    """The pairs of a file's blocks of one shard, each block decompressed."""
    with open(path, "rb") as f:
        for offset, size, _ in _BLOCK.iter_unpack(places):
            f.seek(offset)
            yield zlib.decompress(f.read(size))


def _pairs(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    view, at = memoryview(block), 0
    while at < len(block):
        key_size, value_size = _FRAME.unpack_from(block, at)
        at += _FRAME.size
        key = bytes(view[at:at + key_size])
        at += key_size
        yield key, view[at:at + value_size]
        at += value_size


class _Values:
    """A key's values, unpickled as iterated (and iterable again, as GroupByKey's)."""

    def __init__(self, pickled: list[bytes]):
        self._pickled = pickled

    def __iter__(self):
        return map(pickle.loads, self._pickled)

    def __len__(self):
        return len(self._pickled)


class _SpillFn(beam.DoFn):
    """(key, value) pairs -> none; at the end of each bundle, (its file, {shard: its blocks})."""

    def __init__(self, folder: str, shards: int):
        self._folder, self._shards = folder, shards
        self._spilled = Metrics.counter("evalbeam", "spilled_bytes")

    def start_bundle(self):
        self._file = None

    def process(self, pair):
        key, value = pair
        if self._file is None:
            self._file = _SpillFile(self._folder, self._shards, 0)
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._spilled.inc(len(data))
        self._file.add(pickle.dumps(key, protocol=pickle.HIGHEST_PROTOCOL), data)

    def finish_bundle(self):
        if self._file is not None:
            index = self._file.close()
            yield window.GlobalWindows.windowed_value((self._file.path, index))
            self._file = None


class _GroupShardFn(beam.DoFn):
    """A shard number and every bundle's index (a side input) -> (key, its values) of the shard."""

    def __init__(self, folder: str, shard_bytes: int):
        self._folder, self._shard_bytes = folder, shard_bytes
        self._splits = Metrics.counter("evalbeam", "spill_shards_split")

    def process(self, shard: int, indexes):
        blocks = [(path, index[shard]) for path, index in indexes if shard in index]
        yield from self._group(blocks, level=0)

    def _group(self, blocks: list[tuple[str, bytes]], level: int):
        size = sum(raw for _, places in blocks for _, _, raw in _BLOCK.iter_unpack(places))
        if size > self._shard_bytes and level < 4:
            yield from self._split(blocks, level + 1, math.ceil(2 * size / self._shard_bytes))
            return
        grouped: dict[bytes, list[bytes]] = {}
        for path, places in blocks:
            for block in _blocks(path, places):
                for key, value in _pairs(block):
                    values = grouped.get(key)
                    if values is None:
                        values = grouped[key] = []
                    values.append(bytes(value))
        while grouped:
            key, values = grouped.popitem()
            yield pickle.loads(key), _Values(values)

    def _split(self, blocks: list[tuple[str, bytes]], level: int, parts: int):
        """A shard too large to group in memory: its pairs written again in `parts` smaller
        shards (by another hash of their keys), each grouped on its own, then removed."""
        self._splits.inc()
        split = _SpillFile(self._folder, parts, level)
        for path, places in blocks:
            for block in _blocks(path, places):
                for key, value in _pairs(block):
                    split.add(key, bytes(value))
        index = split.close()
        try:
            if len(index) == 1:  # every pair has one key: nothing to split; grouped as it is
                yield from self._group([(split.path, next(iter(index.values())))], level=99)
                return
            for part in sorted(index):
                yield from self._group([(split.path, index[part])], level)
        finally:
            if os.path.exists(split.path):
                os.unlink(split.path)


class SpillGroupByKey(beam.PTransform):
    """(key, value) pairs -> (key, its values), as GroupByKey, grouped on local disk in `folder`
    one shard of keys at a time (see the module's docstring)."""

    def __init__(self, folder: str, shards: int = SHARDS, shard_bytes: int = SHARD_BYTES):
        super().__init__()
        self._folder, self._shards, self._shard_bytes = folder, shards, shard_bytes

    def expand(self, pairs):
        indexes = pairs | "Spill" >> beam.ParDo(_SpillFn(self._folder, self._shards))
        return (pairs.pipeline
                | "Shards" >> beam.Create(range(self._shards))
                # the shards, not their pairs, are spread over the workers
                | "SpreadShards" >> beam.Reshuffle()
                | "GroupShards" >> beam.ParDo(_GroupShardFn(self._folder, self._shard_bytes),
                                              beam.pvalue.AsList(indexes)))


def spill_folder(parent: str, name: str) -> str:
    """A new folder for one grouping's spill files under `parent` (a run's scratch folder)."""
    path = os.path.join(parent, f"{name}-{uuid.uuid4().hex[:8]}")
    os.makedirs(path, exist_ok=True)
    return path
