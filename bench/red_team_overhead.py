"""Red teaming's cost: `evalbeam run` of the same cases without and with `red_team`, as ratios measured in one
invocation (the runs alternate, `--repeats` times each).

A red-team run is its cases' twins (the run without attacks) plus an attacked run per case, attack and target, so
its agent work is (1 + attacks x targets) times the unattacked run's. The bench prints, for the wall time and the
CPU time (the command's and its worker processes') of the whole command, the red-team run over the unattacked
one (the ratio, best of the repeats), and that ratio over the runs' ratio: what a run costs under red teaming
against what it costs alone (1.0: each attacked run costs what a run costs; less: the command's fixed cost is
shared). The agent is tests/red_team_app.py's scripted function agent (`--sleep` seconds a
case: an agent's latency, which the extra runs multiply; 0: evalbeam's own cost alone), its tools given by
evalbeam; the attacks are evalbeam's built-in families at fetch_page's $.body and in the user's turn.

    PYTHONPATH=$PWD .venv/bin/python bench/red_team_overhead.py [--cases 100] [--sleep 0.02] [--repeats 2] [--max-concurrency 8]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from evalbeam.metrics.red_team import builtin_attacks  # noqa: E402


def config(tmp: Path, cases: int, sleep: float, concurrency: int, red_team: bool, run_id: str) -> Path:
    data = tmp / "cases.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({
            "id": f"case-{i}", "topic": f"t{i % 4}", "prompt": f"Case {i}: the home page #fetch=home #sleep={sleep}",
            "reference_trajectory": [{"tool_name": "fetch_page", "tool_input": {"url": "home"}}]}) + "\n"
            for i in range(cases)))
    body = {
        "name": "red-team-bench", "run_id": run_id,
        "input": {"uri": str(data), "id_column": "id", "slice_columns": ["topic"]},
        "inference": {"function": "tests.red_team_app:shop_agent", "max_concurrency": concurrency},
        "metrics": [{"name": "trajectory_exact_match", "threshold": 1.0}],
        "output": {"parquet": str(tmp / "out")},
    }
    if red_team:  # the same agent and tools (its own without red_team), attacked
        body["red_team"] = {"tools": [{"name": "fetch_page", "json_paths": ["$.body"],
                                       "function": "tests.red_team_app:fetch_page"}], "user_turn": True}
    path = tmp / f"{run_id}.yaml"
    path.write_text(json.dumps(body))
    return path


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and its worker processes, once ended
    return usage.ru_utime + usage.ru_stime


def timed(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `evalbeam run`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start, used = time.monotonic(), cpu()
    subprocess.run([str(Path(sys.executable).with_name("evalbeam")), "run", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.monotonic() - start, cpu() - used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds each agent run takes (its latency)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-concurrency", type=int, default=8)
    args = parser.parse_args()
    attacks = len(builtin_attacks().attacks) * 2  # two targets
    runs = 1 + attacks
    plain, attacked = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(args.repeats):
            plain.append(timed(config(tmp, args.cases, args.sleep, args.max_concurrency, False, f"plain{r}")))
            attacked.append(timed(config(tmp, args.cases, args.sleep, args.max_concurrency, True, f"attacked{r}")))
    print(f"cases: {args.cases}; agent latency {args.sleep}s a run; max_concurrency {args.max_concurrency}; "
          f"{attacks} attacked runs a case (5 built-in families x 2 targets): {runs}x the runs")
    for what, i in (("wall", 0), ("CPU", 1)):
        best_plain, best_attacked = min(t[i] for t in plain), min(t[i] for t in attacked)
        ratio = best_attacked / best_plain
        print(f"{what} seconds: unattacked {', '.join(f'{t[i]:.1f}' for t in plain)} (best {best_plain:.1f}); "
              f"red team {', '.join(f'{t[i]:.1f}' for t in attacked)} (best {best_attacked:.1f}): ratio {ratio:.2f} "
              f"for {runs}x the runs, {ratio / runs:.2f} of an unattacked run's {what} per run")

if __name__ == "__main__":
    main()
