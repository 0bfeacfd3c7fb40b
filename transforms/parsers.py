"""The JSON Lines and CSV parsers: a byte stream -> Records, DeadLetters and
one SourceLines, accounting for every physical line.

Both read the stream as physical lines (Lines: numbered, decoded one by one,
transcoded from UTF-16/32, bounded by MAX_RECORD_BYTES), so a bad byte or an
oversized line damages only the record it is in. A JSONL file whose first
non-blank line opens a JSON array is read as one array of records, a window
of lines at a time (_ArrayWindow: memory follows its largest element); a CSV
record that fails to parse costs its first line, and the lines after it are
read again.
"""
from __future__ import annotations

import bisect
import codecs
import collections
import csv
import dataclasses
import io
import json
from typing import Any, Callable, Iterable, Iterator

import orjson

from evalbeam.metrics.rows.instance import MAX_NESTING, deepest_column
from evalbeam.transforms.records import MAX_RAW_CHARS, MAX_RECORD_BYTES, UTF8, DeadLetter, Record, SourceLines

CHUNK = 1 << 20  # bytes read from a stream at a time

# The csv module's own cap on one cell (128 KiB by default) is lifted: the
# record limit above is what bounds a cell now.
csv.field_size_limit(MAX_RECORD_BYTES + 1)

# Named by the reason a line that is not UTF-8 is dead-lettered with.
ENCODING_HINT = "if the file is in another encoding, set input.encoding (e.g. latin-1, cp1252, utf-16)"


def one_document(head: bytes) -> bool:
    """Whether a file whose first bytes are `head` holds one pretty-printed JSON object: its first
    line opens an object it does not close (a first line longer than `head` is a long JSON Lines
    line, not that). Such a file is read whole; JSON Lines may be read in parts."""
    lead = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    first = lead.split(b"\n", 1)[0].strip()
    return b"\n" in lead and first.startswith(b"{") and not first.endswith(b"}")


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
            chunk = self._read(CHUNK)
            self._done = not chunk
            text = self._decoder.decode(chunk, final=self._done)
            if text:
                return text.encode(UTF8, "surrogateescape")
        return b""


@dataclasses.dataclass(slots=True)  # one a physical line: slots make it quicker to make
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
                chunk = read(CHUNK)
            except Exception as e:  # noqa: BLE001 - a corrupt or truncated stream ends the file
                self.error = f"the file cannot be read on from here ({type(e).__name__}: {e})"
                break
            if not chunk:
                break
            start = 0
            while start < len(chunk):
                nl = chunk.find(b"\n", start)
                if not pending and 0 <= nl - start <= MAX_RECORD_BYTES:
                    # a whole line in this chunk, within the limit (most lines): sliced out once,
                    # where the general case below copies it into buf and out again
                    yield self._line(chunk[start:nl], nl - start)
                    start = nl + 1
                    continue
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
        try:
            line = _Line(self.count, data, size, data.decode(self._decode))
        except UnicodeDecodeError as e:
            line = _Line(self.count, data, size, data.decode(self._decode, "replace"))
            if self._utf8:
                line.bad = f"line {self.count} is not valid UTF-8 ({e.reason} at byte {e.start}); {ENCODING_HINT}"
            elif self._transcoded:  # the offset would be the transcoded text's
                line.bad = f"line {self.count} is not valid {self._encoding} (input.encoding)"
            else:
                line.bad = f"line {self.count} is not valid {self._encoding} (input.encoding): {e.reason} at byte {e.start}"
        if size > MAX_RECORD_BYTES:
            line.bad = f"line {self.count} is {size:,} bytes, over the limit of {MAX_RECORD_BYTES:,} bytes for one record"
        return line


_scan_once = json.decoder.JSONDecoder().scan_once  # the C scanner json.loads's decoder runs


def json_loads(text: str) -> Any:
    """json.loads(text), the same value and the same errors, less json.loads's Python
    around its scanner (a BOM check, and two regular expressions skipping whitespace
    before and after the value: some 1.5 us a line of the bench's): a text that is one
    JSON value from its first character to its last (every JSONL record as written) is
    scanned by the scanner json.loads calls; any other text (leading or trailing
    whitespace, a BOM, an error of any kind) is given to json.loads itself."""
    try:
        value, end = _scan_once(text, 0)
    except Exception:  # noqa: BLE001 - json.loads says what is wrong, in its own words
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


class IdFirstLoads:
    """json.loads for a read whose records serve only for their ids (the id check's
    first pass, transforms.validate, with input.id_column): orjson's parse (some 1.6x
    as fast on the bench's rows) where it gives the id json.loads gives, an object
    whose id column holds text (orjson reads text exactly as json does, and refuses
    what json would read otherwise, e.g. a lone surrogate's escape); json.loads for
    anything else, so every error and every other kind of id are json's own. Such a
    record is returned as its id column alone ({id_column: id}): orjson's other values
    may differ from json's (it reads an integer past 64 bits as a float, refuses NaN),
    nothing but the id is read from them, and a record of one text is no deeper than
    MAX_NESTING whatever its line held (a deeper one is dead-lettered by the pass that
    scores, and at most makes its id look repeated: transforms.validate). orjson
    comes with apache-beam[gcp], a core requirement."""

    def __init__(self, id_column: str):
        self._id_column = id_column

    def __call__(self, text: str) -> Any:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return json.loads(text)
        if type(value) is dict and type(value.get(self._id_column)) is str:
            # the id alone: nothing else is read, and a record of one text cannot nest
            return {self._id_column: value[self._id_column]}
        return json.loads(text)


def parse_jsonl(path: str, stream, first_line: int = 1, file_start: bool = True,
                encoding: str = UTF8, loads: Callable[[str], Any] = json_loads) -> Iterator[Record | DeadLetter | SourceLines]:
    """JSON Lines; a file whose first non-blank line opens a JSON array is read
    as one array of records instead (the shape many exporters write).
    first_line, file_start: where `stream` starts, for a part of a file (FilePart).
    loads: how a line is parsed (IdFirstLoads for the id check's first pass)."""
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
            data = loads(text)
        except json.JSONDecodeError as e:
            yield DeadLetter(source, f"invalid JSON: {e.msg}: column {e.colno}", text, origin=path, line=line.number)
            continue
        except RecursionError:
            yield DeadLetter(source, "invalid JSON: nested too deeply to read", text, origin=path, line=line.number)
            continue
        yield _json_record(source, data, text, path, line.number, 1, "a record")
    yield from _unreadable_rest(path, lines)
    yield SourceLines(path, lines.count - (first_line - 1), skipped)


READ_AHEAD = 1 << 16  # characters of a JSON array's lines read in at a time, at least


class _ArrayWindow:
    """The text of a file holding one JSON array, held a window of lines at a time: the lines from
    the element being read on (joined by "\n", as the file's text would be), read in as the parse
    needs them and dropped once read past, so memory follows the largest element, not the file.
    The standard library's json decoder parses each element (raw_decode, at an offset of the
    window): the same values and errors as json.loads of the whole text, with the element's text
    and its line for its record or dead letter. (A streaming parser such as ijson gives values
    without their text or position, which the dead letters and the line accounting need.)"""

    def __init__(self, first: _Line, rest: Iterator[_Line]):
        self._rest = rest
        self.text = first.text
        self.starts = [0]  # the offset of each held line in text
        self.first_line = first.number  # the number of text's first line
        self.bad = {first.number: first.bad} if first.bad else {}
        self.ended = False
        self._passed = 0  # lines read through by rest(), not held

    @property
    def last_line(self) -> int:
        return self.first_line + len(self.starts) - 1 + self._passed

    def line_at(self, offset: int) -> int:
        return self.first_line + bisect.bisect_right(self.starts, offset) - 1

    def more(self, chars: int) -> bool:
        """Read on until `chars` more characters are held (at least one line) or the input ends; False
        when it had ended. Growing by as much as is held keeps an element's repeated parses linear."""
        parts, added, at = [], 0, len(self.text)
        for line in self._rest:
            at += 1
            self.starts.append(at)
            parts.append(line.text)
            at += len(line.text)
            added += len(line.text) + 1
            if line.bad:
                self.bad[line.number] = line.bad
            if added >= chars:
                break
        else:
            self.ended = True
        if parts:
            self.text = "\n".join([self.text, *parts])
        return bool(parts)

    def drop_before(self, offset: int) -> int:
        """Forget the lines wholly before `offset` when they are most of what is held; the offset after."""
        index = bisect.bisect_right(self.starts, offset) - 1
        cut = self.starts[index]
        if cut < len(self.text) // 2:
            return offset
        self.text = self.text[cut:]
        self.starts = [start - cut for start in self.starts[index:]]
        self.first_line += index
        self.bad = {number: reason for number, reason in self.bad.items() if number >= self.first_line}
        return offset - cut

    def skip_space(self, offset: int) -> int:
        """The offset of the next character that is not JSON whitespace, reading on as needed;
        len(text) when the input ends first."""
        while True:
            while offset < len(self.text) and self.text[offset] in " \t\r\n":
                offset += 1
            if offset < len(self.text) or not self.more(READ_AHEAD):
                return offset
            offset += 1  # the line break before the line read

    def decode(self, decoder: json.JSONDecoder, offset: int) -> tuple[Any, int]:
        """The JSON value starting at `offset` and where it ends, reading on while the text held ends
        inside it (up to MAX_RECORD_BYTES of it: _ElementTooLarge past that)."""
        while True:
            try:
                return decoder.raw_decode(self.text, offset)
            except json.JSONDecodeError as e:
                # the text held ends inside the value: the error is at its end, or is a string the
                # end cut (in the whole text it would meet a line break and fail there, if anywhere)
                cut = e.pos >= len(self.text.rstrip()) or e.msg.startswith("Unterminated string")
                if not cut or self.ended:
                    raise
                if len(self.text) - offset > MAX_RECORD_BYTES:
                    raise _ElementTooLarge() from None
                if not self.more(max(len(self.text) - offset, READ_AHEAD)):
                    raise

    def rest(self, offset: int) -> str:
        """Up to MAX_RAW_CHARS of the text from `offset`, reading the rest of the input through (to count
        its lines) without holding it."""
        while len(self.text) - offset < MAX_RAW_CHARS and self.more(MAX_RAW_CHARS):
            pass
        raw = self.text[offset:offset + MAX_RAW_CHARS]
        for _ in self._rest:
            self._passed += 1
        self.ended = True
        return raw


class _ElementTooLarge(Exception):
    pass


def _json_array(path: str, first: _Line, rest: Iterable[_Line], lines: _Lines):
    """The records of a file holding one JSON array, read a window of lines at a time
    (_ArrayWindow). Each element is a record whose line is where it starts; lines holding only
    punctuation are skipped."""
    window = _ArrayWindow(first, iter(rest))
    decoder = json.JSONDecoder()
    base = first.number - 1
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
        line = window.line_at(at)
        raw = window.rest(at)
        return DeadLetter(f"{path}:{line}", reason, raw, origin=path, line=line,
                          line_count=span(line, window.last_line))

    pos = window.skip_space(window.text.index("[") + 1)
    if pos < len(window.text) and window.text[pos] == "]":
        pos = window.skip_space(pos + 1)
        if pos < len(window.text):
            yield rest_of_file(pos, "unexpected text after the end of the JSON array")
        pos = len(window.text)
    while pos < len(window.text):
        n += 1
        pos = window.drop_before(pos)
        start_line = window.line_at(pos)
        source = f"{path}:{start_line}"
        try:
            value, end = window.decode(decoder, pos)
        except (json.JSONDecodeError, RecursionError, _ElementTooLarge) as e:
            if isinstance(e, json.JSONDecodeError):
                reason = f"invalid JSON: {e.msg}: line {window.line_at(e.pos)} column {e.colno}"
            elif isinstance(e, RecursionError):
                reason = "invalid JSON: nested too deeply to read"
            else:
                reason = f"element {n} of the JSON array runs over {MAX_RECORD_BYTES:,} bytes, the limit for one record"
            if not isinstance(e, _ElementTooLarge):
                reason += f"; element {n} of the JSON array and the rest of the file cannot be read"
            else:
                reason += "; the rest of the file cannot be read"
            yield rest_of_file(pos, reason)
            break
        end_line = window.line_at(end - 1)
        raw = window.text[pos:end]
        count = span(start_line, end_line)
        damaged = [window.bad[number] for number in range(start_line, end_line + 1) if number in window.bad]
        if damaged:
            yield DeadLetter(source, damaged[0], raw, origin=path, line=start_line, line_count=count)
        else:
            yield _json_record(source, value, raw, path, start_line, count, f"element {n} of the JSON array")
        pos = window.skip_space(end)
        if pos < len(window.text) and window.text[pos] == ",":
            pos = window.skip_space(pos + 1)
        elif pos < len(window.text) and window.text[pos] == "]":
            pos = window.skip_space(pos + 1)
            if pos < len(window.text):
                yield rest_of_file(pos, "unexpected text after the end of the JSON array")
            break
        elif pos < len(window.text):
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
    # nothing inside can nest deeper (the walk is skipped: it costs more than the parse);
    # nor can a record of one text (as the id pass's records are, IdFirstLoads), whose
    # line's brackets are then not even counted (some 1 us a line)
    if (not (len(value) == 1 and type(next(iter(value.values()))) is str)
            and raw.count("[") + raw.count("{") > MAX_NESTING and (column := deepest_column(value)) is not None):
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
        self.ran_out = False  # the input ended while csv.reader wanted more of the record

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
        if self._back:
            line = self._back.popleft()
        else:
            try:
                line = next(self._lines)
            except StopIteration:
                self.ran_out = True
                raise
        self.taken.append(line)
        self._bytes += line.size
        if self._bytes > MAX_RECORD_BYTES:
            raise _RecordTooLarge()
        return line.text + "\n"


def _csv_records(feed: _Feed):
    """(cells or None, lines taken, error) for each CSV record, resynchronising
    after damage: a record that fails to parse, or grows past the size limit,
    costs its first line, and the lines after it are read again."""
    # strict: a closing quote followed by anything but a delimiter or the line's end is an
    # error, not text joined to the cell (a quote closing on a later line would swallow the
    # rows between); so is the end of the input inside a quoted field.
    reader = csv.reader(feed, strict=True)
    while True:
        feed.start_record()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except (csv.Error, _RecordTooLarge) as e:
            taken = feed.taken
            first, last = taken[0].number, taken[-1].number
            if isinstance(e, _RecordTooLarge):
                reason = (taken[0].bad if len(taken) == 1  # one line over the limit on its own
                          else f"a quoted field opened on line {first} runs over {MAX_RECORD_BYTES:,} bytes")
            elif feed.ran_out:
                feed.ran_out = False
                reason = f"a quoted field opened on line {first} is never closed; the lines after it are read again as rows"
            elif "expected after" in str(e):
                after = "(CSV wants a delimiter or the line's end there)"
                reason = (f"a quoted field on line {first} has text after its closing quote {after}" if first == last
                          else f"a quoted field opened on line {first} closes on line {last} with text after its "
                               f"closing quote {after}; the lines after line {first} are read again as rows")
            else:
                reason = f"unreadable CSV: {e}"
            feed.push_back(taken[1:])
            yield None, taken[:1], reason
            reader = csv.reader(feed, strict=True)
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
