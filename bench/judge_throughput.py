"""Judge throughput against a quota: the local generateContent server (the test
stand-in for Gemini) with a per-minute quota, a ~1 s median latency with a long
tail and transient 503s, and `evalbeam run` needing N judgments with
judge.requests_per_minute set to the quota.

Prints the achieved request rate over the quota (from the server's own record
of the requests it admitted, first to last), the 429s as a share of requests,
and lost judgments (metric rows missing, or failed after their retries).

    .venv/bin/python bench/judge_throughput.py [--judgments 1200] [--quota 1200] [-- BEAM FLAGS]

Rubric mode (--rubric-candidates K): N rows, K candidate responses per prompt, judged with
evalbeam_general_quality; also prints the generation calls (they must equal the distinct prompts,
N / K) and the validation calls.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: E402  (the stand-in, never in the product)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judgments", type=int, default=1200)
    parser.add_argument("--quota", type=int, default=1200, help="requests per minute the server admits")
    parser.add_argument("--latency-median", type=float, default=1.0)
    parser.add_argument("--latency-sigma", type=float, default=0.8, help="log-normal sigma: the tail")
    parser.add_argument("--error-rate", type=float, default=0.03)
    parser.add_argument("--rubric-candidates", type=int, default=0,
                        help="rubric mode: K candidate responses per prompt, judged with evalbeam_general_quality")
    parser.add_argument("beam_args", nargs="*")
    args = parser.parse_args()

    behaviour = Behaviour(quota=args.quota, window_seconds=60.0, latency_median=args.latency_median,
                          latency_sigma=args.latency_sigma, error_rate=args.error_rate, seed=1)
    with tempfile.TemporaryDirectory() as tmp, JudgeServer(behaviour) as server:
        tmp = Path(tmp)
        data = tmp / "cases.jsonl"
        k = args.rubric_candidates
        metric = "evalbeam_general_quality" if k else "evalbeam_fluency"
        data.write_text("".join(json.dumps({
            "id": f"case-{i}", "response": f"Response number {i}: the answer is {i * 7 % 97}.",
            **({"prompt": f"Question {i // k} #rubrics=4"} if k else {})}) + "\n" for i in range(args.judgments)))
        config = tmp / "bench.yaml"
        config.write_text(yaml.safe_dump({
            "name": "judge-bench", "run_id": "bench",
            "input": {"uri": str(data), "id_column": "id"},
            "metrics": [metric],
            "judge": {"base_url": server.url, "requests_per_minute": args.quota, "timeout_seconds": 60},
            "output": {"parquet": str(tmp / "out")},
        }))
        env = {**os.environ, "GOOGLE_API_KEY": "bench-key"}
        start = time.monotonic()
        subprocess.run([str(Path(sys.executable).with_name("evalbeam")), "run", str(config), *args.beam_args],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        wall = time.monotonic() - start
        stats = server.stats
        with duckdb.connect() as con:
            [(rows, ok)] = con.sql(f"SELECT COUNT(*), COUNT(score) FROM '{tmp}/out/bench/metric_results/*.parquet' "
                                   f"WHERE metric = '{metric}'").fetchall()

    times = sorted(stats.accepted_times)
    span = times[-1] - times[0]
    achieved = (len(times) - 1) / span * 60 if span > 0 else float("nan")
    print(f"judgments needed: {args.judgments}; quota {args.quota}/min; latency median {args.latency_median}s "
          f"(log-normal sigma {args.latency_sigma}); transient 503s {args.error_rate:.0%}")
    print(f"requests: {stats.requests} ({stats.accepted} admitted, {stats.rate_limited} answered 429, "
          f"{stats.errors} answered 503); wall time of evalbeam run {wall:.1f}s")
    print(f"achieved rate while judging: {achieved:.0f}/min = {achieved / args.quota:.3f} of the quota")
    n = len(times)
    if n >= 20:
        a, b = int(n * 0.1), int(n * 0.9)
        middle = (b - a) / (times[b] - times[a]) * 60
        print(f"  steady state (middle 80% of requests): {middle:.0f}/min = {middle / args.quota:.3f}; first 10% of "
              f"requests took {times[a] - times[0]:.1f}s, last 10% {times[-1] - times[b]:.1f}s (ramp-up, retry tail)")
    print(f"judgments per minute while judging: {args.judgments / span * 60:.0f}; calls beyond one per judgment: "
          f"{stats.requests - args.judgments} ({stats.duplicates} of them copies of a call in flight, hedges)")
    print(f"429s: {stats.rate_limited / stats.requests:.2%} of requests")
    print(f"lost judgments: {args.judgments - ok} (rows {rows}, scored {ok})")
    if k:
        prompts = -(-args.judgments // k)
        print(f"rubric mode: {k} candidates per prompt, {prompts} distinct prompts; generation calls answered "
              f"{stats.stages['generation']} (must equal {prompts}); validation calls answered {stats.stages['validation']}")


if __name__ == "__main__":
    main()
