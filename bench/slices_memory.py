"""Memory of many slice values: `evalbeam run` (one process: --direct_num_workers=1)
over N rows of 12-word texts with exact_match, bleu and rouge_1, once without
slices and once with a slice column holding N distinct values, reporting the peak
resident memory of the command (getrusage of the finished child) and the lines it
printed.

    .venv/bin/python bench/slices_memory.py [--rows 10000]

Slices are summarized in bounded memory (transforms.summary: a slice of a
few instances holds no bootstrap sums until its summary is made, and the values of
a column past its MAX_SLICE_VALUES largest slices are summarized as <column>=(other)),
and the terminal shows the 20 largest slices per metric. Measured on the
development machine (2 cores), 10,000 rows:

    this script:              no slices 294 MB, 10 lines; 10,000 slice values 333 MB, 71 lines
    before, at 92d1d35 (the same runs, peak from /usr/bin/time -v):
                              no slices 304 MB, 10 lines; 10,000 slice values 785 MB, 30,010 lines
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EVALBEAM = str(Path(sys.executable).with_name("evalbeam"))
WORDS = "the a cat dog sat ran on mat fast slow red blue".split()


def run(folder: Path, data: Path, slices: bool) -> tuple[float, int]:
    config = {"name": "slices", "run_id": "with" if slices else "without",
              "input": {"uri": str(data), "id_column": "id", **({"slice_columns": ["user"]} if slices else {})},
              "metrics": ["exact_match", "bleu", "rouge_1"], "output": {"parquet": str(folder / "out")}}
    path = folder / f"{config['run_id']}.yaml"
    path.write_text(yaml.safe_dump(config))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run([EVALBEAM, "run", str(path), "--direct_num_workers=1"], capture_output=True, text=True,
                          check=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:
        raise SystemExit("the peak of this run is below an earlier one's: run each case in its own process")
    return peak / 1024, len(done.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--case", choices=("both", "with", "without"), default="both")
    args = parser.parse_args()
    if args.case == "both":  # each case in its own process: getrusage's peak only grows
        for case in ("without", "with"):
            subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--case", case], check=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rng = random.Random(2)
        data = folder / "rows.jsonl"
        data.write_text("".join(json.dumps({"id": f"c{i}", "response": " ".join(rng.choice(WORDS) for _ in range(12)),
                                            "reference": " ".join(rng.choice(WORDS) for _ in range(12)),
                                            "user": f"u{i}"}) + "\n" for i in range(args.rows)))
        peak, lines = run(folder, data, args.case == "with")
        label = f"{args.rows:,} slice values" if args.case == "with" else "no slices"
        print(f"{args.rows:,} rows, {label}: peak {peak:.0f} MB, {lines} lines printed")


if __name__ == "__main__":
    main()
