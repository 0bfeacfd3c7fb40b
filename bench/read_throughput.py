"""What evalbeam's careful reading costs: its JSONL and CSV parsers (line
accounting, per-line decoding, damage recovery, size and nesting limits)
against the plainest stdlib loop over the same bytes, in one process run.

(a) JSONL: `json.loads` per line of a file iterated in binary; CSV: `csv.reader`
    over a `TextIOWrapper` (what evalbeam did before it accounted for lines).
(b) `transforms.parsers.parse_jsonl` / `parse_csv` on the same bytes.

Prints rows/s of each and the ratio b/a per format, and checks that (b) read
every row.

    .venv/bin/python bench/read_throughput.py [--rows 200000]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalbeam.transforms.parsers import parse_csv, parse_jsonl  # noqa: E402
from evalbeam.transforms.records import Record  # noqa: E402

WORDS = "the a cat dog ran sat quickly model agent tool pipeline évaluation 東京 data".split()


def rows(n: int, seed: int = 1):
    rng = random.Random(seed)
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
        yield {"id": str(i), "response": text, "reference": text[::-1],
               "predicted_trajectory": json.dumps([{"tool_name": "get", "tool_input": {"id": i}}])}


def timed(fn) -> tuple[float, int]:
    start = time.perf_counter()
    count = fn()
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    n = parser.parse_args().rows

    data = list(rows(n))
    jsonl = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data).encode()
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(data[0]))
    writer.writeheader()
    writer.writerows(data)
    csv_bytes = out.getvalue().encode()

    def plain_jsonl():
        return sum(isinstance(json.loads(line), dict) for line in io.BytesIO(jsonl) if line.strip())

    def ours_jsonl():
        return sum(isinstance(item, Record) for item in parse_jsonl("bench.jsonl", io.BytesIO(jsonl)))

    def plain_csv():
        reader = csv.reader(io.TextIOWrapper(io.BytesIO(csv_bytes), encoding="utf-8-sig", newline=""))
        header = next(reader)
        return sum(len(cells) == len(header) for cells in reader)

    def ours_csv():
        return sum(isinstance(item, Record) for item in parse_csv("bench.csv", io.BytesIO(csv_bytes)))

    print(f"{n:,} rows; JSONL {len(jsonl) / 1e6:.1f} MB, CSV {len(csv_bytes) / 1e6:.1f} MB")
    for name, plain, ours in (("jsonl", plain_jsonl, ours_jsonl), ("csv", plain_csv, ours_csv)):
        t_plain, c_plain = timed(plain)
        t_ours, c_ours = timed(ours)
        assert c_plain == c_ours == n, (name, c_plain, c_ours)
        print(f"{name:5}  plain loop {n / t_plain:>10,.0f} rows/s   evalbeam {n / t_ours:>10,.0f} rows/s   "
              f"ratio {t_plain / t_ours:.2f}")


if __name__ == "__main__":
    main()
