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

import gzip
from typing import Iterator

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.transforms import read_adk
from evalbeam.transforms.decompress import Decompressed
from evalbeam.transforms.file_parts import ByteRange, FilePart, file_parts
from evalbeam.transforms.parsers import json_loads, parse_csv, parse_jsonl
from evalbeam.transforms.read_otel import parse_otlp
from evalbeam.transforms.records import DEAD_LETTER, LINES, UTF8, DeadLetter, Record, SourceLines
from evalbeam.transforms.worker import quiet_interrupts

PARSERS = {"jsonl": parse_jsonl, "csv": parse_csv}
ADK_FORMATS = ("adk_eval_result", "adk_eval_set")


def _adk_parser(fmt: str):
    # JSON documents: UTF-8 (RFC 8259; the config allows no other)
    def parse(path: str, stream, encoding: str = UTF8, adk: read_adk.AdkReading | None = None):
        return getattr(read_adk, f"parse_{fmt}")(path, stream, adk or read_adk.AdkReading())

    return parse


PARSERS.update({fmt: _adk_parser(fmt) for fmt in ADK_FORMATS})
PARSERS["otel_traces"] = parse_otlp


def parse_file(path: str, fmt: str, encoding: str = UTF8,
               adk: read_adk.AdkReading | None = None, loads=None) -> Iterator[Record | DeadLetter | SourceLines]:
    """Every record, dead letter and the line count of one file (decompressed by its
    extension, as Beam names compressions: .gz, .bz2, .zst/.zstd, .xz/.lzma, .deflate),
    whose text is in `encoding`; `adk`: how an ADK file is read (read_adk.AdkReading);
    `loads`: how a JSONL line is parsed (None: json.loads, as parsers.json_loads; see parsers.IdFirstLoads)."""
    options = {"adk": adk} if fmt in ADK_FORMATS else {"loads": loads} if fmt == "jsonl" and loads else {}
    kind = CompressionTypes.detect_compression_type(path)
    with FileSystems.open(path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if kind == CompressionTypes.UNCOMPRESSED:
            yield from PARSERS[fmt](path, raw, encoding=encoding, **options)
        elif kind == CompressionTypes.GZIP:
            with gzip.GzipFile(fileobj=raw) as stream:
                yield from PARSERS[fmt](path, stream, encoding=encoding, **options)
        else:
            yield from PARSERS[fmt](path, Decompressed(raw, kind), encoding=encoding, **options)


def parse_part(part: FilePart, fmt: str, encoding: str = UTF8,
               adk: read_adk.AdkReading | None = None, loads=None) -> Iterator[Record | DeadLetter | SourceLines]:
    """Every record, dead letter and the line count of a FilePart (`loads`: as parse_file's)."""
    if part.end is None and part.start == 0:
        yield from parse_file(part.path, fmt, encoding, adk, loads)
        return
    with FileSystems.open(part.path, mime_type="application/octet-stream",
                          compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        stream.seek(part.start)
        yield from parse_jsonl(part.path, ByteRange(stream, part.end - part.start), part.first_line, part.start == 0,
                               encoding, loads or json_loads)


class ParseFileFn(beam.DoFn):
    """counted: False for a second read of the same files (its records are not counted again).
    loads: how a JSONL line is parsed (None: json.loads, as parsers.json_loads; see parsers.IdFirstLoads)."""

    def __init__(self, fmt: str, counted: bool = True, encoding: str = UTF8,
                 adk: read_adk.AdkReading | None = None, loads=None):
        self._fmt = fmt
        self._encoding = encoding
        self._adk = adk
        self._loads = loads
        prefix = "" if counted else "reread_"
        self._read = Metrics.counter("evalbeam", prefix + "records_read")
        self._bad = Metrics.counter("evalbeam", prefix + "records_unparseable")
        self._lines = Metrics.counter("evalbeam", prefix + "lines_read")

    def setup(self):
        quiet_interrupts()  # the first of a run's DoFns a worker sets up

    def process(self, part: FilePart):
        index = 0
        whole = part.end is None and part.start == 0
        for item in parse_part(part, self._fmt, self._encoding, self._adk, self._loads):
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
    encoding: the files' text encoding (input.encoding); adk: how ADK files are read (read_adk.AdkReading);
    loads: how a JSONL line is parsed (None: json.loads, as parsers.json_loads; parsers.IdFirstLoads for a read of the ids alone)."""

    def __init__(self, fmt: str, *, uri: str | None = None, parts=None, counted: bool = True, encoding: str = UTF8,
                 adk: read_adk.AdkReading | None = None, loads=None):
        super().__init__()
        self._adk = adk
        self._loads = loads
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
            | "ParseFiles" >> beam.ParDo(ParseFileFn(self._fmt, self._counted, self._encoding, self._adk,
                                                       self._loads)).with_outputs(
                DEAD_LETTER, LINES, main="records")
        )
        return parsed.records, parsed[DEAD_LETTER], parsed[LINES]


class FileParts(beam.PTransform):
    """The files matching ``uri`` -> the FileParts to read them in (of about
    `part_bytes`; None: default_part_bytes()), in `encoding`; with `modified_from` (seconds
    since the epoch: input.since's window, transforms.since), only the files modified since then."""

    def __init__(self, uri: str, fmt: str, part_bytes: int | None = None, encoding: str = UTF8,
                 modified_from: float | None = None):
        super().__init__()
        self._uri = uri
        self._fmt = fmt
        self._part_bytes = part_bytes
        self._encoding = encoding
        self._modified_from = modified_from

    def expand(self, pbegin):
        files = pbegin | "MatchFiles" >> fileio.MatchFiles(self._uri,
                                                          empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW)
        if self._modified_from is not None:
            files = files | "ModifiedSince" >> beam.Filter(
                lambda metadata, since: metadata.last_updated_in_seconds >= since, self._modified_from)
        return (
            files
            | "Split" >> beam.FlatMap(
                lambda metadata, fmt, size, encoding: file_parts(metadata.path, fmt, metadata.size_in_bytes, size, encoding),
                self._fmt, self._part_bytes, self._encoding)
        )


def match_files(uri: str) -> list[str]:
    """The files a dataset URI names; empty when none."""
    result = FileSystems.match([uri])[0]
    return sorted(m.path for m in result.metadata_list)
