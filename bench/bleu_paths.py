"""Sentence BLEU's CPU time a row, in one process run: sacrebleu's own (a BLEU built once, its
sentence_score, as the peer loop of bench/compute_throughput.py does), evalbeam's `bleu` metric
on its C path (metrics/_bleu13a.c) and on its Python path (what an install without a C compiler
runs), over the same generated rows, each the best of --rounds rounds, the three interleaved in
every round so that they see the same load. Checks that the three give the same scores.

    .venv/bin/python bench/bleu_paths.py [--rows 5000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.compute_throughput import cold_sacrebleu, generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from sacrebleu.metrics.bleu import BLEU

    from evalbeam.metrics import sentence_bleu, text
    from evalbeam.metrics.catalog import get_metric

    if not sentence_bleu.NATIVE:
        sys.exit("the C extension is not built here: .venv/bin/pip install --no-deps --no-build-isolation -e .")
    native = sentence_bleu._native
    definition = get_metric("bleu")
    metric = definition.factory(definition.params.model_validate({}))
    peer = BLEU(effective_order=True)  # sacrebleu.sentence_bleu's defaults
    rows = [{"response": r["response"], "reference": r["reference"]} for r in generate(args.rows, seed=1)]

    def sacrebleu_row(row):
        return peer.sentence_score(row["response"], [row["reference"]]).score / 100

    def timed(path, score):
        sentence_bleu._native = native if path == "c" else None
        text._kept_bleu_stats.cache_clear()  # each path tokenizes every text itself, every round:
        cold_sacrebleu()  # a single pass over a dataset sees each text once
        started = time.process_time()
        scores = [score(row) for row in rows]
        return time.process_time() - started, scores

    paths = {"sacrebleu": sacrebleu_row, "c": metric, "python": metric}
    best = dict.fromkeys(paths, float("inf"))
    scores = {}
    try:
        for _ in range(args.rounds):
            for path, score in paths.items():
                seconds, scores[path] = timed(path, score)
                best[path] = min(best[path], seconds)
    finally:
        sentence_bleu._native = native
    differing = {path: sum(a != b for a, b in zip(scores[path], scores["sacrebleu"])) for path in ("c", "python")}
    print(f"{args.rows} rows, best of {args.rounds} rounds, CPU time a row:")
    for path, seconds in best.items():
        print(f"  {path:>9}: {seconds / args.rows * 1e6:7.1f} µs   sacrebleu / this: {best['sacrebleu'] / seconds:5.2f}")
    print(f"  C path / Python path: {best['c'] / best['python']:.2f}")
    print(f"  scores differing from sacrebleu's: C {differing['c']}, Python {differing['python']}")


if __name__ == "__main__":
    main()
