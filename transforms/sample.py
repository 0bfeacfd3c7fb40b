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
    sample.whole = True
    return sample
