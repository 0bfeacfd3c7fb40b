"""OpenTelemetry spans into scored cases: spans per second and peak memory, in one process run.

The spans are a real ADK agent run's (tests/data/otel/adk_weather.jsonl), cloned with fresh
trace and span ids (and conversation ids: two traces a conversation) until there are N,
shuffled, and written as gzipped OTLP JSON Lines files (500 spans a request line, 8 files).

For each N of --spans:
(a) the plain loop (N up to --plain-max): every line json.loads'ed, metrics.rows.otlp.spans_of_request,
    a dict of lists by trace id, each trace checked (metrics.rows.otlp) and made a case
    (metrics.rows.otel), all in one process, in memory;
(b) `evalbeam run` as a user runs it (no flags: a local run over this much input uses a worker
    process per core), `group_by: conversation`, four metrics the spans support (failure,
    latency_in_seconds, tool_call_count_v1, token_usage_v1), on this checkout;
(c) with --ref REF (N up to --ref-max): the same run on that commit's package tree (today's reader,
    which holds every span in the local runner's GroupByKey).

Each run is timed end to end, with the peak of the summed resident memory of its process tree
(sampled every 0.2 s, as bench/scale.py does). Prints spans/s of each, the ratios b/a and b/c, the
peak MB, the growth of (b)'s peak from the first N to the last, and checks that every conversation
is a case and that (b) and (c) wrote the same metric_results rows (instance, metric, score, error).

    .venv/bin/python bench/otel_traces.py [--spans 1000000 5000000] [--ref REF] [--ref-max N] [--plain-max N]
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import duckdb
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cli_startup import checkout_tree, tree_of  # noqa: E402
from bench.scale import run_measured  # noqa: E402
from evalbeam.metrics.rows.otel import case_record, conversation_of  # noqa: E402
from evalbeam.metrics.rows.otlp import check_trace, dedup, spans_of_request  # noqa: E402

SPANS_A_LINE = 500
FILES = 8
METRICS = ["failure", "latency_in_seconds", "tool_call_count_v1", "token_usage_v1"]


def real_traces() -> list[list[tuple]]:
    traces = defaultdict(list)
    for line in (ROOT / "tests" / "data" / "otel" / "adk_weather.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    traces[span["traceId"]].append((rs["resource"], ss["scope"], span))
    return list(traces.values())


def write_spans(folder: Path, n: int, seed: int = 1) -> tuple[int, int]:
    """About n spans in FILES gzipped files; returns (spans, conversations) written. The spans are
    shuffled within windows of 200,000 (a whole shuffle of 5,000,000 would need tens of GB here),
    so a trace's spans are still spread over every file."""
    rng = random.Random(seed)
    base = real_traces()
    outs = [gzip.open(folder / f"spans{f}.jsonl.gz", "wt", compresslevel=1) for f in range(FILES)]
    count, conversations, window = 0, 0, []

    def flush():
        rng.shuffle(window)
        for j in range(0, len(window), SPANS_A_LINE):
            chunk = window[j:j + SPANS_A_LINE]
            outs[(j // SPANS_A_LINE) % FILES].write(json.dumps(
                {"resourceSpans": [{"resource": r, "scopeSpans": [{"scope": sc, "spans": [s]}]}
                                   for r, sc, s in chunk]}) + "\n")
        window.clear()

    while count < n:
        conversations += 1
        for _ in range(2):  # two traces a conversation
            trace = rng.choice(base)
            ids = {s["spanId"]: f"{rng.getrandbits(64):016x}" for _, _, s in trace}
            trace_id = f"{rng.getrandbits(128):032x}"
            for resource_, scope, s in trace:
                s = copy.copy(s)
                s["traceId"], s["spanId"] = trace_id, ids[s["spanId"]]
                if s.get("parentSpanId"):
                    s["parentSpanId"] = ids[s["parentSpanId"]]
                s["attributes"] = [a if a["key"] != "gen_ai.conversation.id" else
                                   {"key": a["key"], "value": {"stringValue": f"c{conversations}"}}
                                   for a in s["attributes"]]
                window.append((resource_, scope, s))
                count += 1
        if len(window) >= 200_000:
            flush()
    flush()
    for out in outs:
        out.close()
    return count, conversations


def plain(folder: Path) -> int:
    traces = defaultdict(list)
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                for span in spans_of_request(json.loads(line))[0]:
                    traces[span["trace_id"]].append(span)
    by_conversation = defaultdict(list)
    for spans in traces.values():
        spans, _, _ = dedup(spans)
        assert check_trace(spans) is None
        by_conversation[conversation_of(spans) or spans[0]["trace_id"]].append(spans)
    return sum(1 for key, group in by_conversation.items() if case_record(key, group))


def evalbeam_run(tree: Path, folder: Path, out: Path, tmp: Path) -> tuple[float, float, list[float]]:
    config = {"name": "bench", "run_id": "bench",
              "input": {"uri": str(folder / "*.jsonl.gz"), "format": "otel_traces", "otel": {"group_by": "conversation"}},
              "metrics": METRICS, "output": {"parquet": str(out)}}
    path = tmp / "otel.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return run_measured([sys.executable, "-m", "evalbeam.pipelines.cli", "run", str(path)], env)


def cases_and_results(out: Path) -> tuple[int, int, str]:
    """(records scored, metric_results rows, a digest of (instance, metric, score, error) over all rows)."""
    with duckdb.connect() as con:
        scored = con.execute(f"SELECT scored_count FROM '{out}/bench/runs/*.parquet'").fetchone()[0]
        rows, digest = con.execute(
            f"SELECT count(*), bit_xor(hash(instance_id, metric, score, error)) "
            f"FROM '{out}/bench/metric_results/*.parquet'").fetchone()
    return scored, rows, str(digest)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--ref", help="a commit whose reader to measure too (c), e.g. bf21f0f")
    parser.add_argument("--ref-max", type=int, default=1_000_000, help="the largest N to run (c) on")
    parser.add_argument("--plain-max", type=int, default=1_000_000, help="the largest N to run (a) on")
    args = parser.parse_args()
    peaks = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {"b": checkout_tree(tmp / "after")}
        if args.ref:
            trees["c"] = tree_of(args.ref, tmp / "before")
        for tree in trees.values():  # as a user's first run does: the modules compiled once, not timed
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)
        for n in args.spans:
            folder = tmp / f"spans-{n}"
            folder.mkdir()
            spans, conversations = write_spans(folder, n)
            print(f"{spans:,} spans, {conversations:,} conversations, "
                  f"{sum(p.stat().st_size for p in folder.glob('*.gz')) / 1e6:.1f} MB gzipped", flush=True)
            rate = {}
            if n <= args.plain_max:
                start = time.perf_counter()
                plain_cases = plain(folder)
                a = time.perf_counter() - start
                rate["a"] = spans / a
                print(f"  (a) plain loop:         {a:8.1f} s  {rate['a']:8,.0f} spans/s  {plain_cases:,} cases", flush=True)
                assert plain_cases == conversations, (plain_cases, conversations)
            digests = {}
            for name, tree in trees.items():
                if name == "c" and n > args.ref_max:
                    continue
                out = tmp / f"out-{name}"
                seconds, peak, each = evalbeam_run(tree, folder, out, tmp)
                scored, rows, digests[name] = cases_and_results(out)
                rate[name] = spans / seconds
                label = "this checkout" if name == "b" else args.ref
                print(f"  ({name}) evalbeam run, {label}: {seconds:8.1f} s  {rate[name]:8,.0f} spans/s  peak memory "
                      f"{peak:7,.0f} MB (processes' own peaks {each} MB); {scored:,} cases scored, {rows:,} metric rows",
                      flush=True)
                assert scored == conversations, (name, scored, conversations)
                if name == "b":
                    peaks.append((n, peak))
                subprocess.run(["rm", "-rf", str(out)], check=True)
            ratios = [f"b/{x} {rate['b'] / rate[x]:.2f}" for x in ("a", "c") if x in rate]
            if "c" in digests:
                same = digests["b"] == digests["c"]
                ratios.append("metric_results of (b) and (c) " + ("identical" if same else "DIFFER"))
            print(f"  spans/s ratios: {'; '.join(ratios)}", flush=True)
            subprocess.run(["rm", "-rf", str(folder)], check=True)
    if len(peaks) > 1:
        (n0, p0), (n1, p1) = peaks[0], peaks[-1]
        print(f"peak memory of (b): {p1:,.0f} MB at {n1:,} spans / {p0:,.0f} MB at {n0:,} spans = {p1 / p0:.2f}")


if __name__ == "__main__":
    main()
