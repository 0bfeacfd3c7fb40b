"""What each `evalbeam` command costs before it does its work: the imports it makes
(`python -X importtime`, the cumulative time of every top-level import summed),
whether it imports Apache Beam, and its wall time, the median of a few runs.

The commands are run as `python -m evalbeam.pipelines.cli ARGS` on this checkout
and, with `--ref REF`, on that commit too (its tree taken with `git archive`, put
first on the path: the installed evalbeam is not used), alternately, so that both
see the same load; the table then gives each figure before (REF) and after (this
checkout) and their ratio. `runs`, `show` and `show --json` read a small results
folder made first by `evalbeam run configs/demo.yaml` (this checkout's);
`validate` checks configs/demo.yaml; `run`, `compare` and `report` print their `--help`.

    .venv/bin/python bench/cli_startup.py [--ref REF] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("configs", "metrics", "pipelines", "transforms")
RUN_ID = "bench-cli-startup"


def commands(out: Path) -> list[tuple[str, list[str]]]:
    demo = str(ROOT / "configs" / "demo.yaml")
    parquet = ["--parquet", str(out)]
    return [
        ("--help", ["--help"]),
        ("metrics", ["metrics"]),
        ("runs", ["runs", *parquet]),
        ("show", ["show", RUN_ID, *parquet]),
        ("show --json", ["show", RUN_ID, "--json", *parquet]),
        ("validate", ["validate", demo]),
        *((f"{name} --help", [name, "--help"]) for name in ("run", "compare", "report")),
    ]


def tree_of(ref: str, into: Path) -> Path:
    """REF's package folders under into/evalbeam/ (a namespace package, as installed)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, *FOLDERS], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    package = into / "evalbeam"
    package.mkdir()
    for folder in FOLDERS:
        (into / folder).rename(package / folder)
    build_extensions(into)
    return into


def build_extensions(into: Path) -> None:
    """A tree's C extensions (metrics/_bleu13a.c from 9af8374 on), compiled beside its modules as
    `pip install` does, so that a commit is measured as it is installed."""
    import setuptools
    from setuptools.command.build_ext import build_ext

    sources = sorted((into / "evalbeam").glob("*/*.c"))
    if not sources:
        return
    extensions = [setuptools.Extension(".".join(c.relative_to(into).with_suffix("").parts), [str(c)]) for c in sources]
    command = build_ext(setuptools.Distribution({"ext_modules": extensions}))
    command.build_lib, command.build_temp = str(into), str(into / "build")
    command.ensure_finalized()
    command.run()


def checkout_tree(into: Path) -> Path:
    """This checkout's package folders, linked under into/evalbeam/."""
    (into / "evalbeam").mkdir(parents=True)
    for folder in FOLDERS:
        (into / "evalbeam" / folder).symlink_to(ROOT / folder)
    return into


def run_command(path: Path, args: list[str], importtime: bool) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "evalbeam.pipelines.cli", *args]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, result


def imports(stderr: str) -> tuple[float, bool]:
    """The summed cumulative time (s) of the top-level imports, and whether apache_beam was imported."""
    total, beam = 0.0, False
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        total += int(cumulative) / 1e6 if not name[1:].startswith(" ") else 0  # " name": top level
        beam = beam or name.strip() == "apache_beam"
    return total, beam


def measure(path: Path, args: list[str]) -> tuple[float, bool, float, int]:
    _, traced = run_command(path, args, importtime=True)
    wall, plain = run_command(path, args, importtime=False)
    if plain.returncode != traced.returncode:
        raise SystemExit(f"evalbeam {' '.join(args)}: status {plain.returncode}, then {traced.returncode}")
    return (*imports(traced.stderr), wall, plain.returncode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="a commit to compare with (before), e.g. main")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command per tree (default 3)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {"after": checkout_tree(tmp / "after")}
        if options.ref:
            trees = {"before": tree_of(options.ref, tmp / "before"), **trees}
        out = tmp / "out"
        _, made = run_command(trees["after"], ["run", str(ROOT / "configs" / "demo.yaml"), "--set", f"run_id={RUN_ID}",
                                               "--set", f"output.parquet={out}"], importtime=False)
        if made.returncode != 0:
            raise SystemExit(f"the results folder could not be made:\n{made.stderr}")
        rows = []
        for label, args in commands(out):
            figures = {name: [] for name in trees}
            for _ in range(options.repeat):
                for name, path in trees.items():  # alternately: the same load for both
                    figures[name].append(measure(path, args))
            statuses = {f[3] for runs in figures.values() for f in runs}
            if len(statuses) > 1:
                raise SystemExit(f"evalbeam {' '.join(args)}: statuses differ between the trees: {statuses}")
            row = {"command": label, "status": statuses.pop()}
            for name, runs in figures.items():
                row[name] = (statistics.median(f[0] for f in runs), any(f[1] for f in runs),
                             statistics.median(f[2] for f in runs))
            rows.append(row)
            print(f"measured evalbeam {label}", file=sys.stderr)
    print(f"median of {options.repeat} runs each; import: the top-level imports' cumulative time (-X importtime)")
    if options.ref:
        print(f"before: {options.ref}; after: this checkout")
        print("| command | status | imports before | imports after | after / before | wall before | wall after "
              "| after / before | Beam imported before | after |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            (bi, bb, bw), (ai, ab, aw) = r["before"], r["after"]
            print(f"| `evalbeam {r['command']}` | {r['status']} | {bi:.2f} s | {ai:.2f} s | {ai / bi:.2f} | {bw:.2f} s "
                  f"| {aw:.2f} s | {aw / bw:.2f} | {'yes' if bb else 'no'} | {'yes' if ab else 'no'} |")
    else:
        print("| command | status | imports | wall | Beam imported |")
        print("|---|---|---|---|---|")
        for r in rows:
            ai, ab, aw = r["after"]
            print(f"| `evalbeam {r['command']}` | {r['status']} | {ai:.2f} s | {aw:.2f} s | {'yes' if ab else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
