"""The test suite's time before and after a change to how it runs, measured in one process run, one
after the other: the tests of a base commit (default: the merge base with main) run as `make test` ran
them there (serially, every `evalbeam` call a new process), then this checkout's tests run with the
pytest arguments given after `--` (what `make test` runs now: -n 3 --dist loadscope).

The base commit's tree is extracted with `git archive` into a temporary folder beside this checkout's
environments (.venv, .emulators, .adk, .airflow, .agent: symlinks; evalbeam itself is imported from
this checkout, whose package code the change leaves as it was). Each side's pytest reports to a JUnit
XML file. Printed, for each side: wall seconds, CPU seconds (user + system of pytest and every process
it waited for: workers, `evalbeam` subprocesses, emulators), the counts of passed, failed and skipped
tests; the ratios after/before; and the checks that no behaviour was left unasserted:
  - the test ids that passed before and did not pass after (should be none), and the reverse;
  - per test file, the `assert` statements and `pytest.raises` calls (ast), where they differ.

    .venv/bin/python bench/suite_time.py [--base REV] [--select 'PYTEST ARGS'] [-- NEW PYTEST ARGS]
    e.g. .venv/bin/python bench/suite_time.py --select '-m "not agent" tests/pipelines' -- -n 3 --dist loadscope
"""
from __future__ import annotations

import argparse
import ast
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = (".venv", ".emulators", ".adk", ".airflow", ".agent")


def timed_pytest(tree: Path, args: list[str], report: Path) -> dict:
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *args],
                   cwd=tree, check=False)
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, **outcomes(report)}


def outcomes(report: Path) -> dict:
    """{'passed': ids, 'failed': ids, 'skipped': ids} from a JUnit XML report."""
    found = {"passed": set(), "failed": set(), "skipped": set()}
    for case in ET.parse(report).iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found["failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"].add(test)
    return found


def asserts(tree: Path) -> dict:
    """{test file: (assert statements, pytest.raises calls)} under tree/tests."""
    counts = {}
    for path in sorted((tree / "tests").rglob("test_*.py")):
        nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        raises = sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "raises"
                     for n in nodes)
        counts[path.relative_to(tree).as_posix()] = (sum(isinstance(n, ast.Assert) for n in nodes), raises)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=None, help="the commit to compare with (default: git merge-base HEAD main)")
    parser.add_argument("--select", default="tests", help="the tests both sides run (pytest arguments, one string)")
    parser.add_argument("new", nargs="*", help="after --: the pytest arguments only this checkout's side adds")
    args = parser.parse_args()
    base = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True,
                                       text=True, check=True).stdout.strip()
    select = shlex.split(args.select)
    with tempfile.TemporaryDirectory(prefix="evalbeam-base-") as work:
        tree = Path(work) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", base], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for name in ENVIRONMENTS:
            if (ROOT / name).exists():
                os.symlink(ROOT / name, tree / name)
        print(f"before: {base[:12]}, pytest {' '.join(select)}", flush=True)
        old = timed_pytest(tree, select, Path(work) / "before.xml")
        print(f"after: this checkout, pytest {' '.join([*args.new, *select])}", flush=True)
        new = timed_pytest(ROOT, [*args.new, *select], Path(work) / "after.xml")
        old_asserts, new_asserts = asserts(tree), asserts(ROOT)
    for name, side in (("before", old), ("after", new)):
        print(f"{name}: {side['wall']:.0f} s wall, {side['cpu']:.0f} s CPU; passed {len(side['passed'])}, "
              f"failed {len(side['failed'])}, skipped {len(side['skipped'])}")
    print(f"after/before: wall {new['wall'] / old['wall']:.2f}, CPU {new['cpu'] / old['cpu']:.2f}")
    print("passed before, not after:", sorted(old["passed"] - new["passed"]) or "none")
    print("passed after, not before:", sorted(new["passed"] - old["passed"]) or "none")
    changed = {f: (old_asserts.get(f), new_asserts.get(f)) for f in sorted({*old_asserts, *new_asserts})
               if old_asserts.get(f) != new_asserts.get(f)}
    print("asserts and pytest.raises per file, where they differ (before, after):", changed or "none")


if __name__ == "__main__":
    main()
