"""Judge durability and batch cost, against the local generateContent server
(the test stand-in for Gemini).

1. Kill and re-run: `evalbeam run` needing N judgments at a quota, killed with
   SIGKILL half way through judging, then run again with the same run_id.
   Prints the calls of each run, the judgments answered twice, and the calls
   the server admitted in the last checkpoint interval before the kill.
2. Batch against online: the same judgments with judge.mode online, then
   batch; prints both runs' estimated cost (the prices of judge.prices) and
   wall time, and whether every score is the same.

    .venv/bin/python bench/judge_durability.py [--judgments 1200] [--quota 1200] [--checkpoint-seconds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: E402  (the stand-in, never in the product)

EVALBEAM = str(Path(sys.executable).with_name("evalbeam"))
PRICES = {"gemini-2.5-flash": {"input_per_million": 0.30, "output_per_million": 2.50}}


def write(tmp: Path, server_url: str, run_id: str, judgments: int, judge: dict) -> Path:
    data = tmp / "cases.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"id": f"case-{i}", "response": f"Response number {i}: the answer is "
                                            f"{i * 7 % 97}."}) + "\n" for i in range(judgments)))
    config = tmp / f"{run_id}.yaml"
    config.write_text(yaml.safe_dump({
        "name": "durability-bench", "run_id": run_id, "input": {"uri": str(data), "id_column": "id"},
        "metrics": ["evalbeam_fluency"], "judge": {"base_url": server_url, "prices": PRICES, **judge},
        "output": {"parquet": str(tmp / "out")},
    }))
    return config


def runs_row(tmp: Path, run_id: str) -> dict:
    with duckdb.connect() as con:
        rel = con.sql(f"SELECT * FROM '{tmp}/out/{run_id}/runs/*.parquet'")
        [row] = rel.fetchall()
        return dict(zip(rel.columns, row))


def scores(tmp: Path, run_id: str) -> dict:
    with duckdb.connect() as con:
        return dict(con.sql(f"SELECT instance_id, score FROM '{tmp}/out/{run_id}/metric_results/*.parquet'").fetchall())


def kill_and_rerun(args, env) -> None:
    behaviour = Behaviour(quota=args.quota, window_seconds=60.0, latency_median=1.0, latency_sigma=0.5, seed=1)
    with tempfile.TemporaryDirectory() as tmp, JudgeServer(behaviour) as server:
        tmp = Path(tmp)
        config = write(tmp, server.url, "killed", args.judgments, {
            "requests_per_minute": args.quota, "checkpoint_seconds": args.checkpoint_seconds})
        first = subprocess.Popen([EVALBEAM, "run", str(config)], env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while server.stats.accepted < args.judgments // 2 and first.poll() is None:
            time.sleep(0.01)
        if first.poll() is not None:
            raise SystemExit(f"evalbeam run ended ({first.returncode}) before it could be killed")
        os.killpg(first.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        first.wait()
        time.sleep(2)  # calls in flight at the kill reach the server, or never will
        first_calls = server.stats.requests
        window = sum(t >= killed_at - args.checkpoint_seconds for t in server.stats.accepted_times)
        subprocess.run([EVALBEAM, "run", str(config)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        second_calls = server.stats.requests - first_calls
        row = runs_row(tmp, "killed")
    repeated = first_calls + second_calls - args.judgments
    print(f"kill and re-run: {args.judgments} judgments at {args.quota}/min, latency median 1 s, "
          f"checkpoint_seconds {args.checkpoint_seconds:g}")
    print(f"  killed (SIGKILL) after {first_calls} calls; the re-run made {second_calls} "
          f"(reused {json.loads(row['judge_usage'])['evalbeam_fluency']['checkpoint_reused']} checkpointed answers)")
    print(f"  judgments paid twice: {repeated} = {repeated / args.quota * 60:.1f} s of the quota; "
          f"calls admitted in the last {args.checkpoint_seconds:g} s before the kill: {window}")


def batch_against_online(args, env) -> None:
    figures = {}
    with tempfile.TemporaryDirectory() as tmp, JudgeServer(Behaviour(latency_median=0.05, batch_seconds=2.0)) as server:
        tmp = Path(tmp)
        for mode in ("online", "batch"):
            config = write(tmp, server.url, mode, args.judgments, {
                "requests_per_minute": 60000, "mode": mode, "batch_poll_seconds": 0.5, "batch_poll_max_seconds": 2})
            start = time.monotonic()
            subprocess.run([EVALBEAM, "run", str(config)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
            figures[mode] = (time.monotonic() - start, runs_row(tmp, mode)["judge_estimated_cost"], scores(tmp, mode))
        jobs = len(server.stats.batch_jobs)
    (t_on, c_on, s_on), (t_b, c_b, s_b) = figures["online"], figures["batch"]
    print(f"batch against online: {args.judgments} judgments; batch jobs {jobs} (a job takes 2 s on this server)")
    print(f"  estimated cost: online ${c_on:.6f}, batch ${c_b:.6f} = {c_b / c_on:.3f} of online")
    print(f"  wall time: online {t_on:.1f} s, batch {t_b:.1f} s; identical scores: {s_on == s_b}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judgments", type=int, default=1200)
    parser.add_argument("--quota", type=int, default=1200, help="requests per minute the server admits")
    parser.add_argument("--checkpoint-seconds", type=float, default=5.0)
    args = parser.parse_args()
    # this checkout's code, wherever the evalbeam command was installed from
    env = {**os.environ, "GOOGLE_API_KEY": "bench-key", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    kill_and_rerun(args, env)
    batch_against_online(args, env)


if __name__ == "__main__":
    main()
