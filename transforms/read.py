"""Reading dataset files into records, accounting for every physical line.

Files are matched with Beam's filesystems (local paths, globs, gs://; `.gz`
and the other compressions Beam names are decompressed by extension, a
truncated one reported as such: Decompressed) and each
file is parsed by one DoFn call, streaming line by line. Reading whole files
per worker, rather than Beam's splittable text source, is deliberate: it is
what gives each record its true line number for the dead-letter table, and CSV
cannot be split at arbitrary byte offsets anyway (quoted cells may hold
newlines). A large uncompressed JSONL file is read in line-aligned parts
(file_parts: one pass counts its line breaks, so every part knows its first
line), which spread over the workers like files do.

Accounting is by the source, not by what a parser produced: every physical
line of a file is counted, and each one belongs to exactly one record (scored
or dead-lettered) or is skipped as holding none (blank lines, a CSV header,
JSON array punctuation). The `runs` row reconciles the two.

Damage costs only what it damages: an undecodable byte, an oversized line, a
broken CSV quote or a record nested too deeply dead-letters the record it is
in, with its true line, and reading goes on with the next one.
"""
from __future__ import annotations

import bisect
import codecs
import collections
import csv
import dataclasses
import gzip
import io
import json
import os
from typing import Any, Iterable, Iterator

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.metrics.instance import MAX_NESTING, deepest_column

DEAD_LETTER = "dead_letter"
LINES = "lines"
MAX_RAW_CHARS = 100_000
# One record (a JSONL line, or the lines of one CSV record) may hold at most
# this much; a larger one is dead-lettered, and memory stays bounded whatever
# the file holds (a CSV quote that never closes cannot swallow the file).
MAX_RECORD_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20

# The csv module's own cap on one cell (128 KiB by default) is lifted: the
# record limit above is what bounds a cell now.
csv.field_size_limit(MAX_RECORD_BYTES + 1)


def safe_text(text: str) -> str:
    """Text that any UTF-8 writer accepts (lone surrogates become U+FFFD)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@dataclasses.dataclass
class Record:
    source: str  # for people: "path:12", "path:row 3 (line 4)", "bq://t stream 0 row 9"
    data: dict[str, Any]
    raw: str
    from_csv: bool
    origin: str = ""  # the file (or BigQuery stream) it came from
    line: int = 0  # its first physical line (or row) there
    line_count: int = 1  # the physical lines it spans
    index: int = 0  # its number among the records read from its origin (from 1; 0: not numbered)


@dataclasses.dataclass
class DeadLetter:
    source: str
    reason: str
    raw_record: str
    field: str | None = None
    origin: str = ""
    line: int = 0
    line_count: int = 1

    def row(self, run) -> dict[str, Any]:
        return {
            **run.columns(),
            "source": safe_text(self.source),
            "origin": safe_text(self.origin),
            "line": self.line,
            "line_count": self.line_count,
            "field": None if self.field is None else safe_text(self.field),
            "reason": safe_text(self.reason),
            "raw_record": safe_text(self.raw_record[:MAX_RAW_CHARS]),
        }


@dataclasses.dataclass(frozen=True)
class SourceLines:
    """What one file (or BigQuery stream) held: its physical lines, and how many of them hold no record."""

    origin: str
    lines: int
    skipped: int


UTF8 = "utf-8"
# Named by the reason a line that is not UTF-8 is dead-lettered with.
ENCODING_HINT = "if the file is in another encoding, set input.encoding (e.g. latin-1, cp1252, utf-16)"


def splits_as_ascii(encoding: str) -> bool:
    """Whether a file in this encoding can be split into lines at its b"\n" bytes
    and each line decoded alone (UTF-8, Latin-1, cp1252, Shift JIS, ...); not so
    UTF-16 or UTF-32, whose line break is two or four bytes: those files are
    transcoded to UTF-8 as they are read (_Transcoded)."""
    try:
        return "\n\r".encode(encoding) == b"\n\r" and b"\n\r".decode(encoding) == "\n\r"
    except (UnicodeError, LookupError):
        return False


def _undecodable(error: UnicodeDecodeError) -> tuple[str, int]:
    """Bytes a codec cannot decode, in a transcoded file: a mark that becomes the one
    byte 0xFF in UTF-8 (never valid there), so the line holding them is found bad."""
    return "\udcff", error.end


codecs.register_error("evalbeam.undecodable", _undecodable)


class _Transcoded:
    """A byte stream in `encoding` (one _Lines cannot split: UTF-16, UTF-32) as
    UTF-8 bytes, decoded incrementally (a byte order mark is read, as the codec
    reads it); undecodable bytes become an invalid UTF-8 byte (_undecodable)."""

    def __init__(self, stream, encoding: str):
        self._read = getattr(stream, "read1", stream.read)
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="evalbeam.undecodable")
        self._done = False

    def read(self, n: int = -1) -> bytes:  # at least one character's bytes, however many n asks
        while not self._done:
            chunk = self._read(_CHUNK)
            self._done = not chunk
            text = self._decoder.decode(chunk, final=self._done)
            if text:
                return text.encode(UTF8, "surrogateescape")
        return b""


@dataclasses.dataclass
class _Line:
    number: int
    data: bytes  # without the line break; at most MAX_RECORD_BYTES of it
    size: int  # its real size in bytes
    text: str = ""  # decoded (undecodable bytes replaced)
    bad: str | None = None  # why it cannot be used, when it cannot


class _Lines:
    """The physical lines of a byte stream, numbered from 1, decoded one by one
    (a line with a bad byte damages only itself). A line longer than
    MAX_RECORD_BYTES keeps only its head. `count` is the lines seen so far;
    `error` is set when the stream itself failed (e.g. a corrupt .gz).
    encoding: the file's (input.encoding), any codec Python knows."""

    def __init__(self, stream, keep_cr: bool = False, first_line: int = 1, encoding: str = UTF8):
        self._encoding = encoding
        self._utf8 = codecs.lookup(encoding).name == UTF8
        self._transcoded = not self._utf8 and not splits_as_ascii(encoding)
        self._decode = UTF8 if self._utf8 or self._transcoded else encoding
        self._stream = _Transcoded(stream, encoding) if self._transcoded else stream
        self._keep_cr = keep_cr
        self.count = first_line - 1  # a part of a file starts at its own line
        self.error: str | None = None

    def __iter__(self) -> Iterator[_Line]:
        buf = bytearray()
        size = 0
        pending = False
        # read1 where there is one (gzip): it hands over what was decompressed
        # before a truncation, where read() would drop it with the error
        read = getattr(self._stream, "read1", self._stream.read)
        while True:
            try:
                chunk = read(_CHUNK)
            except Exception as e:  # noqa: BLE001 - a corrupt or truncated stream ends the file
                self.error = f"the file cannot be read on from here ({type(e).__name__}: {e})"
                break
            if not chunk:
                break
            start = 0
            while start < len(chunk):
                nl = chunk.find(b"\n", start)
                end = len(chunk) if nl < 0 else nl
                room = MAX_RECORD_BYTES - len(buf)
                if room > 0:
                    buf += chunk[start:min(end, start + room)]
                size += end - start
                pending = True
                if nl < 0:
                    break
                yield self._line(bytes(buf), size)
                buf.clear()
                size = 0
                pending = False
                start = nl + 1
        if pending or (self.error and buf):
            yield self._line(bytes(buf), size)

    def _line(self, data: bytes, size: int) -> _Line:
        self.count += 1
        if data.endswith(b"\r") and not self._keep_cr:
            data = data[:-1]
            size -= 1
        if self.count == 1 and self._decode == UTF8 and data.startswith(b"\xef\xbb\xbf"):  # a byte order mark
            data = data[3:]
            size -= 3
        line = _Line(self.count, data, size)
        try:
            line.text = data.decode(self._decode)
        except UnicodeDecodeError as e:
            line.text = data.decode(self._decode, "replace")
            if self._utf8:
                line.bad = f"line {self.count} is not valid UTF-8 ({e.reason} at byte {e.start}); {ENCODING_HINT}"
            elif self._transcoded:  # the offset would be the transcoded text's
                line.bad = f"line {self.count} is not valid {self._encoding} (input.encoding)"
            else:
                line.bad = f"line {self.count} is not valid {self._encoding} (input.encoding): {e.reason} at byte {e.start}"
        if size > MAX_RECORD_BYTES:
            line.bad = f"line {self.count} is {size:,} bytes, over the limit of {MAX_RECORD_BYTES:,} bytes for one record"
        return line


def parse_jsonl(path: str, stream, first_line: int = 1, file_start: bool = True,
                encoding: str = UTF8) -> Iterator[Record | DeadLetter | SourceLines]:
    """JSON Lines; a file whose first non-blank line opens a JSON array is read
    as one array of records instead (the shape many exporters write).
    first_line, file_start: where `stream` starts, for a part of a file (FilePart)."""
    lines = _Lines(stream, first_line=first_line, encoding=encoding)
    skipped = 0
    first = file_start
    iterator = iter(lines)
    for line in iterator:
        source = f"{path}:{line.number}"
        if line.bad:
            yield DeadLetter(source, line.bad, line.text, origin=path, line=line.number)
            first = False
            continue
        text = line.text
        if not text.strip():
            skipped += 1  # blank lines are not records
            continue
        if first and text.lstrip().startswith("["):
            yield from _json_array(path, line, iterator, lines)
            return
        first = False
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            yield DeadLetter(source, f"invalid JSON: {e.msg}: column {e.colno}", text, origin=path, line=line.number)
            continue
        except RecursionError:
            yield DeadLetter(source, "invalid JSON: nested too deeply to read", text, origin=path, line=line.number)
            continue
        yield _json_record(source, data, text, path, line.number, 1, "a record")
    yield from _unreadable_rest(path, lines)
    yield SourceLines(path, lines.count - (first_line - 1), skipped)


def _json_array(path: str, first: _Line, rest: Iterable[_Line], lines: _Lines):
    """The records of a file holding one JSON array. Each element is a record
    whose line is where it starts; lines holding only punctuation are skipped."""
    all_lines = [first, *rest]
    text = "\n".join(line.text for line in all_lines)
    bad = {line.number: line.bad for line in all_lines if line.bad}
    starts = [0]  # offset of each line in text
    for line in all_lines[:-1]:
        starts.append(starts[-1] + len(line.text) + 1)
    base = first.number - 1

    def line_at(offset: int) -> int:
        return base + bisect.bisect_right(starts, offset)

    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    last_line = base + len(all_lines)
    covered = base  # the last line attributed to a record
    accounted = 0  # lines attributed to records (lines between them, e.g. "[", are skipped)
    n = 0

    def span(start_line: int, end_line: int) -> int:
        """Attribute these lines to a record: how many were not attributed yet (a line may hold two)."""
        nonlocal covered, accounted
        count = max(0, end_line - max(start_line, covered + 1) + 1)
        covered = max(covered, end_line)
        accounted += count
        return count

    def rest_of_file(at: int, reason: str) -> DeadLetter:
        line = line_at(at)
        return DeadLetter(f"{path}:{line}", reason, text[at:at + MAX_RAW_CHARS], origin=path, line=line,
                          line_count=span(line, last_line))

    def skip_space(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    pos = skip_space(pos)
    if pos < len(text) and text[pos] == "]":
        pos = len(text)
    while pos < len(text):
        n += 1
        start_line = line_at(pos)
        source = f"{path}:{start_line}"
        try:
            value, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as e:
            reason = (f"invalid JSON: {e.msg}: line {line_at(e.pos)} column {e.colno}"
                      if isinstance(e, json.JSONDecodeError) else "invalid JSON: nested too deeply to read")
            yield rest_of_file(pos, f"{reason}; element {n} of the JSON array and the rest of the file cannot be read")
            break
        end_line = line_at(end - 1)
        raw = text[pos:end]
        count = span(start_line, end_line)
        damaged = [bad[number] for number in range(start_line, end_line + 1) if number in bad]
        if damaged:
            yield DeadLetter(source, damaged[0], raw, origin=path, line=start_line, line_count=count)
        else:
            yield _json_record(source, value, raw, path, start_line, count, f"element {n} of the JSON array")
        pos = skip_space(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip_space(pos + 1)
        elif pos < len(text) and text[pos] == "]":
            pos = skip_space(pos + 1)
            if pos < len(text):
                yield rest_of_file(pos, "unexpected text after the end of the JSON array")
            break
        elif pos < len(text):
            yield rest_of_file(pos, f"invalid JSON array: expected ',' or ']' after element {n}; "
                                    "the rest of the file cannot be read")
            break
    yield from _unreadable_rest(path, lines)
    yield SourceLines(path, lines.count, lines.count - accounted)


def _json_record(source: str, value: Any, raw: str, path: str, line: int, line_count: int, what: str):
    """A parsed JSON value as a Record, or the DeadLetter saying why it cannot be one."""
    if not isinstance(value, dict):
        return DeadLetter(source, f"{what} must be a JSON object, got {_json_kind(value)}", raw,
                          origin=path, line=line, line_count=line_count)
    # raw is the value's JSON text: with no more brackets than MAX_NESTING in it,
    # nothing inside can nest deeper (the walk is skipped: it costs more than the parse)
    if raw.count("[") + raw.count("{") > MAX_NESTING and (column := deepest_column(value)) is not None:
        # refused here: a record this deep cannot even be pickled on to the next step
        return DeadLetter(source, f"field '{column}': is nested more than {MAX_NESTING} levels deep", raw, column,
                          origin=path, line=line, line_count=line_count)
    return Record(source, value, raw, from_csv=False, origin=path, line=line, line_count=line_count)


def _unreadable_rest(path: str, lines: "_Lines", where: str = "") -> Iterator[DeadLetter]:
    """A dead letter for the rest of a file whose stream failed (e.g. a truncated .gz), if it did."""
    if lines.error:
        yield DeadLetter(f"{path}:{where}{lines.count + 1}", lines.error, "", origin=path, line=lines.count + 1,
                         line_count=0)


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}.get(
        type(value), type(value).__name__)


class _RecordTooLarge(Exception):
    pass


class _Feed:
    """The lines csv.reader reads, remembering which ones the current record
    took, with lines pushed back to be read again after damage."""

    def __init__(self, lines: Iterable[_Line]):
        self._lines = iter(lines)
        self._back: collections.deque[_Line] = collections.deque()
        self.taken: list[_Line] = []
        self._bytes = 0

    def start_record(self) -> None:
        self.taken = []
        self._bytes = 0

    def push_back(self, lines: list[_Line]) -> None:
        self._back.extendleft(reversed(lines))

    def drain(self) -> None:
        """Read to the end without keeping anything (to count the lines)."""
        self._back.clear()
        for _ in self._lines:
            pass

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self._back.popleft() if self._back else next(self._lines)
        self.taken.append(line)
        self._bytes += line.size
        if self._bytes > MAX_RECORD_BYTES:
            raise _RecordTooLarge()
        return line.text + "\n"


def _csv_records(feed: _Feed):
    """(cells or None, lines taken, error) for each CSV record, resynchronising
    after damage: a record that fails to parse, or grows past the size limit,
    costs its first line, and the lines after it are read again."""
    reader = csv.reader(feed)
    while True:
        feed.start_record()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except (csv.Error, _RecordTooLarge) as e:
            taken = feed.taken
            if not isinstance(e, _RecordTooLarge):
                reason = f"unreadable CSV: {e}"
            elif len(taken) == 1:
                reason = taken[0].bad  # one line over the limit on its own
            else:
                reason = f"a quoted field opened on line {taken[0].number} runs over {MAX_RECORD_BYTES:,} bytes"
            feed.push_back(taken[1:])
            yield None, taken[:1], reason
            reader = csv.reader(feed)
            continue
        yield cells, feed.taken, None


def parse_csv(path: str, stream, encoding: str = UTF8) -> Iterator[Record | DeadLetter | SourceLines]:
    lines = _Lines(stream, keep_cr=True, encoding=encoding)
    feed = _Feed(lines)
    records = _csv_records(feed)
    skipped = 0
    header = None
    row_number = 0
    for cells, taken, error in records:
        first, span = taken[0].number, len(taken)
        where = f"line {first}" if span == 1 else f"lines {first}-{first + span - 1}"
        raw = "\n".join(line.text for line in taken)
        if header is None:
            if error is None and not any(c.strip() for c in cells):
                skipped += span  # blank lines before the header
                continue
            bad = error or next((line.bad for line in taken if line.bad), None)
            if bad is None and len(set(cells)) != len(cells):
                bad = f"CSV header repeats columns {sorted({h for h in cells if cells.count(h) > 1})}"
            if bad:
                feed.drain()  # the header is unusable: so is every row under it
                total = lines.count
                yield DeadLetter(f"{path}:header ({where})", f"cannot read the CSV header: {bad}; no row of this file was read",
                                 raw, origin=path, line=first, line_count=total - first + 1)
                yield SourceLines(path, total, first - 1)
                return
            header = cells
            skipped += span
            continue
        if error is None and not any(c.strip() for c in cells):
            skipped += span  # blank lines are not records
            continue
        row_number += 1
        source = f"{path}:row {row_number} ({where})"
        if error:
            yield DeadLetter(source, error, raw, origin=path, line=first, line_count=span)
            continue
        if len(cells) != len(header):
            if span > 1:
                # A quote that opened a field here ran on into the rows below:
                # this line is damaged, the ones after it are read again as rows.
                feed.push_back(taken[1:])
                yield DeadLetter(f"{path}:row {row_number} (line {first})",
                                 f"a quoted field opened on line {first} runs across {span} lines into a record of "
                                 f"{len(cells)} cells, the header has {len(header)}; the lines after it are read again as rows",
                                 taken[0].text, origin=path, line=first)
                continue
            yield DeadLetter(source, f"row has {len(cells)} cells, the header has {len(header)}", raw,
                             origin=path, line=first, line_count=span)
            continue
        bad = next((line.bad for line in taken if line.bad), None)
        if bad:
            yield DeadLetter(source, bad, raw, origin=path, line=first, line_count=span)
            continue
        yield Record(source, dict(zip(header, cells)), _csv_text(cells), from_csv=True,
                     origin=path, line=first, line_count=span)
    yield from _unreadable_rest(path, lines, "line ")
    yield SourceLines(path, lines.count, skipped)


def _csv_text(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


PARSERS = {"jsonl": parse_jsonl, "csv": parse_csv}
ADK_FORMATS = ("adk_eval_result", "adk_eval_set")


def _adk_parser(fmt: str):
    def parse(path: str, stream, encoding: str = UTF8):  # JSON documents: UTF-8 (RFC 8259; the config allows no other)
        from evalbeam.transforms import read_adk

        return getattr(read_adk, f"parse_{fmt}")(path, stream)

    return parse


PARSERS.update({fmt: _adk_parser(fmt) for fmt in ADK_FORMATS})


def parse_file(path: str, fmt: str, encoding: str = UTF8) -> Iterator[Record | DeadLetter | SourceLines]:
    """Every record, dead letter and the line count of one file (decompressed by its
    extension, as Beam names compressions: .gz, .bz2, .zst/.zstd, .xz/.lzma, .deflate),
    whose text is in `encoding`."""
    kind = CompressionTypes.detect_compression_type(path)
    with FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if kind == CompressionTypes.UNCOMPRESSED:
            yield from PARSERS[fmt](path, raw, encoding=encoding)
        elif kind == CompressionTypes.GZIP:
            with gzip.GzipFile(fileobj=raw) as stream:
                yield from PARSERS[fmt](path, stream, encoding=encoding)
        else:
            yield from PARSERS[fmt](path, Decompressed(raw, kind), encoding=encoding)


class _Decompressor:
    """One compressed stream's decompressor, giving a bounded output a call: at
    most _CHUNK bytes where the library can bound it (bz2, lzma, zlib), and for
    zstd, whose decompressobj cannot, from at most _ZSTD_INPUT bytes of input
    (zstd's densest block, run-length, expands about 32,000 times: 32 MiB)."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == CompressionTypes.BZIP2:
            import bz2

            self._d = bz2.BZ2Decompressor()
        elif kind == CompressionTypes.LZMA:
            import lzma

            self._d = lzma.LZMADecompressor()
        elif kind == CompressionTypes.DEFLATE:
            import zlib

            self._d = zlib.decompressobj()
        elif kind == CompressionTypes.ZSTD:
            import zstandard

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
            out = self._d.decompress(self._tail or data, _CHUNK)
            self._tail = self._d.unconsumed_tail
            return out
        if self.kind == CompressionTypes.ZSTD:
            # a view, so that taking _ZSTD_INPUT bytes at a time copies none of the rest
            pending = self._tail or memoryview(data)
            self._tail = pending[_ZSTD_INPUT:]
            return self._d.decompress(pending[:_ZSTD_INPUT])
        return self._d.decompress(data, _CHUNK)


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
            data = self._raw.read(_CHUNK)
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
            data = self._raw.read(_CHUNK)
            if not data:
                self._done = True
                return b""
        self._d = _Decompressor(self._kind)
        return self._d.decompress(data)


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
# workers reads in smaller parts, an equal share each (pipelines.evaluate.part_bytes).
# (EVALBEAM_PART_BYTES sets another size, read where the parts are planned.)
PART_BYTES = 32 * 1024 * 1024


def default_part_bytes() -> int:
    return int(os.environ.get("EVALBEAM_PART_BYTES") or PART_BYTES)


def file_parts(path: str, fmt: str, size: int, part_bytes: int | None = None, encoding: str = UTF8) -> list[FilePart]:
    """The parts to read a file of `size` bytes in: line-aligned byte ranges of an
    uncompressed JSON Lines file over part_bytes (the line numbers come from one
    pass counting its line breaks, at memory-copy speed), else the whole file
    (always for an encoding whose lines cannot be found by their b"\n" bytes)."""
    part_bytes = part_bytes or default_part_bytes()
    if fmt != "jsonl" or size <= part_bytes or not splits_as_ascii(encoding) or \
            CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED:
        return [FilePart(path)]
    parts, start, first_line, line = [], 0, 1, 1
    with FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        head = stream.read(_CHUNK)
        lead = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not lead or lead.startswith(b"["):
            return [FilePart(path)]  # one JSON array (or a head of blanks): read whole
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
            block = stream.read(_CHUNK)
    if start < offset:
        parts.append(FilePart(path, start, None if not parts else offset, first_line))
    return parts


class _Range(io.RawIOBase):
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


def parse_part(part: FilePart, fmt: str, encoding: str = UTF8) -> Iterator[Record | DeadLetter | SourceLines]:
    """Every record, dead letter and the line count of a FilePart."""
    if part.end is None and part.start == 0:
        yield from parse_file(part.path, fmt, encoding)
        return
    with FileSystems.open(part.path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        stream.seek(part.start)
        yield from parse_jsonl(part.path, _Range(stream, part.end - part.start), part.first_line, part.start == 0,
                               encoding)


class ParseFileFn(beam.DoFn):
    """counted: False for a second read of the same files (its records are not counted again)."""

    def __init__(self, fmt: str, counted: bool = True, encoding: str = UTF8):
        self._fmt = fmt
        self._encoding = encoding
        prefix = "" if counted else "reread_"
        self._read = Metrics.counter("evalbeam", prefix + "records_read")
        self._bad = Metrics.counter("evalbeam", prefix + "records_unparseable")
        self._lines = Metrics.counter("evalbeam", prefix + "lines_read")

    def setup(self):
        from evalbeam.transforms.worker import quiet_interrupts

        quiet_interrupts()  # the first of a run's DoFns a worker sets up

    def process(self, part: FilePart):
        index = 0
        whole = part.end is None and part.start == 0
        for item in parse_part(part, self._fmt, self._encoding):
            if isinstance(item, Record):
                # a record's number in its file: counted in a whole file; in a
                # part of a JSONL file (one record per line), its line
                index += 1
                item.index = index if whole else item.line
            if isinstance(item, SourceLines):
                self._lines.inc(item.lines)
                yield beam.pvalue.TaggedOutput(LINES, item)
                continue
            self._read.inc()
            if isinstance(item, DeadLetter):
                self._bad.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, item)
            else:
                yield item


class ReadRecords(beam.PTransform):
    """The files matching ``uri``, or the FileParts ``parts`` (a PCollection, to
    read the same parts twice) -> Records (main), DeadLetters (tag
    'dead_letter') and one SourceLines per file (tag 'lines').
    counted: False for a second read of the same files (see ParseFileFn).
    encoding: the files' text encoding (input.encoding)."""

    def __init__(self, fmt: str, *, uri: str | None = None, parts=None, counted: bool = True, encoding: str = UTF8):
        super().__init__()
        if (uri is None) == (parts is None):
            raise ValueError("ReadRecords reads either a uri or parts")
        self._uri = uri
        self._fmt = fmt
        self._encoding = encoding
        self._counted = counted
        self._parts = parts

    def expand(self, pbegin):
        parts = self._parts if self._parts is not None else \
            pbegin | "Parts" >> FileParts(self._uri, self._fmt, encoding=self._encoding)
        parsed = (
            parts
            # one file (or part of one) per worker: the files, not their records, are spread here
            | "SpreadFiles" >> beam.Reshuffle()
            | "ParseFiles" >> beam.ParDo(ParseFileFn(self._fmt, self._counted, self._encoding)).with_outputs(
                DEAD_LETTER, LINES, main="records")
        )
        return parsed.records, parsed[DEAD_LETTER], parsed[LINES]


class FileParts(beam.PTransform):
    """The files matching ``uri`` -> the FileParts to read them in (of about
    `part_bytes`; None: default_part_bytes()), in `encoding`."""

    def __init__(self, uri: str, fmt: str, part_bytes: int | None = None, encoding: str = UTF8):
        super().__init__()
        self._uri = uri
        self._fmt = fmt
        self._part_bytes = part_bytes
        self._encoding = encoding

    def expand(self, pbegin):
        return (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._uri, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW)
            | "Split" >> beam.FlatMap(
                lambda metadata, fmt, size, encoding: file_parts(metadata.path, fmt, metadata.size_in_bytes, size, encoding),
                self._fmt, self._part_bytes, self._encoding)
        )


def match_files(uri: str) -> list[str]:
    """The files a dataset URI names; empty when none."""
    result = FileSystems.match([uri])[0]
    return sorted(m.path for m in result.metadata_list)


@dataclasses.dataclass
class Sample:
    records: list[dict[str, Any]]
    dead_letters: list[DeadLetter]


def sample_records(paths: list[str], fmt: str, limit: int = 200, encoding: str = UTF8) -> Sample:
    """Up to ``limit`` parseable records from the first files (and the dead
    letters met on the way), for checking columns before the pipeline starts."""
    sample = Sample([], [])
    for path in paths:
        for item in parse_file(path, fmt, encoding):
            if isinstance(item, Record):
                sample.records.append(item.data)
                if len(sample.records) >= limit:
                    return sample
            elif isinstance(item, DeadLetter) and len(sample.dead_letters) < limit:
                sample.dead_letters.append(item)
    return sample
