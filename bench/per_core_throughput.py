"""Throughput per core: `evalbeam run` on one worker and on two against the peer
loop, at several row counts, with peak memory, all in one process run.

For each text length W of --words (default 80: the response and the reference
about W words each, as bench/compute_throughput.py generates them) and each N
(default 20,000 and 100,000):
(p) the peer loop of bench/compute_throughput.py (rouge-score-rs x4 with the
    stemmer + sacrebleu's BLEU built once), timed over rows in memory, 20,000
    at a time (each chunk generated apart, with its own seed, and not timed;
    sacrebleu's tokenizer caches emptied once, before the first);
(b) `evalbeam run` (ROUGE x4, BLEU and the six trajectory metrics, as in
    compute_throughput) with `--direct_num_workers=W` for each W of --workers
    (W > 1 adds `--direct_running_mode=multi_processing`), timed end to end,
    with the peak of the summed resident memory of its process tree (sampled
    every 0.2 s, as bench/scale.py does);
and, with --ref REF, (b) again on that commit's package tree (before), each
(b) run alternating between the trees so that both see the same load
(--after REF: that commit's tree as after, instead of this checkout).

Prints, per N and tree and W: rows/s, the ratio b/p, on one worker also the
ratio of CPU time (the peer loop's process time over the evalbeam process's,
start-up included: what a row costs, less sensitive than wall time to what
else runs on a shared machine), peak MB, and the largest difference between
evalbeam's scores and the peer loop's (0: bit-identical), with the number of
scores missing on either side. The ratios are what to read: the machine is
shared, its rows/s vary from hour to hour.

    .venv/bin/python bench/per_core_throughput.py [--rows 20000 100000 1000000] [--words 20 80 300] [--workers 1 2] [--ref REF] [--after REF]
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

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.cli_startup import checkout_tree, tree_of  # noqa: E402
from bench.compute_throughput import CONFIG, compile_checkout, cold_sacrebleu, generate, peer_loop  # noqa: E402
from bench.scale import run_measured  # noqa: E402

CHUNK = 20_000


def write_input_and_peer(rows: int, data_path: Path, peer_path: Path, words: int = 80) -> tuple[float, float]:
    """Writes N rows of texts of about `words` words (chunks of CHUNK, chunk k generated with seed k, ids row-<i> for all)
    and the peer loop's scores (Parquet); returns the peer loop's seconds and CPU seconds (the loops only)."""
    cold_sacrebleu()
    seconds = cpu = 0.0
    schema = pa.schema([("instance_id", pa.string()), ("metric", pa.string()), ("score", pa.float64())])
    with data_path.open("w") as f, pq.ParquetWriter(peer_path, schema) as writer:
        for k, start in enumerate(range(0, rows, CHUNK)):
            chunk = generate(min(CHUNK, rows - start), seed=k, words=words)
            for i, row in enumerate(chunk):
                row["id"] = f"row-{start + i}"
            began, began_cpu = time.perf_counter(), time.process_time()
            scores = peer_loop(chunk)
            seconds += time.perf_counter() - began
            cpu += time.process_time() - began_cpu
            f.write("\n".join(json.dumps(r) for r in chunk) + "\n")
            keys = list(scores)
            writer.write_table(pa.table({"instance_id": [k[0] for k in keys], "metric": [k[1] for k in keys],
                                         "score": list(scores.values())}, schema=schema))
    return seconds, cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compare(peer_path: Path, out: Path) -> tuple[int, int, float]:
    """(peer scores missing in evalbeam's, evalbeam's rows of those metrics not in the peer's, largest |difference|)."""
    with duckdb.connect() as con:
        con.execute(f"CREATE VIEW p AS SELECT * FROM read_parquet('{peer_path}')")
        con.execute(f"CREATE VIEW b AS SELECT instance_id, metric, score FROM "
                    f"read_parquet('{out}/bench/metric_results/*.parquet') WHERE metric IN (SELECT DISTINCT metric FROM p)")
        missing = con.execute("SELECT count(*) FROM p ANTI JOIN b USING (instance_id, metric)").fetchone()[0]
        extra = con.execute("SELECT count(*) FROM b ANTI JOIN p USING (instance_id, metric)").fetchone()[0]
        diff = con.execute("SELECT max(abs(p.score - b.score)) FROM p JOIN b USING (instance_id, metric)").fetchone()[0]
    return missing, extra, diff


def worker_flags(workers: int) -> list[str]:
    return [f"--direct_num_workers={workers}"] + (["--direct_running_mode=multi_processing"] if workers > 1 else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--words", type=int, nargs="+", default=[80], help="words of each response and reference")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ref", help="a commit to measure too (before), e.g. main")
    parser.add_argument("--after", help="a commit to measure as after (default: this checkout as it is)")
    args = parser.parse_args()
    compile_checkout()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {"after": tree_of(args.after, tmp / "after") if args.after else checkout_tree(tmp / "after")}
        if args.ref:
            trees = {"before": tree_of(args.ref, tmp / "before"), **trees}
        for name, ref in (("before", args.ref), ("after", args.after)):
            if ref:  # as compile_checkout does for this checkout: a user's first run compiles the modules once
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp / name)], check=True)
        named = {"before": args.ref, "after": args.after or "this checkout"}
        print(f"trees: {', '.join(f'{n} = {named[n]}' for n in trees)}; cores: {os.cpu_count()}", flush=True)
        print(f"{'words':>5}  {'rows':>9}  {'tree':6}  {'workers':>7}  {'rows/s':>8}  {'b/p':>5}  {'CPU b/p':>7}  "
              f"{'peak MB':>7}  scores vs peer", flush=True)
        for words in args.words:
            for rows in sorted(args.rows):
                measure(rows, words, args.workers, trees, tmp)


def measure(rows: int, words: int, workers_list: list[int], trees: dict[str, Path], tmp: Path) -> None:
    """The peer loop on N rows of texts of about `words` words, then evalbeam on each tree and worker count."""
    evalbeam = [sys.executable, "-m", "evalbeam.pipelines.cli"]
    data, peer_scores = tmp / f"bench-{rows}.jsonl", tmp / f"peer-{rows}.parquet"
    peer_seconds, peer_cpu = write_input_and_peer(rows, data, peer_scores, words)
    p = rows / peer_seconds
    print(f"{words:>5}  {rows:>9,}  {'peer':6}  {'-':>7}  {p:8.1f}  {'':5}  {'':7}  {'':7}  "
          f"({rows / peer_cpu:.1f} rows per CPU second)", flush=True)
    for workers in workers_list:
        for name, tree in trees.items():
            out = tmp / f"out-{name}"
            config = tmp / "bench.yaml"
            config.write_text(CONFIG.format(data=data, out=out))
            env = {**os.environ, "PYTHONPATH": str(tree)}
            cpu = children_cpu()
            seconds, peak, _ = run_measured([*evalbeam, "run", str(config), *worker_flags(workers)], env)
            cpu = children_cpu() - cpu
            missing, extra, diff = compare(peer_scores, out)
            b = rows / seconds
            # one worker: the whole run is one process, whose CPU time the bench collects;
            # worker processes that the run does not wait for would go uncounted
            cpu_ratio = f"{peer_cpu / cpu:7.2f}" if workers == 1 else f"{'-':>7}"
            print(f"{words:>5}  {rows:>9,}  {name:6}  {workers:>7}  {b:8.1f}  {b / p:5.2f}  {cpu_ratio}  {peak:7.0f}  "
                  f"largest |difference| {diff:.3g}, missing {missing}, extra {extra}", flush=True)
            subprocess.run(["rm", "-rf", str(out)], check=True)
    data.unlink()
    peer_scores.unlink()

if __name__ == "__main__":
    main()
