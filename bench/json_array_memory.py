"""Peak memory of reading a file that holds one JSON array (transforms.parsers.parse_jsonl, as a
run's read step calls it): the file is generated once per size (pretty-printed records of the demo's
fields, five lines each, as exporters write them), then parsed in a new interpreter that discards
each record, and the interpreter's peak resident set (ru_maxrss) is read before parsing (the imports)
and after. With --ref REF, that commit's package tree is measured too, each tree in its own
interpreter, and the peaks' after / before.

    .venv/bin/python bench/json_array_memory.py [--mb 10 1000] [--ref REF] [--dir DIR]

--dir keeps the generated files there (they are made only when missing); else a temporary folder.
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


def generate(path: Path, megabytes: int) -> int:
    """A JSON array of pretty-printed records, about `megabytes` MB; the records written."""
    target, n = megabytes * 1_000_000, 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n")
        size = 2
        while size < target:
            record = json.dumps({"id": f"case-{n:09d}", "response": f"answer number {n} " * 4,
                                 "reference": f"answer number {n} " * 4}, indent=1)
            text = (",\n" if n else "") + record
            f.write(text)
            size += len(text)
            n += 1
        f.write("\n]\n")
    return n


def parse(path: str) -> dict:
    """In this interpreter: parse the file, discarding what is read; the figures as a dict."""
    from evalbeam.transforms.parsers import parse_jsonl
    from evalbeam.transforms.records import Record

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    records = other = 0
    with open(path, "rb") as stream:
        for item in parse_jsonl(path, stream):
            if isinstance(item, Record):
                records += 1
            else:
                other += 1
    return {"records": records, "other": other, "seconds": time.perf_counter() - started,
            "imports_kb": before, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--ref", help="a commit to measure too (before), e.g. main")
    parser.add_argument("--dir", type=Path, help="where the generated files are kept")
    parser.add_argument("--parse", help=argparse.SUPPRESS)  # one tree, one file: the figures as JSON
    args = parser.parse_args()
    if args.parse:
        print(json.dumps(parse(args.parse)))
        return
    from bench.cli_startup import checkout_tree, tree_of

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trees = {"after": checkout_tree(Path(tmp) / "after")}
        if args.ref:
            trees = {"before": tree_of(args.ref, Path(tmp) / "before"), **trees}
        print("file MB  records      tree    peak MB  above imports MB  seconds" + ("  peak after/before" if args.ref else ""))
        for mb in args.mb:
            path = folder / f"array-{mb}mb.json"
            if not path.exists():
                generate(path, mb)
            figures = {}
            for name, tree in trees.items():
                out = subprocess.run([sys.executable, __file__, "--parse", str(path)], check=True, capture_output=True,
                                     text=True, env={**os.environ, "PYTHONPATH": f"{tree}:{ROOT}"}).stdout
                figures[name] = f = json.loads(out.strip().splitlines()[-1])
                ratio = (f"  {f['peak_kb'] / figures['before']['peak_kb']:18.3f}"
                         if args.ref and name == "after" else "")
                print(f"{path.stat().st_size / 1e6:7.0f}  {f['records']:>9,}  {name:>8}  {f['peak_kb'] / 1024:9.1f}  "
                      f"{(f['peak_kb'] - f['imports_kb']) / 1024:16.1f}  {f['seconds']:7.1f}{ratio}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
