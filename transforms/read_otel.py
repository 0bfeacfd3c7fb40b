"""OpenTelemetry GenAI traces in: OTLP JSON requests -> spans -> cases, grouped in Beam.

Files are read by transforms/read.py like any other (matched, decompressed by extension,
gs:// or local): `parse_otlp` reads one ExportTraceServiceRequest per line (JSON Lines),
or one pretty-printed request per file. `GroupSpans` then:

1. flattens each request into its spans, keyed by trace id (a span that cannot be read is
   dead-lettered);
2. groups them by trace (spans arrive in any order, from any file: a GroupByKey, or on a local
   runner transforms.spill's grouping on disk), drops identical copies of a span exported twice
   (counted: a retried export), dead-letters a copy whose content differs from the span kept
   (naming where each was read), and dead-letters a trace with no root span, one whose spans'
   parents never arrived, one with a span that ends before it starts, and one over `max_spans`
   spans or `max_bytes` bytes (counted without being held: memory per case stays bounded);
3. by `group_by: conversation`, groups the traces again by their conversation id
   (`gen_ai.conversation.id`, or ADK's `gcp.vertex.agent.session_id`): a multi-turn
   conversation spread over several traces is one case, a turn per trace;
4. makes each case a Record (metrics.rows.otel.case_record) for transforms.validate.

Accounting is in spans: the SourceLines of an OTLP input count spans (a line that cannot be
read as JSON counts as one), each case's `line_count` is its spans and each dead letter's the
spans it holds, and identical copies are skipped lines (the runs row's lines_duplicate), so the
runs row's lines_read = lines_skipped + lines_scored + lines_dead_lettered is spans read = copies
dropped + spans used + spans dead-lettered.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.rows.otel import CONVERSATION_KEYS, case_record, conversation_of
from evalbeam.metrics.rows.otlp import (
    SpanError, awaiting, check_trace, dedup, skewed_spans, span_of_row, span_size, spans_of_request,
)
from evalbeam.transforms import read_adk
from evalbeam.transforms.parsers import CHUNK, one_document, parse_jsonl
from evalbeam.transforms.records import DEAD_LETTER, LINES, UTF8, DeadLetter, Record, SourceLines
from evalbeam.transforms.since import ReadWindow
from evalbeam.transforms.spill import SpillGroupByKey, spill_folder

MAX_TRACE_SPANS = 10_000
MAX_TRACE_BYTES = 64 * 1024 * 1024
_RAW = 20_000  # of a dead-lettered trace, what its raw_record shows


class _Prefixed:
    """A stream whose first bytes were read to look at, given back first."""

    def __init__(self, head: bytes, stream):
        self._head = head
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._stream.read(n)

    read1 = read


def parse_otlp(path: str, stream, encoding: str = UTF8) -> Iterator[Record | DeadLetter | SourceLines]:
    """One OTLP JSON ExportTraceServiceRequest per line (a large uncompressed file read in parts,
    transforms.file_parts, as JSONL is); or a file whose first line opens a JSON object it does
    not close (one pretty-printed request): read whole."""
    try:
        head = stream.read(CHUNK)
    except Exception as e:  # noqa: BLE001 - a corrupt or truncated stream (a .gz cut short) at its start
        # as parse_jsonl says of the rest of a file it cannot read on: a dead letter holding no line
        yield DeadLetter(f"{path}:1", f"the file cannot be read from its start ({type(e).__name__}: {e})", "",
                         origin=path, line=1, line_count=0)
        yield SourceLines(path, 0, 0)
        return
    if one_document(head):
        yield from read_adk.whole_json_file(path, _Prefixed(head, stream))
        return
    yield from parse_jsonl(path, _Prefixed(head, stream), encoding=encoding)


def _raw_span(span: dict[str, Any]) -> str:
    return json.dumps(span, ensure_ascii=False, sort_keys=True, default=str)


class RequestSpansFn(beam.DoFn):
    """A request Record -> (trace id, span) for each span; a DeadLetter for each span (or
    request) that cannot be read; one SourceLines of the spans it held (tag 'lines')."""

    def __init__(self):
        self._spans = Metrics.counter("evalbeam", "otel_spans_read")

    def process(self, record: Record):
        try:
            spans, bad = spans_of_request(record.data)
        except SpanError as e:
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                record.source, str(e), record.raw, "resourceSpans", record.origin, record.line, 1))
            # an unreadable request counts as one span read and one dead-lettered, however many
            # lines its file had (a pretty-printed request): spans read = used + dead-lettered
            yield beam.pvalue.TaggedOutput(LINES, SourceLines(record.origin, 1, 0))
            return
        for reason, raw in bad:
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                f"{record.source} span", reason, json.dumps(raw, default=str)[:_RAW], "span", record.origin,
                record.line, 1))
        for span in spans:
            span["origin"], span["line"] = record.origin, record.line
            yield span["trace_id"], span
        self._spans.inc(len(spans) + len(bad))
        yield beam.pvalue.TaggedOutput(LINES, SourceLines(record.origin, len(spans) + len(bad), 0))


class RowSpanFn(beam.DoFn):
    """A Record of a span table's row (Cloud Trace's _AllSpans) -> (trace id, span), or a DeadLetter.
    (The rows' SourceLines come from the BigQuery reader: a row is a span.)"""

    def __init__(self):
        self._spans = Metrics.counter("evalbeam", "otel_spans_read")

    def process(self, record: Record):
        self._spans.inc()
        try:
            span = span_of_row(record.data)
        except SpanError as e:
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                record.source, str(e), record.raw, "span", record.origin, record.line, record.line_count))
            return
        span["origin"], span["line"] = record.origin, record.line
        yield span["trace_id"], span


def _place(span: dict[str, Any]) -> str:
    return f"{span.get('origin', '')}:{span.get('line', 0)}"


def _dead(source: str, reason: str, spans: list[dict[str, Any]], count: int, field: str = "trace",
          at: dict[str, Any] | None = None) -> DeadLetter:
    """A dead letter of `count` spans, showing the first of `spans`, placed where `at` (else the first) was read."""
    first = at or (spans[0] if spans else {})
    raw = "\n".join(_raw_span(s) for s in spans[:50])[:_RAW]
    return DeadLetter(source, reason, raw, field, first.get("origin", ""), first.get("line", 0), count)


class CheckTraceFn(beam.DoFn):
    """(trace id, its spans) -> (case key, the trace's spans) for a usable trace; DeadLetters
    for copies of spans and for a trace that cannot be used, with the reason.

    window (input.since): a trace that is a case of its own is skipped, counted, when it ended
    outside the window (a trace still awaiting its root or a parent counts as ending one lateness
    after its last span seen: they may still come); a trace of a conversation goes to its
    conversation with what it would dead-letter (case_of decides, by the conversation's end)."""

    def __init__(self, max_spans: int, max_bytes: int, group_by: str, window: ReadWindow | None = None):
        self._max_spans, self._max_bytes, self._group_by = max_spans, max_bytes, group_by
        self._window = window
        self._duplicates = Metrics.counter("evalbeam", "otel_spans_duplicate")
        self._conflicts = Metrics.counter("evalbeam", "otel_spans_conflicting")
        self._skewed = Metrics.counter("evalbeam", "otel_spans_clock_skewed")
        self._dead = Metrics.counter("evalbeam", "otel_traces_dead_lettered")
        self._outside = {where: Metrics.counter("evalbeam", f"otel_cases_{where}_window") for where in ("before", "after")}

    def process(self, element):
        trace_id, spans_iter = element
        source = f"trace {trace_id}"
        held, count, size, last_end, origin = [], 0, 0, 0, ""
        conversation = _Conversation() if self._group_by == "conversation" else None
        for span in spans_iter:  # a large trace is counted, not held: memory per trace stays bounded
            count += 1
            last_end = max(last_end, span["end"])
            origin = origin or span.get("origin", "")
            if conversation is not None:  # on any span: a large trace's first spans may not name it
                conversation.see(span)
            if held is not None:
                size += span_size(span)
                if count > self._max_spans or size > self._max_bytes:
                    sample = held[:5]
                    held = None
                else:
                    held.append(span)
        # a trace that is a case of its own is decided here (input.since); a conversation's, with its conversation
        own_case = conversation is None or conversation.id is None
        deferred = self._window is not None and not own_case
        letters, duplicates, key, end = [], 0, (conversation.id if conversation is not None else None) or trace_id, last_end
        if held is None:
            limit = (f"more than {self._max_spans:,} spans (input.otel.max_trace_spans)" if count > self._max_spans
                     else f"more than {self._max_bytes:,} bytes (input.otel.max_trace_bytes)")
            reason = f"trace {trace_id} has {count:,} spans, {limit}: too large to evaluate"
            letters.append(_dead(source, reason, sample, count))
            item = {"lost": trace_id, "reason": reason} if deferred or key != trace_id else None
        else:
            spans, duplicates, conflicts = dedup(held)
            for kept, others in conflicts:
                letters.append(_dead(
                    f"{source} span {kept['span_id']}",
                    f"trace {trace_id}: span {kept['span_id']} ({kept['name']}) arrived "
                    f"{'twice' if len(others) == 1 else 'again'} with different content: at {_place(kept)} (kept) "
                    f"and at {', '.join(_place(o) for o in others[:3])}"
                    + (f" and {len(others) - 3} more" if len(others) > 3 else "") + " (dropped)",
                    [kept, *others[:4]], len(others), "span_id", others[0]))
            if self._group_by == "conversation":
                key = conversation_of(spans) or trace_id
            reason = check_trace(spans)
            if reason:
                letters.append(_dead(source, reason, sorted(spans, key=lambda s: s["start"]), len(spans)))
                item = {"lost": trace_id, "reason": reason} if deferred or key != trace_id else None
                if self._window is not None and awaiting(spans):
                    # its root (or a parent) may still come: it ends no earlier than its spans seen, and
                    # has one more lateness to arrive before it is taken for lost
                    end = last_end + int(self._window.lateness.total_seconds() * 1e9)
            else:
                item = spans
        if self._window is not None and own_case:
            where = self._window.where(end)
            if where != "in":  # an earlier run's case, or one not complete yet: not this run's to judge
                self._outside[where].inc()
                yield beam.pvalue.TaggedOutput(LINES, SourceLines(origin, 0, count, duplicates))
                return
        self._duplicates.inc(duplicates)
        self._conflicts.inc(sum(letter.line_count for letter in letters if letter.field == "span_id"))
        if not isinstance(item, list):
            self._dead.inc()
        else:
            self._skewed.inc(skewed_spans(item))
        yield from self._out(key, item, letters, duplicates, end, deferred, origin)

    def _out(self, key: str, item, letters: list[DeadLetter], duplicates: int, last_end: int, deferred: bool,
             origin: str):
        """The trace's outputs: its dead letters and copies counted now, and (key, its spans, or a mark
        that its conversation lost it); deferred (a conversation's, with a window): all with the item,
        for case_of to emit or skip with its conversation."""
        if deferred:
            yield key, {"trace": item if isinstance(item, list) else None, **(item if isinstance(item, dict) else {}),
                        "end": last_end, "dead": letters, "duplicates": duplicates}
            return
        for letter in letters:
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, letter)
        if duplicates:  # a retried export: the copies hold nothing new, and are counted as such
            yield beam.pvalue.TaggedOutput(LINES, SourceLines(origin, 0, duplicates, duplicates))
        if item is not None:
            yield key, item


class _Conversation:
    """The conversation id spans name, seen one span at a time (as conversation_of: the
    first key of CONVERSATION_KEYS any span names wins)."""

    def __init__(self):
        self._found: dict[str, str] = {}

    def see(self, span: dict[str, Any]) -> None:
        if CONVERSATION_KEYS[0] in self._found:
            return
        for key in CONVERSATION_KEYS:
            value = span["attributes"].get(key)
            if key not in self._found and isinstance(value, str) and value:
                self._found[key] = value

    @property
    def id(self) -> str | None:
        return next((self._found[k] for k in CONVERSATION_KEYS if k in self._found), None)


def case_of(element, max_spans: int, max_bytes: int = MAX_TRACE_BYTES, window: ReadWindow | None = None):
    """(case key, its traces' spans, and marks of its traces dead-lettered) -> a Record of the
    case, or a DeadLetter (a conversation that lost a turn is dead-lettered whole: scored, its
    multi-turn metrics would judge a conversation that did not happen). A conversation over
    max_spans spans or max_bytes bytes is counted, not held, as a trace is (CheckTraceFn).

    window (input.since): the items are CheckTraceFn's deferred ones ({trace, lost, reason, end,
    dead, duplicates}); a conversation that ended (its last span) outside the window is skipped
    whole, counted, its dead letters with it; one in it is what it is without a window."""
    key, items = element
    traces: list | None = []
    first_lost, lost, turns, count, size, sample = None, 0, 0, 0, 0, []
    letters, duplicates, last_end = [], 0, 0
    for item in items:
        if window is not None:
            letters += item["dead"]
            duplicates += item["duplicates"]
            last_end = max(last_end, item["end"])
            if item["trace"] is None:
                if "lost" in item:
                    lost += 1
                    first_lost = first_lost or item
                continue
            item = item["trace"]
        elif isinstance(item, dict):  # a mark: one of its traces was dead-lettered
            lost += 1
            first_lost = first_lost or item
            continue
        turns += 1
        count += len(item)
        if traces is not None:
            size += sum(span_size(s) for s in item)
            if count > max_spans or size > max_bytes:
                sample = ([s for t in traces for s in t] + list(item))[:5]
                traces = None
            else:
                traces.append(item)
    out: list = []
    if window is not None:
        where = window.where(last_end)
        if where != "in":  # an earlier run's case, or one not complete yet: not this run's to judge
            Metrics.counter("evalbeam", f"otel_cases_{where}_window").inc()
            skipped = count + duplicates + sum(letter.line_count for letter in letters)
            return [beam.pvalue.TaggedOutput(LINES, SourceLines("", 0, skipped, duplicates))]
        out += [beam.pvalue.TaggedOutput(DEAD_LETTER, letter) for letter in letters]
        if duplicates:
            out.append(beam.pvalue.TaggedOutput(LINES, SourceLines("", 0, duplicates, duplicates)))
    if not turns:
        return out  # every trace of it was dead-lettered, each with its reason
    source = f"otel case {key}"
    held = sample if traces is None else [s for t in traces for s in t]
    if lost:
        return out + [beam.pvalue.TaggedOutput(DEAD_LETTER, _dead(
            source, f"conversation {key} is incomplete: {lost} of its {lost + turns} turn traces were "
                    f"dead-lettered (trace {first_lost['lost']}: {first_lost['reason']})", held[:5], count,
            "conversation"))]
    if traces is None:
        limit = (f"more than {max_spans:,} (input.otel.max_trace_spans)" if count > max_spans
                 else f"more than {max_bytes:,} bytes (input.otel.max_trace_bytes)")
        return out + [beam.pvalue.TaggedOutput(DEAD_LETTER, _dead(
            source, f"conversation {key} has {count:,} spans, {limit}: too large to evaluate", held, count,
            "conversation"))]
    spans = held
    first = min(spans, key=lambda s: (s["start"], s["span_id"]))
    data = case_record(key, traces)
    raw = json.dumps({k: v for k, v in data.items() if k != "invocations"}, ensure_ascii=False, default=str)
    return out + [Record(source, data, raw, from_csv=False, origin=first["origin"], line=first["line"],
                         line_count=len(spans))]


class GroupSpans(beam.PTransform):
    """Records of OTLP requests (or, rows=True, of a span table's rows) -> (Records of cases,
    DeadLetters, SourceLines counting spans: for rows, which the BigQuery reader counts, only the
    duplicates among them).

    spill: None to group with the runner's GroupByKey (a distributed runner's shuffle); or a
    local folder, to group on disk there one shard of keys at a time (transforms.spill: the
    local runner holds a GroupByKey's elements in memory). window (input.since): only the cases
    that ended in it (transforms.since); the spans of the others are counted as skipped."""

    def __init__(self, group_by: str = "trace", max_spans: int = MAX_TRACE_SPANS, max_bytes: int = MAX_TRACE_BYTES,
                 rows: bool = False, spill: str | None = None, window: ReadWindow | None = None):
        super().__init__()
        self._group_by, self._max_spans, self._max_bytes, self._rows = group_by, max_spans, max_bytes, rows
        self._spill = spill
        self._window = window

    def _group(self, name: str):
        if self._spill is None:
            return beam.GroupByKey()
        return SpillGroupByKey(spill_folder(self._spill, name))

    def expand(self, requests):
        fn = RowSpanFn() if self._rows else RequestSpansFn()
        spans = requests | "Spans" >> beam.ParDo(fn).with_outputs(DEAD_LETTER, LINES, main="spans")
        traces = (spans.spans
                  | "GroupByTrace" >> self._group("traces")
                  | "CheckTraces" >> beam.ParDo(CheckTraceFn(self._max_spans, self._max_bytes, self._group_by,
                                                            self._window))
                  .with_outputs(DEAD_LETTER, LINES, main="traces"))
        if self._group_by == "conversation":
            grouped = traces.traces | "GroupByConversation" >> self._group("conversations")
        else:
            grouped = traces.traces | "OneTraceACase" >> beam.Map(lambda kv: (kv[0], [kv[1]]))
        cases = grouped | "Cases" >> beam.FlatMap(case_of, self._max_spans, self._max_bytes, self._window).with_outputs(
            DEAD_LETTER, LINES, main="cases")
        dead = (spans[DEAD_LETTER], traces[DEAD_LETTER], cases[DEAD_LETTER]) | "OtelDeadLetters" >> beam.Flatten()
        lines = (spans[LINES], traces[LINES], cases[LINES]) | "OtelLines" >> beam.Flatten()
        return cases.cases, dead, lines
