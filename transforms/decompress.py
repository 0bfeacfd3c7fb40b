"""Decompressing bz2, lzma/xz, zstd and deflate files as a stream that reports
a truncated end (Python's gzip module reads .gz files: it already does)."""
from __future__ import annotations

import bz2
import lzma
import zlib

from apache_beam.io.filesystem import CompressionTypes

from evalbeam.transforms.parsers import CHUNK


class _Decompressor:
    """One compressed stream's decompressor, giving a bounded output a call: at
    most CHUNK bytes where the library can bound it (bz2, lzma, zlib), and for
    zstd, whose decompressobj cannot, from at most _ZSTD_INPUT bytes of input
    (zstd's densest block, run-length, expands about 32,000 times: 32 MiB)."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == CompressionTypes.BZIP2:
            self._d = bz2.BZ2Decompressor()
        elif kind == CompressionTypes.LZMA:
            self._d = lzma.LZMADecompressor()
        elif kind == CompressionTypes.DEFLATE:
            self._d = zlib.decompressobj()
        elif kind == CompressionTypes.ZSTD:
            import zstandard  # start-up time: only for a .zst file

            # the window Beam's own reader allows (2 GiB): files Beam reads, this reads
            self._d = zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj()
        else:
            raise ValueError(f"no decompressor for {kind}")
        self._tail = b""  # input given but not yet consumed: zlib's unconsumed tail, or zstd's beyond _ZSTD_INPUT (a view)

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        """Once its stream has ended: the input that followed it."""
        return self._d.unused_data + bytes(self._tail)

    def needs_input(self) -> bool:
        if self.kind in (CompressionTypes.DEFLATE, CompressionTypes.ZSTD):
            return not self._tail
        return self._d.needs_input

    def decompress(self, data: bytes) -> bytes:
        """Output for `data` (new input only when needs_input(), else b"" to go on)."""
        if self.kind == CompressionTypes.DEFLATE:
            out = self._d.decompress(self._tail or data, CHUNK)
            self._tail = self._d.unconsumed_tail
            return out
        if self.kind == CompressionTypes.ZSTD:
            # a view, so that taking _ZSTD_INPUT bytes at a time copies none of the rest
            pending = self._tail or memoryview(data)
            self._tail = pending[_ZSTD_INPUT:]
            return self._d.decompress(pending[:_ZSTD_INPUT])
        return self._d.decompress(data, CHUNK)


_ZSTD_INPUT = 1024


class Decompressed:
    """The bytes of a compressed file (bz2, lzma/xz, zstd, deflate), every stream
    of a concatenation in turn (an xz file's stream padding skipped), as
    read()/read1() give them; at a truncated end (the input ends inside a
    stream), everything decompressed before it, then EOFError. Written here
    because the readers at hand read a truncated file as a shorter one, without
    a word: Beam's CompressedFile for every compression, and zstandard's
    stream_reader; rows would vanish unaccounted. (Python's gzip raises, and
    reads .gz files here; the standard library has no zstd reader before Python
    3.14.)"""

    def __init__(self, raw, kind: str):
        self._raw = raw
        self._kind = kind
        self._d: _Decompressor | None = None
        self._out = b""
        self._pos = 0  # what of _out was given (slicing the rest off each time would copy it)
        self._done = False

    def read1(self, n: int = -1) -> bytes:
        while self._pos >= len(self._out) and not self._done:
            self._out, self._pos = self._fill(), 0
        end = len(self._out) if n is None or n < 0 else min(len(self._out), self._pos + n)
        data = self._out[self._pos:end]
        self._pos = end
        return data

    def read(self, n: int = -1) -> bytes:
        parts, size = [], 0
        while n is None or n < 0 or size < n:
            chunk = self.read1(-1 if n is None or n < 0 else n - size)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)

    def _fill(self) -> bytes:
        """The next piece of output (possibly empty); sets _done at the end."""
        d = self._d
        if d is not None and not d.eof:
            if not d.needs_input():
                return d.decompress(b"")
            data = self._raw.read(CHUNK)
            if not data:
                self._done = True
                raise EOFError("the compressed data ends inside a stream (the file is truncated)")
            return d.decompress(data)
        # between streams: what the last one left over, then the file's next bytes
        data = d.unused_data if d is not None else b""
        self._d = None
        while True:
            if self._kind == CompressionTypes.LZMA:
                data = data.lstrip(b"\0")  # stream padding: NUL bytes between and after xz streams
            if data:
                break
            data = self._raw.read(CHUNK)
            if not data:
                self._done = True
                return b""
        self._d = _Decompressor(self._kind)
        return self._d.decompress(data)
