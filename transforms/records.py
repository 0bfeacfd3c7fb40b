"""The record types every reader yields: a Record, a DeadLetter (a line or
record that cannot be one, with the reason), and a SourceLines (what one file
or stream held), with the limits they share.

The parsers (transforms.parsers, transforms.read_adk, transforms.bigquery)
import these; nothing here imports a parser.
"""
from __future__ import annotations

import dataclasses
from typing import Any

DEAD_LETTER = "dead_letter"
LINES = "lines"
MAX_RAW_CHARS = 100_000
# One record (a JSONL line, or the lines of one CSV record) may hold at most
# this much; a larger one is dead-lettered, and memory stays bounded whatever
# the file holds (a CSV quote that never closes cannot swallow the file).
MAX_RECORD_BYTES = 64 * 1024 * 1024
UTF8 = "utf-8"


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
    """What one file (or BigQuery stream) held: its physical lines, and how many of them hold no record
    (`duplicates` of those: spans that repeat one read before, identical, transforms.read_otel)."""

    origin: str
    lines: int
    skipped: int
    duplicates: int = 0
