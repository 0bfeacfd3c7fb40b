"""Reading dataset files into records, with line or row numbers for every record.

Files are matched with Beam's filesystems (local paths and globs now; any
scheme Beam knows later) and each file is parsed by one DoFn call, streaming
line by line. Reading whole files per worker, rather than Beam's splittable
text source, is deliberate: it is what gives each record its line number for
the dead-letter table, and CSV cannot be split at arbitrary byte offsets anyway
(quoted cells may hold newlines). Large datasets are usually many files, which
parallelise across workers; a Reshuffle after the read spreads the records.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

DEAD_LETTER = "dead_letter"
MAX_RAW_CHARS = 100_000


@dataclasses.dataclass
class Record:
    source: str
    data: dict[str, Any]
    raw: str
    from_csv: bool


@dataclasses.dataclass
class DeadLetter:
    source: str
    reason: str
    raw_record: str
    field: str | None = None

    def row(self, run) -> dict[str, Any]:
        return {
            **run.columns(),
            "source": self.source,
            "field": self.field,
            "reason": self.reason,
            "raw_record": self.raw_record[:MAX_RAW_CHARS],
        }


def parse_jsonl(path: str, stream) -> Iterator[Record | DeadLetter]:
    for number, line in enumerate(stream, start=1):
        source = f"{path}:{number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            yield DeadLetter(source, f"line is not valid UTF-8 ({e.reason} at byte {e.start})", line.decode("utf-8", "replace"))
            continue
        text = text.rstrip("\r\n")
        if not text.strip():
            continue  # blank lines are not records
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            yield DeadLetter(source, f"invalid JSON: {e.msg} at column {e.colno}", text)
            continue
        if not isinstance(data, dict):
            yield DeadLetter(source, f"a record must be a JSON object, got {type(data).__name__}", text)
            continue
        yield Record(source, data, text, from_csv=False)


def parse_csv(path: str, stream) -> Iterator[Record | DeadLetter]:
    text_stream = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text_stream)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (UnicodeDecodeError, csv.Error) as e:
        yield DeadLetter(f"{path}:header", f"cannot read the CSV header: {e}", "")
        return
    if len(set(header)) != len(header):
        duplicates = sorted({h for h in header if header.count(h) > 1})
        yield DeadLetter(f"{path}:header", f"CSV header repeats columns {duplicates}; no row of this file was read", ",".join(header))
        return
    row_number = 0
    while True:
        start_line = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except (UnicodeDecodeError, csv.Error) as e:
            # The reader cannot resynchronise after a decoding error: report
            # it and stop this file rather than guess.
            yield DeadLetter(f"{path}:line {start_line}", f"unreadable CSV from here on, rest of file skipped: {e}", "")
            return
        row_number += 1
        source = f"{path}:row {row_number} (line {start_line})"
        raw = _csv_text(cells)
        if not any(c.strip() for c in cells):
            continue  # blank lines are not records
        if len(cells) != len(header):
            yield DeadLetter(source, f"row has {len(cells)} cells, the header has {len(header)}", raw)
            continue
        yield Record(source, dict(zip(header, cells)), raw, from_csv=True)


def _csv_text(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


PARSERS = {"jsonl": parse_jsonl, "csv": parse_csv}


class ParseFileFn(beam.DoFn):
    def __init__(self, fmt: str):
        self._fmt = fmt
        self._read = Metrics.counter("evalbeam", "records_read")
        self._bad = Metrics.counter("evalbeam", "records_unparseable")

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        with readable.open(mime_type="application/octet-stream") as stream:
            for item in PARSERS[self._fmt](path, stream):
                self._read.inc()
                if isinstance(item, DeadLetter):
                    self._bad.inc()
                    yield beam.pvalue.TaggedOutput(DEAD_LETTER, item)
                else:
                    yield item


class ReadRecords(beam.PTransform):
    """Files matching ``uri`` -> Records (main) and DeadLetters (tag 'dead_letter')."""

    def __init__(self, uri: str, fmt: str):
        super().__init__()
        self._uri = uri
        self._fmt = fmt

    def expand(self, pbegin):
        parsed = (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._uri, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW)
            | "OpenFiles" >> fileio.ReadMatches()
            | "ParseFiles" >> beam.ParDo(ParseFileFn(self._fmt)).with_outputs(DEAD_LETTER, main="records")
        )
        records = parsed.records | "Spread" >> beam.Reshuffle()
        return records, parsed[DEAD_LETTER]


def match_files(uri: str) -> list[str]:
    """The files a dataset URI names; empty when none."""
    result = FileSystems.match([uri])[0]
    return sorted(m.path for m in result.metadata_list)


def sample_records(paths: list[str], fmt: str, limit: int = 200) -> list[dict[str, Any]]:
    """Up to ``limit`` parseable records from the first files, for checking
    columns before the pipeline starts."""
    sample: list[dict[str, Any]] = []
    for path in paths:
        with FileSystems.open(path, mime_type="application/octet-stream") as stream:
            for item in PARSERS[fmt](path, stream):
                if isinstance(item, Record):
                    sample.append(item.data)
                    if len(sample) >= limit:
                        return sample
    return sample
