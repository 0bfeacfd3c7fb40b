"""Planning the parts a file is read in: a large uncompressed JSON Lines file
(of dataset rows, or of OTLP requests) in line-aligned byte ranges (one pass
counts its line breaks, so every part knows its first line), which spread over
the workers like files do; any other file whole (a pretty-printed JSON document too)."""
from __future__ import annotations

import dataclasses
import io
import os

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from evalbeam.transforms.parsers import CHUNK, one_document, splits_as_ascii
from evalbeam.transforms.records import UTF8


@dataclasses.dataclass(frozen=True)
class FilePart:
    """A file to parse whole (end None), or the lines of a large JSONL file from
    byte `start` (a line's start) to byte `end` (just after a line break), the
    first being line `first_line`."""

    path: str
    start: int = 0
    end: int | None = None
    first_line: int = 1


# A plain JSONL file larger than this is read in parts of about this size, so
# that its records are parsed and scored on several workers at once and no
# shuffle of the records is needed to spread them. A local run with several
# workers reads in smaller parts, an equal share each (pipelines.local.part_bytes).
# (EVALBEAM_PART_BYTES sets another size, read where the parts are planned.)
PART_BYTES = 32 * 1024 * 1024
# the formats whose files hold a record per line: JSONL rows, OTLP JSON Lines (a request a line)
LINE_FORMATS = ("jsonl", "otel_traces")


def default_part_bytes() -> int:
    return int(os.environ.get("EVALBEAM_PART_BYTES") or PART_BYTES)


def file_parts(path: str, fmt: str, size: int, part_bytes: int | None = None, encoding: str = UTF8) -> list[FilePart]:
    """The parts to read a file of `size` bytes in: line-aligned byte ranges of an
    uncompressed JSON Lines file over part_bytes (the line numbers come from one
    pass counting its line breaks, at memory-copy speed), else the whole file
    (always for an encoding whose lines cannot be found by their b"\n" bytes)."""
    part_bytes = part_bytes or default_part_bytes()
    if fmt not in LINE_FORMATS or size <= part_bytes or not splits_as_ascii(encoding) or \
            CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED:
        return [FilePart(path)]
    parts, start, first_line, line = [], 0, 1, 1
    with FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        head = stream.read(CHUNK)
        lead = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not lead or lead.startswith(b"[") or (fmt == "otel_traces" and one_document(head)):
            # one JSON array, one pretty-printed request (transforms.read_otel), or a head of blanks: read whole
            return [FilePart(path)]
        offset, block = 0, head
        while block:
            # a part ends at the first line end from the next multiple of part_bytes on: the
            # file's parts are then ceil(size / part_bytes), whatever the lines' lengths
            # (unless a line is longer than a part), and so an equal share for each worker
            target = (start // part_bytes + 1) * part_bytes
            if offset + len(block) > target:
                nl = block.find(b"\n", max(0, target - offset))
                if nl >= 0:
                    line += block.count(b"\n", 0, nl + 1)
                    end = offset + nl + 1
                    parts.append(FilePart(path, start, end, first_line))
                    start, first_line = end, line
                    block = block[nl + 1:]
                    offset = end
                    continue
            line += block.count(b"\n")
            offset += len(block)
            block = stream.read(CHUNK)
    if start < offset:
        parts.append(FilePart(path, start, None if not parts else offset, first_line))
    return parts


class ByteRange(io.RawIOBase):
    """The bytes of a stream from its position on, up to `size` of them."""

    def __init__(self, stream, size: int):
        self._stream = stream
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._stream.read(n) if n else b""
        self._left -= len(data)
        return data
