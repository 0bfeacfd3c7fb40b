"""Scale on the local runner: `evalbeam run` as a user runs it (no flags) over N
generated rows, reporting wall time, rows/s and the peak memory of the run: the
largest sum of the resident memory of evalbeam's process and all its worker
processes, sampled every 0.2 s from /proc (a local run over a large input starts
one worker process per core).

The rows are those of bench/compute_throughput.py (80-word texts, trajectories),
20,000 of them generated and then repeated with new ids; the metrics are the
same eleven (ROUGE x4, BLEU, six trajectory metrics). With --judge, a pointwise
judge metric (evalbeam_fluency) is added, answered by the local generateContent test
server (tests/servers/judge_server.py) with no latency and a quota that never binds,
and each response carries its row's number, so that every row is one more
judgment to make (none is answered by another row's); the judgments asked and
the calls made are printed from the run's `runs` row.

    .venv/bin/python bench/scale.py [--rows 100000 1000000] [--judge] [-- BEAM FLAGS...]

Prints, per N: seconds, rows/s, peak memory (MB), and at the end the growth of
peak memory from the first N to the last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.compute_throughput import CONFIG, generate  # noqa: E402


def write_rows(path: Path, rows: int, distinct: bool = False) -> None:
    """N rows from 20,000 generated ones, repeated with new ids; with `distinct`,
    every response also carries its row's number, so that each judgment differs
    (no row's is answered by another's: a judge is asked N times)."""
    base = generate(min(rows, 20_000), seed=1)
    with path.open("w") as f:
        for i in range(rows):
            row = dict(base[i % len(base)], id=f"row-{i}")
            if distinct:
                row["response"] = f"{row['response']} ({i})"
            f.write(json.dumps(row) + "\n")


def _tree_rss_mb(root: int, peaks: dict | None = None) -> float:
    """Resident memory of a process and all its descendants, from /proc (and,
    into `peaks`, the largest seen of each of them)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        if peaks is not None:
            peaks[pid] = max(peaks.get(pid, 0), rss.get(pid, 0) / 2 ** 20)
        stack.extend(children.get(pid, []))
    return total / 2 ** 20


def run_measured(command: list[str], env: dict) -> tuple[float, float, list[float]]:
    """(seconds, peak MB of the process tree, the peak MB of each process in it over 50 MB)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    peaks: dict[int, float] = {}
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
    reader.start()
    while process.poll() is None:
        peak = max(peak, _tree_rss_mb(process.pid, peaks))
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    reader.join()
    if process.returncode != 0:
        sys.exit(f"evalbeam run failed ({process.returncode}):\n{''.join(stderr)[-3000:]}")
    return seconds, peak, sorted((round(m) for m in peaks.values() if m > 50), reverse=True)


def measure(rows: int, judge: bool, beam_args: list[str], tmp: Path, server=None) -> float:
    data = tmp / f"rows-{rows}.jsonl"
    write_rows(data, rows, distinct=judge)
    config = yaml.safe_load(CONFIG.format(data=data, out=tmp / f"out-{rows}"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if judge:
        config["metrics"].append("evalbeam_fluency")
        config["judge"] = {"base_url": server.url, "requests_per_minute": 10_000_000, "max_concurrency": 64}
        env["GOOGLE_API_KEY"] = "bench-key"
    path = tmp / "scale.yaml"
    path.write_text(yaml.safe_dump(config))
    evalbeam = str(Path(sys.executable).with_name("evalbeam"))
    seconds, peak, each = run_measured([evalbeam, "run", str(path), *beam_args], env)
    with duckdb.connect() as con:
        read, scored, dead = con.execute(
            f"SELECT read_count, scored_count, dead_letter_count FROM '{tmp}/out-{rows}/bench/runs/*.parquet'").fetchone()
        results = con.execute(f"SELECT count(*) FROM '{tmp}/out-{rows}/bench/metric_results/*.parquet'").fetchone()[0]
        judged = con.execute(
            f"SELECT judge_requests, judge_calls, judge_failures FROM '{tmp}/out-{rows}/bench/runs/*.parquet'").fetchone()
    data.unlink()
    print(f"rows {rows:>9,}: {seconds:8.1f} s  {rows / seconds:8.0f} rows/s  peak memory {peak:7.0f} MB  "
          f"(processes' own peaks {each} MB; read {read:,} = scored {scored:,} + dead-lettered {dead:,}; "
          f"{results:,} metric rows" + (f"; {judged[0]:,} judgments, {judged[1]:,} calls, {judged[2]:,} failed"
                                         if judge else "") + ")", flush=True)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--judge", action="store_true", help="add a judge metric (the local test server)")
    parser.add_argument("beam_args", nargs="*", help="extra flags for evalbeam run (after --)")
    args = parser.parse_args()
    print(f"beam flags: {args.beam_args or '(none)'}; judge metric: {'evalbeam_fluency' if args.judge else 'none'}; "
          f"cores: {os.cpu_count()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.judge:
            from tests.servers.judge_server import Behaviour, JudgeServer  # the test stand-in, never in the product

            server = JudgeServer(Behaviour(latency_median=0.0, latency_sigma=0.0)).__enter__()
        try:
            peaks = [measure(rows, args.judge, args.beam_args, Path(tmp), server) for rows in args.rows]
        finally:
            if server is not None:
                server.__exit__(None, None, None)
    if len(peaks) > 1:
        print(f"peak memory growth from {args.rows[0]:,} to {args.rows[-1]:,} rows: {peaks[-1] / peaks[0]:.2f}x")


if __name__ == "__main__":
    main()
