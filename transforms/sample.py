"""A sample of a dataset's records, read before the pipeline starts (preflight)."""
from __future__ import annotations

import dataclasses
from typing import Any

from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import UTF8, DeadLetter, Record


@dataclasses.dataclass
class Sample:
    records: list[dict[str, Any]]
    dead_letters: list[DeadLetter]
    whole: bool = False  # every file was read to its end: the sample is the whole input


# The most text a sample holds: an OTLP request line may hold hundreds of spans (megabytes each
# line), and 200 of them were gigabytes held in the launcher before the run began.
SAMPLE_BYTES = 16 * 1024 * 1024


def sample_records(paths: list[str], fmt: str, limit: int = 200, encoding: str = UTF8,
                   max_bytes: int = SAMPLE_BYTES) -> Sample:
    """Up to ``limit`` parseable records (and at most about ``max_bytes`` of their text) from the
    first files, and the dead letters met on the way, for checking columns before the pipeline starts."""
    sample = Sample([], [])
    size = 0
    for path in paths:
        for item in parse_file(path, fmt, encoding):
            if isinstance(item, Record):
                sample.records.append(item.data)
                size += len(item.raw)
                if len(sample.records) >= limit or size >= max_bytes:
                    return sample
            elif isinstance(item, DeadLetter) and len(sample.dead_letters) < limit:
                sample.dead_letters.append(item)
    sample.whole = True
    return sample
