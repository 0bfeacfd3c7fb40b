"""Failure modes: the count's memory against the number of failures and of modes, and
the classification's throughput against a quota.

memory: the per-(metric, slice) accumulator (metrics.failure_modes.ModeCounts, what
the pipeline's CombinePerKey holds) fed N failures spread over M modes, its peak
Python allocation measured by tracemalloc; printed as ratios to the smallest run.

    .venv/bin/python bench/failure_modes.py memory [--failures 10000 100000 1000000] [--modes 12 48]

throughput: `evalbeam run` on N rows that all fail exact_match, failure_modes on, against
the local generateContent stand-in with a per-minute quota, a log-normal latency and
transient 503s: the achieved classification rate over the quota (from the server's record
of the requests it admitted), 429s and lost rows.

    .venv/bin/python bench/failure_modes.py throughput [--failures 3000] [--quota 6000] [-- BEAM FLAGS]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evalbeam.metrics.failure_modes import ModeCounts  # noqa: E402
from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: E402  (the stand-in, never in the product)


def peak_bytes(failures: int, modes: int) -> tuple[int, float]:
    names = [f"mode_{m}" for m in range(modes)]
    tracemalloc.start()
    start = time.monotonic()
    counts = ModeCounts()
    for n in range(failures):
        counts.add(f"case-{n // 3}", names[n % modes])  # three failures an instance
    counts.flush()
    seconds = time.monotonic() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sum(counts.counts.values()) == failures
    return peak, seconds


def memory(args) -> None:
    base = None
    print(f"{'failures':>10} {'modes':>6} {'peak KiB':>10} {'ratio':>7} {'seconds':>8}")
    for modes in args.modes:
        for failures in args.failures:
            peak, seconds = peak_bytes(failures, modes)
            base = base or peak
            print(f"{failures:>10,} {modes:>6} {peak / 1024:>10,.0f} {peak / base:>7.2f} {seconds:>8.1f}")


def throughput(args) -> None:
    behaviour = Behaviour(quota=args.quota, window_seconds=60.0, latency_median=args.latency_median,
                          latency_sigma=args.latency_sigma, error_rate=args.error_rate, seed=1)
    modes = ["wrong_tool", "bad_arguments", "tool_not_called", "output_misused"]
    with tempfile.TemporaryDirectory() as tmp, JudgeServer(behaviour) as server:
        tmp = Path(tmp)
        data = tmp / "cases.jsonl"
        data.write_text("".join(json.dumps({
            "id": f"case-{i}", "team": f"team-{i % 5}", "prompt": f"Question {i}",
            "response": f"Answer {i} #mode={modes[i % len(modes)]}", "reference": f"Expected {i}"}) + "\n"
            for i in range(args.failures)))
        config = tmp / "bench.yaml"
        config.write_text(json.dumps({
            "name": "failure-modes-bench", "run_id": "bench",
            "input": {"uri": str(data), "id_column": "id", "slice_columns": ["team"]},
            "metrics": [{"name": "exact_match", "threshold": 1.0}],
            "failure_modes": {"metrics": ["exact_match"], "taxonomy": "tool_use"},
            "judge": {"base_url": server.url, "requests_per_minute": args.quota, "timeout_seconds": 60},
            "output": {"parquet": str(tmp / "out")},
        }))
        env = {**os.environ, "GOOGLE_API_KEY": "bench-key"}
        start = time.monotonic()
        subprocess.run([str(Path(sys.executable).with_name("evalbeam")), "run", str(config), *args.beam_args],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.monotonic() - start
        stats = server.stats
        import duckdb  # the tests' reader of Parquet

        with duckdb.connect() as con:
            [(rows, classified)] = con.sql(
                f"SELECT COUNT(*), COUNT(mode) FROM '{tmp}/out/bench/failure_assignments/*.parquet'").fetchall()
    times = sorted(stats.accepted_times)
    span = times[-1] - times[0]
    achieved = (len(times) - 1) / span * 60 if span > 0 else float("nan")
    print(f"failures: {args.failures}; quota {args.quota}/min; latency median {args.latency_median}s (log-normal "
          f"sigma {args.latency_sigma}); transient 503s {args.error_rate:.0%}; wall time of evalbeam run {wall:.1f}s")
    print(f"requests: {stats.requests} ({stats.accepted} admitted, {stats.rate_limited} answered 429, "
          f"{stats.errors} answered 503)")
    print(f"achieved rate while classifying: {achieved:.0f}/min = {achieved / args.quota:.3f} of the quota")
    n = len(times)
    if n >= 20:
        a, b = int(n * 0.1), int(n * 0.9)
        middle = (b - a) / (times[b] - times[a]) * 60
        print(f"  steady state (middle 80% of requests): {middle:.0f}/min = {middle / args.quota:.3f}")
    print(f"rows: {rows} failure_assignments for {args.failures} failures, {classified} classified, "
          f"lost {args.failures - rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory")
    m.add_argument("--failures", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    m.add_argument("--modes", type=int, nargs="+", default=[12, 48])
    t = sub.add_parser("throughput")
    t.add_argument("--failures", type=int, default=3000)
    t.add_argument("--quota", type=int, default=6000, help="requests per minute the server admits")
    t.add_argument("--latency-median", type=float, default=0.5)
    t.add_argument("--latency-sigma", type=float, default=0.8)
    t.add_argument("--error-rate", type=float, default=0.03)
    t.add_argument("beam_args", nargs="*")
    args = parser.parse_args()
    memory(args) if args.what == "memory" else throughput(args)


if __name__ == "__main__":
    main()
