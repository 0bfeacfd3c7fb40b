"""OpenTelemetry spans grouped into cases: spans per second, in one process run.

The spans are a real ADK agent run's (tests/data/otel/adk_weather.jsonl), cloned with fresh
trace and span ids (and conversation ids: two traces a conversation) until there are N,
shuffled, and written as gzipped OTLP JSON Lines files (500 spans a request line, 8 files).

(a) the plain loop: every line json.loads'ed, metrics.rows.otlp.spans_of_request, a dict of lists by
    trace id, each trace checked (metrics.rows.otlp) and made a case (metrics.rows.otel), all in one process;
(b) the pipeline: transforms.read.ReadRecords("otel_traces") + transforms.read_otel.GroupSpans
    (group_by conversation) on the local runner evalbeam uses (pipelines.local.new_pipeline),
    counting the cases.

Prints spans/s of each, the ratio b/a, peak RSS of this process, and checks that both made
every case.

    .venv/bin/python bench/otel_traces.py [--spans 1000000] [-- BEAM FLAGS]
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from evalbeam.metrics.rows.otel import case_record, conversation_of  # noqa: E402
from evalbeam.metrics.rows.otlp import check_trace, dedup, spans_of_request  # noqa: E402
from evalbeam.pipelines.local import new_pipeline  # noqa: E402
from evalbeam.transforms.read import ReadRecords  # noqa: E402
from evalbeam.transforms.read_otel import GroupSpans  # noqa: E402

SPANS_A_LINE = 500
FILES = 8


def real_traces() -> list[list[tuple]]:
    traces = defaultdict(list)
    for line in (ROOT / "tests" / "data" / "otel" / "adk_weather.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    traces[span["traceId"]].append((rs["resource"], ss["scope"], span))
    return list(traces.values())


def write_spans(folder: Path, n: int, seed: int = 1) -> tuple[int, int]:
    """About n spans in FILES gzipped files; returns (spans, conversations) written."""
    rng = random.Random(seed)
    base = real_traces()
    spans, count, conversations, i = [], 0, 0, 0
    while count < n:
        conversations += 1
        for _ in range(2):  # two traces a conversation
            i += 1
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
                spans.append((resource_, scope, s))
                count += 1
    rng.shuffle(spans)
    per_file = -(-len(spans) // FILES)
    for f in range(FILES):
        part = spans[f * per_file:(f + 1) * per_file]
        with gzip.open(folder / f"spans{f}.jsonl.gz", "wt", compresslevel=1) as out:
            for j in range(0, len(part), SPANS_A_LINE):
                chunk = part[j:j + SPANS_A_LINE]
                out.write(json.dumps({"resourceSpans": [{"resource": r, "scopeSpans": [{"scope": sc, "spans": [s]}]}
                                                        for r, sc, s in chunk]}) + "\n")
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
        spans, _ = dedup(spans)
        assert check_trace(spans) is None
        by_conversation[conversation_of(spans) or spans[0]["trace_id"]].append(spans)
    return sum(1 for key, group in by_conversation.items() if case_record(key, group))


def pipeline(folder: Path, beam_args: list[str]) -> int:
    out = folder / "count.txt"
    with new_pipeline(PipelineOptions(beam_args)) as p:
        records, _, _ = p | ReadRecords("otel_traces", uri=str(folder / "*.jsonl.gz"))
        cases, dead, _ = records | GroupSpans("conversation")
        (cases | beam.combiners.Count.Globally()
         | beam.Map(lambda n, path: Path(path).write_text(str(n)), str(out)))
    return int(out.read_text())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=1_000_000)
    args, beam_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spans, conversations = write_spans(folder, args.spans)
        print(f"{spans:,} spans, {conversations:,} conversations, "
              f"{sum(p.stat().st_size for p in folder.glob('*.gz')) / 1e6:.1f} MB gzipped")
        start = time.perf_counter()
        plain_cases = plain(folder)
        a = time.perf_counter() - start
        print(f"(a) plain loop: {a:.1f} s, {spans / a:,.0f} spans/s, {plain_cases:,} cases")
        start = time.perf_counter()
        beam_cases = pipeline(folder, beam_args)
        b = time.perf_counter() - start
        print(f"(b) pipeline:   {b:.1f} s, {spans / b:,.0f} spans/s, {beam_cases:,} cases")
        print(f"ratio b/a (spans/s): {a / b:.3f}; peak RSS of this process "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
        assert beam_cases == conversations, (beam_cases, conversations)


if __name__ == "__main__":
    main()
