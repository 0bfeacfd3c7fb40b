"""The read stage: the input's files or BigQuery rows read, each made an instance
or dead-lettered with its reason (transforms.read, transforms.validate)."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.configs import EvalConfig
from evalbeam.metrics.rows.instance import RowSpec
from evalbeam.pipelines.local import lean_local, local_runner, part_bytes
from evalbeam.pipelines.stages import Stage
from evalbeam.transforms import bigquery
from evalbeam.transforms.parsers import IdFirstLoads
from evalbeam.transforms.read import FileParts, ReadRecords
from evalbeam.transforms.read_otel import GroupSpans
from evalbeam.transforms.records import SourceLines
from evalbeam.transforms.sampling import Judgments, SampleRecords
from evalbeam.transforms.since import ReadWindow
from evalbeam.transforms.read_adk import AdkReading, GroupAgentEvents, adk_base
from evalbeam.transforms.validate import RepeatedIds, ToInstances, UniqueIdDecisions


class ReadStage(Stage):
    """PBegin -> records, unparseable, source_lines, instances, invalid, dead_letters; with input.sample,
    sample (its account, one element) and population ((summary slice, cases in it) before sampling)."""

    def expand(self, pbegin):
        context = self._context
        named = read(pbegin, context.config, context.read_plan, context.scratch, context.window)
        return {**named, "dead_letters": (named["unparseable"], named["invalid"]) | "AllDeadLetters" >> beam.Flatten()}


def row_spec(config: EvalConfig) -> RowSpec:
    return RowSpec(
        column_mapping=dict(config.input.column_mapping),
        id_column=config.input.instance_id_column(),
        slice_columns=tuple(config.input.slice_columns),
        # a metric whose inputs a row lacks gets an error on its own row (transforms.score,
        # transforms.judge, transforms.rubrics); a row no metric can score is dead-lettered
        requirements=tuple((m.output_name, inputs_left(config, m.input_alternatives())) for m in config.metrics),
        label_columns=tuple((metric, tuple(columns)) for metric, columns in config.input.labels.items()),
    )


# What inference fills in (metrics.agents.inference.apply_result): not needed from the input.
INFERRED_FIELDS = ("response", "predicted_trajectory", "invocations", "latency_in_seconds", "failure")


def inputs_left(config: EvalConfig, alternatives):
    """A metric's input alternatives less what inference produces, when the config infers."""
    if not config.inference:
        return alternatives
    return tuple(tuple(f for f in alt if f not in INFERRED_FIELDS) for alt in alternatives)


def adk_reading(config: EvalConfig) -> AdkReading | None:
    """How the input's ADK files are read (their base folder, their own criteria), for an ADK file input."""
    if config.input.kind != "files" or not config.input.is_adk:
        return None
    return AdkReading(adk_base(config.input.uri), config.criteria_per_file)


def read(pipeline, config: EvalConfig, read_plan: bigquery.ReadPlan | None, scratch: str | None = None,
         window: ReadWindow | None = None):
    """The input read, sampled (input.sample) and validated -> {records, unparseable, source_lines,
    instances, invalid; with input.sample, sample and population (transforms.sampling)}.
    `pipeline`: the pipeline, or the PBegin a composite is applied to; `scratch`: a local run's
    folder for what it groups on disk (None: grouped by the runner); `window`: input.since's
    (pipelines.since; a BigQuery read_plan was planned with it too)."""
    decisions = None
    owner = getattr(pipeline, "pipeline", pipeline)  # a PBegin's pipeline, or the pipeline
    spill = scratch if scratch and local_runner(owner) else None
    if read_plan is None:
        fmt = config.input.inferred_format()
        encoding = config.input.encoding
        modified_from = window.read_from.timestamp() if window is not None and window.read_from is not None else None
        parts = pipeline | "FileParts" >> FileParts(config.input.uri, fmt, part_bytes(owner, config), encoding,
                                                    modified_from)
        adk = adk_reading(config)
        records, unparseable, source_lines = pipeline | "Read" >> ReadRecords(fmt, parts=parts, encoding=encoding,
                                                                              adk=adk)
        if fmt == "otel_traces":
            # spans grouped into cases; the accounting is in spans (transforms.read_otel)
            otel = config.input.otel
            records, dead, span_lines = records | "OtelCases" >> GroupSpans(otel.group_by, otel.max_trace_spans,
                                                                           otel.max_trace_bytes, spill=spill,
                                                                           window=window)
            unread_lines = unparseable | "UnparseableLines" >> beam.Map(
                lambda d: SourceLines(d.origin, d.line_count, 0))
            unparseable = (unparseable, dead) | "OtelUnparseable" >> beam.Flatten()
            source_lines = (span_lines, unread_lines) | "OtelSourceLines" >> beam.Flatten()
        elif lean_local(owner, config):
            spec = row_spec(config)
            # its records serve only for their ids: with an id column, parsed by orjson where that gives json's id
            loads = IdFirstLoads(spec.id_column) if fmt == "jsonl" and spec.id_column else None
            first_read = pipeline | "ReadIds" >> ReadRecords(fmt, parts=parts, counted=False, encoding=encoding,
                                                             adk=adk, loads=loads)
            repeated = first_read[0] | "RepeatedIds" >> RepeatedIds(row_spec(config))
            # the parts read once more only when some id repeats (transforms.validate)
            again = parts | "PartsIfRepeated" >> beam.FlatMap(
                lambda part, times: [part] if times else [],
                beam.pvalue.AsSingleton(repeated | "CountRepeated" >> beam.combiners.Count.Globally()))
            reread = pipeline | "ReadRepeated" >> ReadRecords(fmt, parts=again, counted=False, encoding=encoding,
                                                              adk=adk)
            decisions = reread[0] | "IdDecisions" >> UniqueIdDecisions(row_spec(config), repeated)
    else:
        records, source_lines = pipeline | "ReadBigQuery" >> bigquery.ReadBigQueryRows(read_plan)
        unparseable = pipeline | "NoUnparseableRows" >> beam.Create([])
        if config.input.format == "adk_agent_events":
            records, unparseable, outside = records | "AgentSessions" >> GroupAgentEvents(
                config.input.granularity, read_plan.label, window)
            source_lines = (source_lines, outside) | "AgentSourceLines" >> beam.Flatten()
        elif config.input.format == "otel_traces":  # a span table: Cloud Trace's _AllSpans, a row a span
            otel = config.input.otel
            records, unparseable, duplicates = records | "OtelCases" >> GroupSpans(
                otel.group_by, otel.max_trace_spans, otel.max_trace_bytes, rows=True, spill=spill, window=window)
            source_lines = (source_lines, duplicates) | "OtelSourceLines" >> beam.Flatten()
    named = {}
    sample = config.input.sample
    if sample is not None:
        budget = config.judge.max_calls
        judgments = Judgments(config.template_judge_specs(), config.rubric_specs(), config.judge) if budget else None
        records, left_out, named["sample"], named["population"] = records | "Sample" >> SampleRecords(
            sample, row_spec(config), judgments, budget, spill)
        source_lines = (source_lines, left_out) | "SampleSourceLines" >> beam.Flatten()
    if spill and config.input.inferred_format() == "otel_traces" and not config.input.id_column:
        # a case per key of the grouping: ids unique as made, nothing to group by id (which the
        # local runner would hold in memory)
        decisions = pipeline | "NoRepeatedIds" >> beam.Create([])
    instances, invalid = records | "Validate" >> ToInstances(row_spec(config), decisions)
    return {"records": records, "unparseable": unparseable, "source_lines": source_lines, "instances": instances,
            "invalid": invalid, **named}


def read_marks(records, unparseable):
    """One small mark per record read, parseable or not: what the counts need. (A
    Flatten of the records themselves would be held whole by the local runner.)"""
    return ((records | "ReadMarks" >> beam.Map(lambda _: 1), unparseable | "UnparseableMarks" >> beam.Map(lambda _: 1))
            | "AllRead" >> beam.Flatten())


def read_instances(pipeline: beam.Pipeline, config: EvalConfig, read_plan: bigquery.ReadPlan | None = None,
                   scratch: str | None = None, window: ReadWindow | None = None):
    """The input read and validated as a run reads it -> (instances, records read, dead letters, the
    sample's account (input.sample; else None))."""
    named = read(pipeline, config, read_plan, scratch, window)
    marks = read_marks(named["records"], named["unparseable"])
    dead = (named["unparseable"], named["invalid"]) | "AllDeadLetters" >> beam.Flatten()
    return named["instances"], marks, dead, named.get("sample")
