"""Scenario generation against a quota: `evalbeam generate` asking N scenarios of the local
generateContent server (the test stand-in for Gemini, which scripts scenario answers) at a quota of
Q requests a minute, with a log-normal latency (median 0.5 s, sigma 0.8) and 3% transient 503s.
Needs google-adk (the agent extra): run it with .agent's interpreter.

Prints the achieved request rate over the quota (from the server's own record of the requests it
admitted, first to last; and in steady state, the middle 80%), the 429s, the scenarios lost (asked
but without a row), and the peak memory of the run's processes (bench/scale.py's sampling); with
--compare N2, the same at N2 scenarios, and the peak's growth from N to N2.

    PYTHONPATH=$PWD .agent/bin/python bench/scenario_generation.py [--scenarios 10000] [--quota 6000]
        [--per-cell 1] [--compare 2000] [-- BEAM FLAGS]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.scale import run_measured  # noqa: E402
from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: E402  (the stand-in, never in the product)

AGENT = {"name": "weather", "instruction": "You answer questions about the weather with your tools.",
         "tools": [{"name": "get_weather", "description": "the weather of a city"}]}


def measure(scenarios: int, args, tmp: Path) -> dict:
    personas = ["NOVICE", "EXPERT"]
    cells = -(-scenarios // args.per_cell)
    goals = [f"goal {i}: ask about the weather in city {i}" for i in range(-(-cells // len(personas)))]
    behaviour = Behaviour(quota=args.quota, window_seconds=60.0, latency_median=args.latency_median,
                          latency_sigma=args.latency_sigma, error_rate=args.error_rate, seed=1)
    with JudgeServer(behaviour) as server:
        out = tmp / f"out-{scenarios}"
        config = tmp / f"bench-{scenarios}.yaml"
        config.write_text(yaml.safe_dump({
            "name": "generate-bench", "run_id": f"bench{scenarios}",
            "scenarios": {"description": AGENT, "goals": goals, "personas": personas, "per_cell": args.per_cell},
            "judge": {"base_url": server.url, "requests_per_minute": args.quota, "timeout_seconds": 60},
            "output": {"parquet": str(out), "eval_set": str(tmp / f"bench-{scenarios}.evalset.json")}}))
        env = {**os.environ, "GOOGLE_API_KEY": "bench-key", "PYTHONPATH": str(ROOT)}
        seconds, peak, peaks = run_measured([str(Path(sys.executable).with_name("evalbeam")), "generate", str(config),
                                             *args.beam_args], env)
        stats = server.stats
    with duckdb.connect() as con:
        [(rows, kept)] = con.sql(f"SELECT COUNT(*), COUNT(*) FILTER (WHERE decision = 'kept') FROM "
                                 f"'{out}/bench{scenarios}/scenarios/*.parquet'").fetchall()
    times = sorted(stats.accepted_times)
    span = times[-1] - times[0]
    achieved = (len(times) - 1) / span * 60 if span > 0 else float("nan")
    n = len(times)
    a, b = int(n * 0.1), int(n * 0.9)
    middle = (b - a) / (times[b] - times[a]) * 60 if n >= 20 else float("nan")
    return {"scenarios": cells * args.per_cell, "cells": cells, "seconds": seconds, "peak": peak, "peaks": peaks,
            "requests": stats.requests, "accepted": stats.accepted, "rate_limited": stats.rate_limited,
            "errors": stats.errors, "achieved": achieved, "middle": middle, "rows": rows, "kept": kept}


def control(judgments: int, args, tmp: Path) -> float:
    """The same quota and server behaviour answering `evalbeam run`'s judge metric (bench/judge_throughput.py's
    setup): the judge path's share of the quota on this machine now, to read the generation's against."""
    behaviour = Behaviour(quota=args.quota, window_seconds=60.0, latency_median=args.latency_median,
                          latency_sigma=args.latency_sigma, error_rate=args.error_rate, seed=1)
    with JudgeServer(behaviour) as server:
        data = tmp / "control.jsonl"
        data.write_text("".join(json.dumps({"id": f"case-{i}", "response": f"Response {i}: {i * 7 % 97}."}) + "\n"
                                for i in range(judgments)))
        config = tmp / "control.yaml"
        config.write_text(yaml.safe_dump({
            "name": "control", "run_id": "control", "input": {"uri": str(data), "id_column": "id"},
            "metrics": ["evalbeam_fluency"],
            "judge": {"base_url": server.url, "requests_per_minute": args.quota, "timeout_seconds": 60},
            "output": {"parquet": str(tmp / "control-out")}}))
        env = {**os.environ, "GOOGLE_API_KEY": "bench-key", "PYTHONPATH": str(ROOT)}
        run_measured([str(Path(sys.executable).with_name("evalbeam")), "run", str(config), *args.beam_args], env)
        times = sorted(server.stats.accepted_times)
    return (len(times) - 1) / (times[-1] - times[0]) * 60 / args.quota


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--quota", type=int, default=6_000, help="requests per minute the server admits")
    parser.add_argument("--per-cell", type=int, default=1, help="scenarios asked per request")
    parser.add_argument("--latency-median", type=float, default=0.5)
    parser.add_argument("--latency-sigma", type=float, default=0.8)
    parser.add_argument("--error-rate", type=float, default=0.03)
    parser.add_argument("--compare", type=int, default=None, help="also measure this many scenarios (memory growth)")
    parser.add_argument("--control", action="store_true",
                        help="also run the judge path (a judge metric) at the same quota: the machine's own reach")
    parser.add_argument("beam_args", nargs="*")
    args = parser.parse_args()
    sizes = [args.compare, args.scenarios] if args.compare else [args.scenarios]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            start = time.monotonic()
            r = measure(size, args, Path(tmp))
            results.append(r)
            print(f"{r['scenarios']:,} scenarios ({r['cells']:,} requests of {args.per_cell}) at a quota of "
                  f"{args.quota:,}/min, latency median {args.latency_median}s (sigma {args.latency_sigma}), "
                  f"{args.error_rate:.0%} 503s: {time.monotonic() - start:.1f}s")
            print(f"  requests {r['requests']:,} ({r['accepted']:,} admitted, {r['rate_limited']:,} answered 429, "
                  f"{r['errors']:,} answered 503)")
            print(f"  achieved rate: {r['achieved']:.0f}/min = {r['achieved'] / args.quota:.3f} of the quota; steady "
                  f"state (middle 80%): {r['middle'] / args.quota:.3f}")
            print(f"  scenarios lost: {r['scenarios'] - r['rows']} (rows {r['rows']:,}, kept {r['kept']:,})")
            print(f"  peak memory {r['peak']:.0f} MB (processes over 50 MB: {r['peaks']})")
        if args.control:
            share = control(args.scenarios, args, Path(tmp))
            generation = results[-1]["achieved"] / args.quota
            print(f"control: {args.scenarios:,} judgments of a judge metric through `evalbeam run`: {share:.3f} of the "
                  f"quota; generation / control: {generation / share:.3f}")
    if len(results) == 2:
        print(f"peak memory from {results[0]['scenarios']:,} to {results[1]['scenarios']:,} scenarios: "
              f"{results[1]['peak'] / results[0]['peak']:.2f}x")


if __name__ == "__main__":
    main()
