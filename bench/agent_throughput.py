"""Deployed-agent throughput against a quota: a real ADK agent served over A2A by ADK's own `to_a2a`
(tests/servers/a2a_agent.py, in the .agent venv: `make agent-env`), whose model is the local generateContent
server (the test stand-in for Gemini) answering after a log-normal latency, and `evalbeam run` with
`inference.a2a` on N one-turn cases with inference.requests_per_minute set to the quota.

Prints cases per minute while inferring (from the model server's record of the calls it answered,
first to last: one model call per case here), that rate over the quota, the most agent calls in
flight at once (seen at the model server), and lost cases (rows not scored 1: the agent's answer
is checked against the expected one).

    .venv/bin/python bench/agent_throughput.py [--cases 300] [--quota 300] [--latency-median 1.0]
        [--max-concurrency 32] [-- BEAM FLAGS]
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
from tests.servers.a2a_agent import A2AServer  # noqa: E402  (the test server, never in the product)
from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--quota", type=float, default=300, help="inference.requests_per_minute")
    parser.add_argument("--latency-median", type=float, default=1.0, help="the agent's model call, seconds")
    parser.add_argument("--latency-sigma", type=float, default=0.3, help="log-normal sigma: the tail")
    parser.add_argument("--max-concurrency", type=int, default=32, help="inference.max_concurrency")
    parser.add_argument("beam_args", nargs="*")
    args = parser.parse_args()

    behaviour = Behaviour(latency_median=args.latency_median, latency_sigma=args.latency_sigma, seed=1)
    with tempfile.TemporaryDirectory() as tmp, JudgeServer(behaviour) as model, A2AServer(model.url) as url:
        tmp = Path(tmp)
        data = tmp / "cases.jsonl"
        data.write_text("".join(json.dumps({"id": f"case-{i}", "prompt": f"Question {i}",
                                            "reference": f"No tool needed: Question {i}"}) + "\n"
                                for i in range(args.cases)))
        config = tmp / "bench.yaml"
        config.write_text(yaml.safe_dump({
            "name": "agent-bench", "run_id": "bench",
            "input": {"uri": str(data), "id_column": "id"},
            "inference": {"a2a": url, "requests_per_minute": args.quota, "max_concurrency": args.max_concurrency},
            "metrics": ["exact_match"],
            "output": {"parquet": str(tmp / "out")},
        }))
        start = time.monotonic()
        subprocess.run([str(Path(sys.executable).with_name("evalbeam")), "run", str(config), *args.beam_args],
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
        wall = time.monotonic() - start
        stats = model.stats
        with duckdb.connect() as con:
            [(rows, ok)] = con.sql(f"SELECT COUNT(*), COUNT(*) FILTER (WHERE score = 1) FROM "
                                   f"'{tmp}/out/bench/metric_results/*.parquet' WHERE metric = 'exact_match'").fetchall()

    times = sorted(stats.accepted_times)
    span = times[-1] - times[0]
    achieved = (len(times) - 1) / span * 60 if span > 0 else float("nan")
    print(f"cases: {args.cases} (one turn, one model call each); quota {args.quota:g}/min; agent model latency "
          f"median {args.latency_median}s (log-normal sigma {args.latency_sigma}); max_concurrency {args.max_concurrency}")
    print(f"wall time of evalbeam run {wall:.1f}s; agent calls answered {stats.accepted}")
    print(f"cases per minute while inferring: {achieved:.0f}/min = {achieved / args.quota:.3f} of the quota")
    n = len(times)
    if n >= 20:
        a, b = int(n * 0.1), int(n * 0.9)
        middle = (b - a) / (times[b] - times[a]) * 60
        print(f"  steady state (middle 80% of calls): {middle:.0f}/min = {middle / args.quota:.3f} of the quota")
    print(f"agent calls in flight at once, at most: {stats.peak_in_flight} "
          f"(quota/60 x latency = {args.quota / 60 * args.latency_median:.1f} needed)")
    print(f"lost cases: {args.cases - ok} (rows {rows}, answered as expected {ok})")


if __name__ == "__main__":
    main()
