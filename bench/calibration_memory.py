"""The size of a calibration accumulator (transforms.calibration.SliceCalibration, one
metric and slice) after N instances, as Beam ships it between stages (pickled), for a
1..5 judge against one annotator (categorical), against the mean of two annotators,
and a continuous score against continuous labels (one distinct pair an instance, up
to metrics.statistics.calibration.MAX_CELLS).

    .venv/bin/python bench/calibration_memory.py [--rows 100000]
"""
from __future__ import annotations

import argparse
import pickle
import random

from evalbeam.transforms.calibration import SliceCalibration


def accumulate(rows: int, kind: str) -> SliceCalibration:
    rng = random.Random(1)
    acc = SliceCalibration({"m": 3.0})
    for i in range(rows):
        if kind == "one annotator":
            score, labels = float(rng.randint(1, 5)), (float(rng.randint(1, 5)),)
        elif kind == "two annotators":
            score, labels = float(rng.randint(1, 5)), (float(rng.randint(1, 5)), float(rng.randint(1, 5)))
        else:
            score, labels = rng.random(), (rng.random(),)
        acc.add(f"id-{i}", [("m", score, labels, ())])
    return acc.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    for kind in ("one annotator", "two annotators", "continuous"):
        for rows in (1_000, args.rows):
            acc = accumulate(rows, kind)
            agreement = acc.moments["m"].agreement
            print(f"{kind:15s} {rows:>9,} rows: {len(agreement.cells):>5} distinct pairs, "
                  f"overflow {agreement.overflow}, pickled {len(pickle.dumps(acc)) / 1024:,.0f} KB")


if __name__ == "__main__":
    main()
