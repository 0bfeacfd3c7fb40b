"""The typed model of an evalbeam config: its shape, and nothing else.

Every bad field gets a message naming it (``metrics.2.params.rouge_type: ...``). Validating
reads no file, imports no user code and no optional package: the same YAML validates the same
everywhere. Loading (configs.load) reads the file and expands ADK's criteria
(configs.adk_expansion) first; what the environment must provide is checked by
pipelines.preflight.
"""
from __future__ import annotations

import codecs
import datetime as dt
import json
import re
import secrets
import types
import typing
from typing import Any, Literal

import pydantic

from evalbeam.configs.failure_modes import FailureModesConfig, check_metrics
from evalbeam.configs.scenarios import ScenariosConfig
from evalbeam.configs.red_team import RedTeamConfig, check_inference
from evalbeam.metrics.agents.simulator import SIMULATOR_DEFAULTS
from evalbeam.metrics.custom import function_path
from evalbeam.metrics.rows.fields import CANONICAL_FIELDS, PASSTHROUGH_FIELDS
from evalbeam.metrics.judge.jury import JuryRule, check_partial, juror_name, split_entry
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import JudgeTemplate
from evalbeam.metrics.names import (BQ_DATASET_RE, BQ_TABLE_URI_RE, COLUMN_RE, DATASET_RE, NAME_RE, PROJECT_RE,
                                    did_you_mean)
from evalbeam.metrics.registry import SIMULATOR_QUALITY, MetricDef
from evalbeam.metrics.rows.trace import get_key

if typing.TYPE_CHECKING:
    from evalbeam.metrics.statistics.compare import Gate


def reserved_columns() -> dict[str, str]:
    """The own columns of the tables with slice columns, which a slice column may not
    shadow (column -> the first table that has it): read from the one schema definition."""
    from evalbeam.metrics.rows.tables import SLICED_TABLES, TABLES  # start-up time: pyarrow only where slice columns are checked

    reserved: dict[str, str] = {}
    for t in SLICED_TABLES:
        for c in TABLES[t]:
            reserved.setdefault(c.name, t)
    return reserved


def _metric(name: str) -> MetricDef:
    """The metric `name` (metrics.catalog.get_metric: KeyError saying why when there is none)."""
    from evalbeam.metrics.catalog import get_metric  # start-up time: importing the config model loads no metric

    return get_metric(name)


class ConfigError(ValueError):
    """The config or its dataset cannot be used; the message names the field."""


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """null for a field that has a default but cannot be null (`--set input.labels=null`, a YAML
        key left empty) is that default; where null is a value of its own it stays."""
        if not isinstance(data, dict):
            return data
        fields = {alias: field for name, field in cls.model_fields.items() for alias in (name, field.alias) if alias}
        return {key: value for key, value in data.items()
                if not (value is None and key in fields and not fields[key].is_required()
                        and not _accepts_null(fields[key].annotation))}


def _accepts_null(annotation: Any) -> bool:
    return annotation is None or annotation is Any or type(None) in typing.get_args(annotation)


class OtelInput(_Model):
    """input.otel: how OpenTelemetry traces (input.format: otel_traces) become cases."""

    group_by: Literal["trace", "conversation"] = pydantic.Field(
        "trace", description="trace: a case per trace; conversation: a case per gen_ai.conversation.id (ADK: its "
                             "session id, also gcp.vertex.agent.session_id), a turn per trace")
    max_trace_spans: int = pydantic.Field(
        10_000, ge=1, description="a trace (or conversation) with more spans is dead-lettered, counted without being "
                                  "held in memory")
    max_trace_bytes: int = pydantic.Field(
        64 * 1024 * 1024, ge=1024, description="a trace whose spans' attributes and events hold more is dead-lettered")
    start: dt.datetime | None = pydantic.Field(
        None, description="a BigQuery table of spans (Cloud Trace's _AllSpans view): only spans whose start_time is "
                          "at or after this (UTC where no zone is given)")
    end: dt.datetime | None = pydantic.Field(None, description="... and before this (a nightly run: one day)")

    @pydantic.model_validator(mode="after")
    def _window(self) -> "OtelInput":
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ValueError("input.otel.end must be after input.otel.start")
        return self


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(value: Any) -> Any:
    """A duration as a config gives it: 90, "90s", "30m", "1h", "2d" (a number alone: seconds), or what
    pydantic reads as a timedelta (ISO 8601 "PT1H", "01:00:00")."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return dt.timedelta(seconds=float(match.group(1)) * _DURATION_UNITS[match.group(2)])
    return value


# input.lateness when input.since is given without it (the field stays null, so a config's JSON, as
# the runs table keeps it, validates again)
DEFAULT_LATENESS = dt.timedelta(hours=1)


class SampleInput(_Model):
    """input.sample: a seeded, stable sample of the cases: a case is in or out by its identity (its
    instance id) and the seed alone, so a recurring case is in every night or none, and runs pair."""

    rate: float | None = pydantic.Field(
        None, gt=0, le=1, description="the share of cases evaluated: a case is in when a hash of the seed and its id, "
                                      "read as a number in [0, 1), is below it")
    per_slice: int | None = pydantic.Field(
        None, ge=1, description="instead of a rate: this many cases of each slice (each combination of the "
                                "input.slice_columns' values; the whole input without any): those whose hashes are "
                                "smallest")
    seed: int = pydantic.Field(0, description="the sample's seed: another seed, another sample")

    @pydantic.model_validator(mode="after")
    def _one_rule(self) -> "SampleInput":
        if self.rate is not None and self.per_slice is not None:
            raise ValueError("give rate or per_slice, not both")
        return self


class InputConfig(_Model):
    uri: str | None = pydantic.Field(
        None, min_length=1,
        description="files: a local path or glob (relative: to the config file's folder), or gs://bucket/path/*.jsonl; "
                    "a BigQuery table: bq://project.dataset.table",
    )
    query: str | None = pydantic.Field(None, min_length=1, description="a BigQuery standard SQL query, instead of uri")
    query_dataset: str = pydantic.Field(
        "evalbeam_temp", pattern=f"^{DATASET_RE}$",
        description="dataset (in the billing project) for query results, which expire after a day; created when missing",
    )
    project: str | None = pydantic.Field(
        None, pattern=f"^(?:{PROJECT_RE})$",
        description="the project BigQuery reads and queries run in; default: the table's project, else output.bigquery's",
    )
    format: Literal["jsonl", "csv", "adk_eval_result", "adk_eval_set", "adk_agent_events", "otel_traces"] | None = \
        pydantic.Field(
            None, description="jsonl | csv | adk_eval_result | adk_eval_set, for files; inferred from the file name "
                              "when omitted (*.evalset_result.json, *.evalset.json and *.test.json are ADK files); "
                              "adk_agent_events for BigQuery rows of ADK's BigQueryAgentAnalyticsPlugin table; "
                              "otel_traces for OpenTelemetry GenAI spans: OTLP JSON files, or a BigQuery table of "
                              "Cloud Trace's span schema (see input.otel)")
    otel: OtelInput = pydantic.Field(default_factory=OtelInput, description="otel_traces: how spans become cases")
    encoding: str = pydantic.Field(
        "utf-8", min_length=1,
        description="jsonl and csv files: their text encoding, any codec Python knows (latin-1, cp1252, utf-16, "
                    "shift_jis, ...); default utf-8 (a byte order mark is skipped). A line that does not decode "
                    "is dead-lettered with its line number")
    granularity: Literal["session", "turn"] = pydantic.Field(
        "session", description="adk_agent_events: one instance per session (id: session_id) or per turn "
                               "(<session_id>:<invocation_id>)")
    adk_criteria: str | None = pydantic.Field(
        None, min_length=1,
        description="an ADK test_config.json (local, relative to the config file's folder, or gs://): its criteria "
                    "become metrics with their thresholds",
    )
    column_mapping: dict[str, str] = pydantic.Field(
        default_factory=dict, description="canonical field -> dataset column"
    )
    id_column: str | None = pydantic.Field(
        None, description="the column of each case's id; default: a hash of the row's input fields (prompt, "
                          "reference, context, ...: never the response, trajectory or other outputs), so cases "
                          "whose outputs changed keep their ids")
    since: Literal["last_run"] | None = pydantic.Field(
        None, description="last_run: read only what arrived after this eval's last completed run (the end of its "
                          "window, kept in the runs table; a run that failed moves nothing): OpenTelemetry traces "
                          "(files by their modification time, span tables by start_time), ADK agent events, or a "
                          "BigQuery input of rows with input.timestamp_column")
    lateness: dt.timedelta | None = pydantic.Field(
        None,
        description="with since: how late a case's last span (or event, or row) may arrive, and how long a case may "
                    "reach back across the window's start; a run evaluates what ended between the last run's window "
                    "end and its own start less this. 90, 90s, 30m, 1h, 2d; 0 allowed. Default (null): 1h")
    timestamp_column: str | None = pydantic.Field(
        None, pattern=f"^{COLUMN_RE}$",
        description="with since, a BigQuery input of rows: the TIMESTAMP column telling when each row arrived")
    sample: SampleInput | None = pydantic.Field(
        None, description="evaluate a seeded, stable sample of the cases: {rate: 0.1, seed: 7}, {per_slice: 200, "
                          "seed: 7}, or {seed: 7} with judge.max_calls picking the rate")
    allow_empty: bool = pydantic.Field(
        False, description="an input with no record is expected (a quiet night's query): the run passes; "
                           "otherwise a run that reads nothing fails (status 1), naming the input")
    slice_columns: list[str] = pydantic.Field(
        default_factory=list, description="dataset columns to slice the summary by"
    )
    max_slice_values: int = pydantic.Field(
        1000, ge=1, description="the most slices one slice column makes: past its largest this many, "
                                            "the other values are summarized as one slice, <column>=(other)")
    labels: dict[str, list[str]] = pydantic.Field(
        default_factory=dict,
        description="metric output name -> the dataset column of its human labels (numbers on the metric's scale, "
                    "true/false for pass/fail), or a list of columns, one an annotator: the calibration table",
    )

    @pydantic.field_validator("lateness", mode="before")
    @classmethod
    def _a_duration(cls, value: Any) -> Any:
        return duration(value)

    @pydantic.field_validator("lateness")
    @classmethod
    def _not_negative(cls, value: dt.timedelta | None) -> dt.timedelta | None:
        if value is not None and value < dt.timedelta(0):
            raise ValueError("a lateness is not negative (0: none)")
        return value

    @pydantic.model_validator(mode="after")
    def _since(self) -> "InputConfig":
        if self.since is None:
            given = [f"input.{f}" for f in ("lateness", "timestamp_column") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{' and '.join(given)}: apply with input.since: last_run")
            return self
        fmt = self.inferred_format()
        if self.otel.start or self.otel.end:
            raise ValueError("input.since: last_run picks the window itself; input.otel.start and end fix one: give one "
                             "or the other")
        if self.kind == "files" and fmt != "otel_traces":
            raise ValueError("input.since: files have no arrival time of their rows: since reads OpenTelemetry traces "
                             "(input.format otel_traces: files by their modification time), ADK agent events, or a "
                             "BigQuery input with input.timestamp_column")
        own = fmt in ("otel_traces", "adk_agent_events")
        if own and self.timestamp_column:
            raise ValueError(f"input.timestamp_column: {fmt} is read by its own times (spans' start and end, events' "
                             "timestamp): leave it out")
        if not own and self.kind != "files" and not self.timestamp_column:
            raise ValueError("input.since: a BigQuery input of rows needs input.timestamp_column, the TIMESTAMP column "
                             "telling when each row arrived")
        return self

    @pydantic.field_validator("labels", mode="before")
    @classmethod
    def _label_lists(cls, labels: Any) -> Any:
        if isinstance(labels, dict):
            return {metric: [columns] if isinstance(columns, str) else columns for metric, columns in labels.items()}
        return labels

    @pydantic.field_validator("labels")
    @classmethod
    def _label_columns(cls, labels: dict[str, list[str]]) -> dict[str, list[str]]:
        for metric, columns in labels.items():
            if not columns:
                raise ValueError(f"{metric}: give a label column, or a list of them")
            if any(not c for c in columns):
                raise ValueError(f"{metric}: a label column name is empty")
            if len(set(columns)) != len(columns):
                raise ValueError(f"{metric}: label columns repeat")
        return labels

    @pydantic.field_validator("column_mapping")
    @classmethod
    def _canonical_keys(cls, mapping: dict[str, str]) -> dict[str, str]:
        for key in mapping:
            if key not in CANONICAL_FIELDS:
                raise ValueError(f"{key!r} is not a canonical field; known: {', '.join(CANONICAL_FIELDS)}")
        return mapping

    @pydantic.field_validator("encoding")
    @classmethod
    def _known_codec(cls, encoding: str) -> str:
        try:
            info = codecs.lookup(encoding)
        except LookupError:
            raise ValueError(f"unknown encoding {encoding!r}: give a codec Python knows, e.g. utf-8, latin-1, "
                             "cp1252, utf-16 (https://docs.python.org/3/library/codecs.html#standard-encodings)") from None
        if not getattr(info, "_is_text_encoding", True):  # base64, zlib, rot13...: bytes to bytes, not a text encoding
            raise ValueError(f"{encoding!r} is not a text encoding: give one such as utf-8, latin-1, cp1252, utf-16")
        return encoding

    @pydantic.field_validator("slice_columns")
    @classmethod
    def _slice_names(cls, columns: list[str]) -> list[str]:
        for col in columns:
            if not re.fullmatch(COLUMN_RE, col):
                raise ValueError(f"{col!r} is not a valid column name (letters, digits, underscore)")
            table = reserved_columns().get(col)
            if table is not None:
                raise ValueError(f"{col!r} clashes with an output column of the {table} table")
        if len(set(columns)) != len(columns):
            raise ValueError("slice columns repeat")
        return columns

    @pydantic.model_validator(mode="after")
    def _source_known(self) -> "InputConfig":
        if (self.uri is None) == (self.query is None):
            raise ValueError("set exactly one of input.uri and input.query")
        if self.format == "adk_agent_events" and self.kind == "files":
            raise ValueError("format adk_agent_events reads the plugin's BigQuery table: set input.uri to "
                             "bq://project.dataset.agent_events, or input.query")
        if self.format != "otel_traces" and (self.otel.start or self.otel.end):
            raise ValueError("input.otel.start and end select spans of format otel_traces")
        if self.format == "otel_traces" and self.kind == "files" and (self.otel.start or self.otel.end):
            raise ValueError("input.otel.start and end select rows of a BigQuery table of spans; files are read whole")
        if self.kind == "bigquery_query" and (self.otel.start or self.otel.end):
            raise ValueError("input.otel.start and end select rows of a table (input.uri bq://...); with input.query, "
                             "select the window in the query: WHERE DATE(start_time) = '{run_date}'")
        if self.format in ("adk_eval_result", "adk_eval_set") and self.kind != "files":
            raise ValueError(f"format {self.format} reads files; BigQuery rows of agent events are adk_agent_events")
        if codecs.lookup(self.encoding).name != "utf-8" and self.inferred_format() not in ("jsonl", "csv", None):
            raise ValueError(f"input.encoding applies to jsonl and csv files; {self.inferred_format()} files are JSON "
                             "documents, read as UTF-8")
        if codecs.lookup(self.encoding).name != "utf-8" and self.kind != "files":
            raise ValueError("input.encoding applies to jsonl and csv files; BigQuery rows have no encoding to set")
        if self.uri is not None and self.uri.startswith("bq://"):
            if not re.fullmatch(BQ_TABLE_URI_RE, self.uri):
                raise ValueError(
                    f"{self.uri!r} is not a valid BigQuery table: expected bq://project.dataset.table with a valid "
                    "project id (lower-case letters, digits, hyphens), dataset (letters, digits, underscores) and table name"
                )
        elif self.query is None and self.format is None and self.inferred_format() is None:
            raise ValueError(f"cannot infer the format of {self.uri!r} from its extension; set input.format")
        if self.labels and self.is_adk:
            raise ValueError(f"input.labels: label columns are read from the dataset's rows; {self.inferred_format()} "
                             "inputs (ADK files, ADK agent events) have no label column: label a JSONL, CSV or "
                             "BigQuery dataset")
        return self

    @pydantic.model_validator(mode="before")
    @classmethod
    def _adk_defaults(cls, data: Any) -> Any:
        """An ADK file's cases are sliced by eval set (the pass rate per eval set) unless told otherwise."""
        if isinstance(data, dict) and "slice_columns" not in data:
            fmt = data.get("format")
            if fmt is None and isinstance(data.get("uri"), str) and not data["uri"].startswith("bq://"):
                name = data["uri"].lower()
                fmt = "adk" if name.endswith((".evalset_result.json", ".evalset.json", ".test.json")) else None
            if fmt in ("adk", "adk_eval_result", "adk_eval_set"):
                data = {**data, "slice_columns": ["eval_set_id"]}
        return data

    @property
    def is_adk(self) -> bool:
        return (self.inferred_format() or "").startswith("adk_")

    @property
    def kind(self) -> Literal["files", "bigquery_table", "bigquery_query"]:
        if self.query is not None:
            return "bigquery_query"
        return "bigquery_table" if self.uri.startswith("bq://") else "files"  # type: ignore[union-attr]

    def bigquery_table(self) -> str:
        """project.dataset.table of a bq:// uri."""
        return self.uri.removeprefix("bq://")  # type: ignore[union-attr]

    def instance_id_column(self) -> str | None:
        """The column instance ids are read from: id_column; an ADK file's records carry their ADK id
        (<eval_set_id>:<eval_id>[:<session_id>]) and an OpenTelemetry case its trace or conversation
        id, both in `instance_id`; None: ids are hashes of each row's inputs (metrics.rows.instance)."""
        if self.id_column:
            return self.id_column
        return "instance_id" if self.is_adk or self.inferred_format() == "otel_traces" else None

    def inferred_format(self) -> str | None:
        if self.format in ("adk_agent_events", "otel_traces"):
            return self.format
        if self.kind != "files":
            return None
        if self.format:
            return self.format
        name = self.uri.lower()
        for suffix in (".gz", ".bz2", ".zst", ".deflate"):
            name = name.removesuffix(suffix)
        if name.endswith(".evalset_result.json"):
            return "adk_eval_result"
        if name.endswith((".evalset.json", ".test.json")):
            return "adk_eval_set"
        if name.endswith((".jsonl", ".ndjson", ".json")):
            return "jsonl"
        if name.endswith(".csv"):
            return "csv"
        return None


class MetricSpec(_Model):
    name: str = pydantic.Field(min_length=1)
    as_: str | None = pydantic.Field(None, alias="as", pattern=COLUMN_RE, description="output name of the metric")
    params: dict[str, Any] = pydantic.Field(default_factory=dict)
    function: str | None = pydantic.Field(None, description="custom metric: 'package.module:function'")
    inputs: list[str] | None = pydantic.Field(None, description="custom metric: canonical fields it needs")
    threshold: float | None = pydantic.Field(None, description="pass when score >= threshold")
    direction: Literal["higher", "lower", "closer_to_zero"] | None = pydantic.Field(
        None, description="which way is better, for run comparisons; default: the metric's own (custom: higher)")
    pointwise: "JudgeTemplate | None" = pydantic.Field(None, description="a user-defined pointwise judge metric")
    pairwise: "JudgeTemplate | None" = pydantic.Field(None, description="a user-defined pairwise judge metric")
    judge: dict[str, Any] | None = pydantic.Field(
        None, description="judge metrics: this metric's own judge, a partial judge: laid over the run's "
                          "(e.g. {model: gemini-2.5-pro})")
    judges: list[dict[str, Any]] | None = pydantic.Field(
        None, min_length=2,
        description="judge metrics: a jury, each juror a partial judge: laid over the run's, with an optional "
                    "name (default: from its model)")
    jury: JuryRule | None = pydantic.Field(
        None, description="with judges: {aggregate: mean|median|min|max|majority|unanimous, quorum: N}")

    @pydantic.model_validator(mode="after")
    def _own_judges(self) -> "MetricSpec":
        if self.judge is not None and self.judges is not None:
            raise ValueError("give judge (one judge for this metric) or judges (a jury), not both")
        if self.jury is not None and self.judges is None:
            raise ValueError("jury: applies to a jury: give judges: [...]")
        if self.judge is None and self.judges is None:
            return self
        try:
            kind = self.judge_kind()
        except KeyError:  # an unknown metric: _check says so
            return self
        if kind not in ("pointwise", "pairwise"):
            raise ValueError(f"{'judge' if self.judge is not None else 'judges'}: a metric's own judge or jury "
                             "applies to template judge metrics (pointwise or pairwise); "
                             f"{self.name} is not one")
        if self.judge is not None and "name" in self.judge:
            raise ValueError("judge.name: a name is for a juror of judges: [...]")
        if self.jury is not None and self.jury.quorum is not None and self.jury.quorum > len(self.judges):
            raise ValueError(f"jury.quorum: {self.jury.quorum} is more than the {len(self.judges)} jurors")
        for where, partial in self.judge_partials():
            try:
                check_partial(partial)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        return self

    def judge_partials(self) -> list[tuple[str, dict[str, Any]]]:
        """(where in the config, the partial judge settings) of this metric's own judge or each juror."""
        if self.judges is not None:
            return [(f"judges.{i}", split_entry(entry)[1]) for i, entry in enumerate(self.judges)]
        return [("judge", dict(self.judge))] if self.judge is not None else []

    def jurors(self, judge: JudgeSettings) -> list[tuple[str, JudgeSettings]]:
        """(name, settings) of each juror, the partials laid over `judge` (JudgeSettings.overridden);
        a metric without judges: its own judge or `judge` itself, named by its model."""
        if self.judges is None:
            settings = judge.overridden(self.judge or {})
            return [(juror_name({}, settings), settings)]
        out = []
        for entry in self.judges:
            name, partial = split_entry(entry)
            settings = judge.overridden(partial)
            out.append((juror_name({"name": name}, settings), settings))
        return out

    @pydantic.model_validator(mode="after")
    def _check(self) -> "MetricSpec":
        defined = [k for k in ("function", "pointwise", "pairwise") if getattr(self, k) is not None]
        if len(defined) > 1:
            raise ValueError(f"give only one of {', '.join(defined)}")
        if self.pointwise is not None or self.pairwise is not None:
            if self.params or self.inputs is not None:
                raise ValueError("a user-defined judge metric takes no 'params' or 'inputs': its template's input_variables say what it reads")
            given = self.user_template.model_fields_set & {"source", "pointwise_text", "pairwise_text", "choice_field",
                                                              "single_sample"}
            if given:
                raise ValueError(f"{', '.join(sorted(given))}: set by built-in metrics (a published template such as "
                                 "Vertex AI's, or ADK's sampling), not by a user-defined one")
            if self.pointwise is not None:
                self.pointwise.scores()  # rubric keys must be numbers
            elif set(self.pairwise.rating_rubric) != {"A", "B", "SAME"}:
                raise ValueError("a pairwise rating_rubric has exactly the keys A, B and SAME")
            return self
        if self.function is None:
            if self.inputs is not None:
                raise ValueError("'inputs' applies to custom metrics (with 'function') only")
            try:
                definition = _metric(self.name)
            except KeyError as e:
                raise ValueError(str(e.args[0])) from None
            try:
                definition.params.model_validate(self.params)
            except pydantic.ValidationError as e:
                known = list(definition.params.model_fields)
                raise ValueError("params: " + "; ".join(
                    f"{_loc(err['loc'])}: {err['msg']}"
                    + (did_you_mean(str(err["loc"][-1]), known) if err["type"] == "extra_forbidden" and err["loc"] else "")
                    for err in e.errors())) from None

            from evalbeam.metrics.adk import INFORMATIONAL_CRITERIA  # start-up time: ADK's metrics where validated

            if self.name in INFORMATIONAL_CRITERIA and self.threshold is not None:
                raise ValueError(f"{self.name} is informational (as in ADK): it reports a value and never passes "
                                 "or fails, so it takes no threshold")
        else:
            if self.params:
                raise ValueError("custom metrics take no 'params'; read what you need from the instance")
            for field in self.inputs or []:
                if field not in CANONICAL_FIELDS:
                    raise ValueError(f"inputs: {field!r} is not a canonical field")
            try:  # its form; that it imports is checked where it runs (pipelines.preflight)
                function_path(self.function)
            except ValueError as e:
                raise ValueError(f"function: {e}") from None
        return self

    @property
    def output_name(self) -> str:
        return self.as_ or self.name

    @property
    def is_custom(self) -> bool:
        return self.function is not None

    @property
    def user_template(self) -> "JudgeTemplate | None":
        return self.pointwise or self.pairwise

    def definition(self) -> MetricDef | None:
        return None if self.is_custom or self.user_template else _metric(self.name)

    def judge_kind(self) -> str | None:
        """pointwise | pairwise for a model-based metric, else None."""
        if self.pointwise is not None:
            return "pointwise"
        if self.pairwise is not None:
            return "pairwise"
        definition = self.definition()
        return definition.kind if definition is not None and definition.is_judge else None

    def judge_template(self) -> "JudgeTemplate":
        if self.user_template is not None:
            return self.user_template
        definition = self.definition()
        return definition.factory(definition.params.model_validate(self.params))

    def input_alternatives(self) -> tuple[tuple[str, ...], ...]:
        if self.is_custom:
            return (tuple(self.inputs),) if self.inputs else ()
        if self.user_template is not None:
            extra = ("baseline_model_response",) if self.pairwise is not None else ()
            return (("response", *extra, *self.user_template.input_variables),)
        definition = self.definition()
        return definition.inputs_with(definition.params.model_validate(self.params))  # type: ignore[union-attr]

    def effective_direction(self) -> str:
        if self.direction is not None:
            return self.direction
        definition = self.definition()
        return definition.direction if definition else "higher"

    def effective_threshold(self) -> float | None:
        if self.threshold is not None:
            return self.threshold
        definition = self.definition()
        return definition.default_threshold if definition else None


class OutputConfig(_Model):
    parquet: str | None = pydantic.Field(
        None, min_length=1,
        description="a local folder (relative: to the config file's folder) or gs:// prefix under which each run "
                    "writes <run_id>/<table>/",
    )
    bigquery: str | None = pydantic.Field(
        None, pattern=BQ_DATASET_RE, description="project.dataset to write the tables and views to"
    )
    bigquery_location: str | None = pydantic.Field(
        None, pattern=r"^[A-Za-z0-9-]+$", description="location of the dataset when evalbeam creates it (default US)"
    )
    adk_eval_history: str | None = pydantic.Field(
        None, min_length=1,
        description="ADK inputs: a folder (local, relative to the config file's folder, or gs://) to write one "
                    "EvalSetResult JSON per eval set to, in ADK's "
                    "format and file naming (for adk web and other ADK tooling)")
    otel_events: str | None = pydantic.Field(
        None, min_length=1,
        description="input.format otel_traces: a folder (local, relative to the config file's folder, or gs://) "
                    "to write each score to as an OTLP JSON gen_ai.evaluation.result event linked to its trace, "
                    "<run_id>-*.jsonl")
    eval_set: str | None = pydantic.Field(
        None, min_length=1,
        description="scenarios: the ADK eval set file (local, relative to the config file's folder, or gs://) the "
                    "generated scenarios are written to; `adk eval` and evalbeam both load it")

    @pydantic.model_validator(mode="after")
    def _somewhere(self) -> "OutputConfig":
        if self.parquet is None and self.bigquery is None:
            raise ValueError("set output.parquet, output.bigquery or both")
        return self

    def bigquery_dataset(self) -> tuple[str, str]:
        project, _, dataset = self.bigquery.rpartition(".")  # type: ignore[union-attr]
        return project, dataset



# GenerateContentConfig fields of user_simulator.model_configuration the judge layer applies (the answer's
# shape); thinking_config is accepted as ADK's default carries it: the layer reads the answer's text, thoughts
# left out, as ADK's simulator does, so the thinking budget changes no rule.
SIMULATOR_GENERATION_KEYS = ("temperature", "max_output_tokens", "maxOutputTokens", "thinking_config",
                             "thinkingConfig")


class UserSimulatorConfig(_Model):
    """inference.user_simulator: google-adk 2.13.0's LlmBackedUserSimulatorConfig (same fields, defaults and
    checks; camelCase accepted as ADK accepts it). Its model calls go through the judge layer."""

    type: Literal["llm_backed"] = pydantic.Field("llm_backed", description="ADK's discriminator; only llm_backed")
    model: str = pydantic.Field(SIMULATOR_DEFAULTS["model"], min_length=1,
                                description="the model writing the user's messages (a model of judge.provider; "
                                            "default with another provider than gemini: judge.model)")
    model_configuration: dict[str, Any] = pydantic.Field(
        default_factory=dict, alias="modelConfiguration",
        description="GenerateContentConfig: temperature and max_output_tokens are applied (else the judge's); "
                    "thinking_config is accepted")
    max_allowed_invocations: int = pydantic.Field(
        SIMULATOR_DEFAULTS["max_allowed_invocations"], ge=-1, alias="maxAllowedInvocations",
        description="the most user messages of a conversation, the starting prompt included; -1: no limit")
    # checked by ADK's own LlmBackedUserSimulatorConfig, with google-adk: where it runs (pipelines.preflight)
    custom_instructions: str | None = pydantic.Field(
        None, alias="customInstructions",
        description="a Jinja template with {{ stop_signal }}, {{ conversation_plan }}, {{ conversation_history }} "
                    "(and {{ persona }} for scenarios with a persona)")
    include_function_calls: bool = pydantic.Field(
        False, alias="includeFunctionCalls",
        description="show the agent's tool calls and responses in the conversation the simulator reads")

    @pydantic.field_validator("model_configuration")
    @classmethod
    def _applied(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(SIMULATOR_GENERATION_KEYS))
        if unknown:
            raise ValueError(f"model_configuration: {unknown} not supported (supported: temperature, "
                             "max_output_tokens, thinking_config)")
        return value

    def judge_settings(self, judge: JudgeSettings) -> JudgeSettings:
        """The judge's settings (provider, backend, credentials, quota, retries, cache) calling this model.
        With a judge of another provider than gemini, the simulator calls that provider: the judge's
        model, unless `model` names one of that provider."""
        given = "model" in self.model_fields_set or judge.provider == "gemini"
        update: dict[str, Any] = {"model": self.model if given else judge.model}
        c = self.model_configuration
        if c.get("temperature") is not None:
            update["temperature"] = float(c["temperature"])
        tokens = get_key(c, "max_output_tokens")
        if tokens is not None:
            update["max_output_tokens"] = int(tokens)
        return judge.model_copy(update=update)



ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class GoogleIdTokenAuth(_Model):
    """inference.auth.google_id_token: a Google ID token from Application Default Credentials."""

    audience: str | None = pydantic.Field(
        None, min_length=1, description="the token's audience; default the agent's origin (scheme://host[:port] of "
                                        "inference.a2a, without its path), the service URL Cloud Run expects")


class A2AAuthConfig(_Model):
    """inference.auth: the credential sent with every A2A request (the agent card's included). Only the
    names of environment variables are written here: the config, and so the runs table and the config
    digest, never holds a secret."""

    google_id_token: GoogleIdTokenAuth | None = pydantic.Field(
        None, description="a Google ID token minted from Application Default Credentials (a service account key, "
                          "an impersonated service account, or the metadata server), refreshed before it expires")
    bearer_env: str | None = pydantic.Field(
        None, pattern=ENV_NAME, description="the environment variable holding a static bearer token")
    headers: dict[str, str] | None = pydantic.Field(
        None, description="header name -> the environment variable holding its value")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if data == "google_id_token":  # `auth: google_id_token`: the audience is the agent's URL
            return {"google_id_token": {}}
        if isinstance(data, dict) and "google_id_token" in data and data["google_id_token"] is None:
            return {**data, "google_id_token": {}}  # `auth: {google_id_token: }` (an empty YAML key)
        return data

    @pydantic.field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            if not value:
                raise ValueError("headers: name at least one header")
            # neither a key nor a value that fails its check is quoted: it may be a secret pasted in
            for number, (name, env) in enumerate(value.items(), 1):
                if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
                    raise ValueError(f"headers: header {number} of {len(value)} has a name that is not an HTTP header "
                                     "name (not shown)")
                if not re.fullmatch(ENV_NAME, env):
                    raise ValueError(f"headers.{name}: its value (not shown) is not an environment variable name: "
                                     "name the variable holding the header's value, which is never written in the "
                                     "config")
        return value

    @pydantic.model_validator(mode="after")
    def _one(self) -> "A2AAuthConfig":
        given = [k for k in ("google_id_token", "bearer_env", "headers") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of google_id_token, bearer_env, headers" + (f" (got {given})" if given else ""))
        return self

    def plain(self) -> dict[str, Any]:
        """As plain data (what metrics.agents.auth.A2AAuth takes): only the given key."""
        return self.model_dump(exclude_none=True)


INFERENCE_KINDS = ("function", "model", "agent", "a2a", "agent_engine")


class InferenceConfig(_Model):
    """Inference before scoring: produce each case's actual side, then score it."""

    function: str | None = pydantic.Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'package.module:function': a callable, instance fields -> {response, predicted_trajectory, ...}, "
                    "text, or a list of turns")
    model: str | None = pydantic.Field(
        None, min_length=1, description="a model of judge.provider, asked prompt_template through the judge layer's client")
    prompt_template: str = pydantic.Field(
        "{prompt}", min_length=1, description="model: the prompt, with {field} replaced by the instance's field")
    agent: str | None = pydantic.Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'package.module:agent': an ADK agent, run with ADK's Runner and in-memory sessions "
                    "(needs the `agent` extra, installed from requirements-agent.lock: see docs/agents.md)")
    num_runs: int = pydantic.Field(1, ge=1, le=100, description="runs per case; > 1: instance ids get :run<k>")
    max_concurrency: int = pydantic.Field(8, ge=1, le=1024, description="function/agent: cases in flight per worker")
    timeout_seconds: float = pydantic.Field(300, gt=0, description="function/agent: the longest a case may take")
    user_simulator: UserSimulatorConfig | None = pydantic.Field(
        None, description="function/agent/a2a/agent_engine: the user simulator of conversation_scenario cases (ADK's "
                          "LlmBackedUserSimulatorConfig); default ADK's defaults, or input.adk_criteria's "
                          "user_simulator_config")
    # deployed agents (metrics/agents/a2a.py, metrics/agents/agent_engine.py)
    a2a: str | None = pydantic.Field(
        None, pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="the URL of an agent served over A2A (its card at <url>/.well-known/agent-card.json): each case "
                    "one conversation, each user turn one message")
    agent_engine: str | None = pydantic.Field(
        None, pattern=r"^projects/[^/\s]+/locations/[^/\s]+/reasoningEngines/[^/\s]+$",
        description="projects/P/locations/L/reasoningEngines/ID: an ADK app on Vertex AI Agent Engine, one session "
                    "per case (Application Default Credentials)")
    base_url: str | None = pydantic.Field(
        None, description="agent_engine: an endpoint instead of https://<location>-aiplatform.googleapis.com")
    auth: A2AAuthConfig | None = pydantic.Field(
        None, description="a2a: the credential of every request to the agent's origin: google_id_token (audience: "
                          "the agent's origin), "
                          "{google_id_token: {audience: ...}}, {bearer_env: VAR} or {headers: {NAME: VAR}}; "
                          "default none (requests unauthenticated)")
    requests_per_minute: float | None = pydantic.Field(
        None, gt=0, description="a2a/agent_engine: the whole job's quota of agent requests (each turn, each session "
                                "created), split over the shards; default: none")
    shards: int = pydantic.Field(
        1, ge=1, le=1024,
        description="a2a/agent_engine: cases are split into this many shards, each on one worker with 1/shards of "
                    "requests_per_minute")
    max_attempts: int = pydantic.Field(
        6, ge=1, le=20, description="a2a/agent_engine: attempts per request (retries on 429, 5xx, and timeouts but not of a turn)")
    request_timeout_seconds: float = pydantic.Field(
        120, gt=0, description="a2a/agent_engine: the longest one request (one turn) may take; a turn past it fails the "
                         "case (not sent again: the agent may have run it)")

    @pydantic.field_validator("a2a")
    @classmethod
    def _no_credentials_in_url(cls, url: str | None) -> str | None:
        # user:password@ would reach only the agent card (messages go to the endpoint the card names) and
        # would be written with the config to the runs table
        if url and "@" in url.split("://", 1)[-1].split("/", 1)[0]:
            raise ValueError("credentials in the URL are not supported (they would be recorded with the config "
                             "in the runs table, and A2A messages are sent without them)")
        return url

    @pydantic.model_validator(mode="after")
    def _one_kind(self) -> "InferenceConfig":
        given = [k for k in INFERENCE_KINDS if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of function, model, agent, a2a, agent_engine"
                             + (f" (got {given})" if given else ""))
        if self.base_url and self.kind != "agent_engine":
            raise ValueError("inference.base_url is for inference.agent_engine")
        if self.auth is not None and self.kind != "a2a":
            raise ValueError("inference.auth is for inference.a2a (inference.agent_engine uses Application Default "
                             "Credentials)")
        return self

    @pydantic.model_validator(mode="after")
    def _simulator_runs_an_agent(self) -> "InferenceConfig":
        if self.user_simulator is not None and self.kind == "model":
            raise ValueError("user_simulator: a simulated user talks with an agent (inference.function, agent, a2a "
                             "or agent_engine), not with inference.model")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in INFERENCE_KINDS if getattr(self, k))

    @property
    def deployed(self) -> bool:
        """Whether the agent is reached over the network (a2a, agent_engine)."""
        return self.kind in ("a2a", "agent_engine")

    def quota_share(self) -> float | None:
        """One shard's requests per minute: the job's quota split over the shards, as the
        judge's is (JudgeSettings.with_quota_share)."""
        return self.requests_per_minute / self.shards if self.requests_per_minute else None

    @property
    def target(self) -> str:
        return getattr(self, self.kind)


DEFAULT_MAX_DEAD_LETTER_SHARE = 0.5


class EvalConfig(_Model):
    name: str = pydantic.Field(pattern=NAME_RE)
    run_id: str | None = pydantic.Field(None, pattern=NAME_RE)
    run_date: dt.date | None = pydantic.Field(
        None, description="the date the run is for (YYYY-MM-DD); default today (UTC). Tables are partitioned by it"
    )
    input: InputConfig
    metrics: list[MetricSpec] = pydantic.Field(
        default_factory=list,
        description="the metrics to compute; ADK files with none given (and no input.adk_criteria): the criteria "
                    "of the test_config.json beside each file, else ADK's defaults")
    judge: JudgeSettings = pydantic.Field(default_factory=JudgeSettings)
    inference: InferenceConfig | None = pydantic.Field(
        None, description="inference before scoring: run a function, a model or an ADK agent on each case")
    output: OutputConfig
    failure_modes: FailureModesConfig | None = pydantic.Field(
        None, description="classify the failures of these metrics into a taxonomy of failure modes "
                          "(configs/failure_modes.py)")
    scenarios: ScenariosConfig | None = pydantic.Field(
        None, description="conversation scenarios generated for an agent (configs/scenarios.py): `evalbeam "
                          "generate` writes them to output.eval_set; they are the input of `evalbeam run`")
    red_team: RedTeamConfig | None = pydantic.Field(
        None, description="run each case also under attack, beside its unattacked twin (configs/red_team.py)")
    compare_with: str | None = pydantic.Field(
        None, pattern=NAME_RE,
        description="'previous' (this eval's latest earlier run by run date) or a run_id: compared with in the "
                    "same pipeline, into the comparisons table")
    compare_tolerance: float | str = pydantic.Field(
        0.0, description="T of the comparison flags for every metric compare_tolerances does not name: a change "
                         "within +-T is never flagged. A number (absolute) or 'N%' (relative to the base run's mean)")
    compare_tolerances: dict[str, float | str] = pydantic.Field(
        default_factory=dict, description="metric -> its T, as compare_tolerance: {latency_in_seconds: 10%, rouge_1: 0.02}")
    compare_watch: list[str] | None = pydantic.Field(
        None, description="the metrics the comparison gate flags; default every metric of the config "
                          "(latency_in_seconds and failure, added to agent runs automatically, only when named)")
    compare_gate_slices: list[str] = pydantic.Field(
        default_factory=list, description="slice columns (of input.slice_columns) whose rows gate beside the "
                                          "overall ones, in the gate's Holm family; the other slice rows are "
                                          "reported, adjusted among themselves, and never flagged")
    # 0.5: past it, the dead letters outnumber the rows scored, and the means describe a
    # minority of the input; that is a wrong file, encoding or mapping, never a few bad
    # lines, so the run fails (status 1) instead of passing a gate. Below it a run
    # passes and lists its dead letters. A curated dataset may set 0 (no row may be lost).
    max_dead_letter_share: float = pydantic.Field(
        DEFAULT_MAX_DEAD_LETTER_SHARE, ge=0, le=1,
        description="the largest share of the records read that may be dead-lettered before the run fails "
                    "(status 1)")
    # BLEU's C extension is built at install where a C compiler is found; elsewhere BLEU runs the same rules
    # in Python, about 6x slower, which the runs table's bleu_path and `show` say. true: refused instead.
    require_native_bleu: bool = pydantic.Field(
        False, description="true: a run with a bleu metric stops in preflight where BLEU's C extension is not "
                           "built (it would run its Python path, about 6x slower), and a worker without it fails")
    # field path -> (the relative path as the config file gives it, the folder it was taken relative to)
    _relative_paths: dict[str, tuple[str, str]] = pydantic.PrivateAttr(default_factory=dict)
    # set by loading (configs.load, with note_origin): whether the metrics are the ADK files' own, each file
    # judged with its test_config.json (configs.adk_expansion); the config file, for errors found past validation
    _criteria_per_file: bool = pydantic.PrivateAttr(False)
    _config_file: str | None = pydantic.PrivateAttr(None)
    # the --set overrides laid over the file, as given (KEY.PATH=VALUE): a resumed run repeats them
    _overrides: tuple[str, ...] = pydantic.PrivateAttr(())

    def note_origin(self, *, criteria_per_file: bool | None = None, config_file: str | None = None,
                    relative_paths: dict[str, tuple[str, str]] | None = None,
                    overrides: list[str] | None = None) -> "EvalConfig":
        """Records what loading knows of the config and the schema does not (see the attributes above); returns it."""
        if criteria_per_file is not None:
            self._criteria_per_file = criteria_per_file
        if config_file is not None:
            self._config_file = config_file
        if overrides is not None:
            self._overrides = tuple(overrides)
        self._relative_paths.update(relative_paths or {})
        return self

    @property
    def config_file(self) -> str | None:
        """The file the config was loaded from (None: validated from a mapping)."""
        return self._config_file

    @property
    def overrides(self) -> tuple[str, ...]:
        """The `--set` overrides the config file was loaded with (KEY.PATH=VALUE, in their order)."""
        return self._overrides

    def path_note(self, field: str) -> str:
        """For an error about a path: where a relative path of the config file was resolved, when it was."""
        if field not in self._relative_paths:
            return ""
        written, folder = self._relative_paths[field]
        return f" ({written!r} in the config file: a relative path there is relative to the config file's folder, {folder!r})"

    def simulates_users(self) -> bool:
        """Whether inference may run a user simulator (conversation_scenario cases of an ADK eval set),
        whose model calls go through the judge layer."""
        return self.inference is not None and self.inference.user_simulator is not None

    @property
    def criteria_per_file(self) -> bool:
        """An ADK file input with neither input.adk_criteria nor metrics: each file's cases are
        judged with the criteria (and thresholds) of the test_config.json beside the file."""
        return self._criteria_per_file

    @pydantic.model_validator(mode="before")
    @classmethod
    def _generated_input(cls, data: Any) -> Any:
        """With scenarios:, the input is the set they make: the ADK eval set output.eval_set, sliced by the
        grid's axes. An input given beside them would be a second one: refused."""
        if not isinstance(data, dict) or not isinstance(data.get("scenarios"), dict):
            return data
        if data.get("input") is not None:
            raise ValueError("input: a config with scenarios: evaluates the scenarios it generates (its input is "
                             "output.eval_set); remove input, or remove scenarios to evaluate an eval set made "
                             "earlier (input.uri: its file)")
        output = data.get("output")
        eval_set = output.get("eval_set") if isinstance(output, dict) else None
        if not isinstance(eval_set, str) or not eval_set:
            raise ValueError("output.eval_set: scenarios: are written as an ADK eval set: give its file "
                             "(e.g. out/scenarios.evalset.json)")
        languages = data["scenarios"].get("languages")
        slices = ["goal", "persona", "difficulty"] + (["language"] if languages else [])
        return {**data, "input": {"uri": eval_set, "format": "adk_eval_set", "slice_columns": slices}}

    @pydantic.model_validator(mode="after")
    def _red_team_reaches(self) -> "EvalConfig":
        if self.red_team is not None:
            check_inference(self.red_team, self.inference)
        return self

    @pydantic.model_validator(mode="after")
    def _some_metric(self) -> "EvalConfig":
        if not self.metrics and self.scenarios is None:
            raise ValueError("metrics: give at least one metric")
        return self

    @pydantic.model_validator(mode="after")
    def _eval_set_of_scenarios(self) -> "EvalConfig":
        if self.output.eval_set and self.scenarios is None:
            raise ValueError("output.eval_set: the generated scenarios' file: it needs a scenarios: block")
        return self

    @pydantic.field_validator("metrics", mode="before")
    @classmethod
    def _names_to_specs(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": m} if isinstance(m, str) else m for m in value]
        return value

    @pydantic.field_validator("metrics")
    @classmethod
    def _unique_outputs(cls, specs: list[MetricSpec]) -> list[MetricSpec]:
        seen: set[str] = set()
        for spec in specs:
            if spec.output_name in seen:
                raise ValueError(f"two metrics are named {spec.output_name!r}; give one a different 'as'")
            seen.add(spec.output_name)
        return specs

    @pydantic.model_validator(mode="after")
    def _metric_judges(self) -> "EvalConfig":
        """Each metric's own judge and jurors, laid over judge:, validated as a judge: is; a jury's
        jurors have distinct names and judge differently (else their judgments would be one)."""
        for i, spec in enumerate(self.metrics):
            for where, partial in spec.judge_partials():
                try:
                    self.judge.overridden(partial)
                except pydantic.ValidationError as e:
                    raise ValueError("; ".join(f"metrics.{i}.{where}.{_loc(err['loc'])}: {err['msg']}"
                                               for err in e.errors())) from None
            if spec.judges is None:
                continue
            jurors = spec.jurors(self.judge)
            names = [name for name, _ in jurors]
            for name in names:
                if not re.fullmatch(COLUMN_RE, name):
                    raise ValueError(f"metrics.{i}.judges: juror name {name!r}: letters, digits and underscores only")
            if len(set(names)) != len(names):
                raise ValueError(f"metrics.{i}.judges: two jurors are named "
                                 f"{next(n for n in names if names.count(n) > 1)!r}; give each a distinct name")
            generations = [json.dumps(settings.generation(), sort_keys=True) for _, settings in jurors]
            if len(set(generations)) != len(generations):
                raise ValueError(f"metrics.{i}.judges: two jurors judge with the same model and generation settings "
                                 "(their judgments would be one); give each a different model, provider or temperature")
        return self

    @pydantic.model_validator(mode="after")
    def _sample_budget(self) -> "EvalConfig":
        sample, budget = self.input.sample, self.judge.max_calls
        if budget is not None and sample is None:
            raise ValueError("judge.max_calls picks input.sample's rate: add input.sample: {seed: N} (or drop the budget)")
        if sample is not None and sample.rate is None and sample.per_slice is None and budget is None:
            raise ValueError("input.sample: give rate, per_slice, or a judge budget (judge.max_calls) that picks the rate")
        if budget is not None and (sample.rate is not None or sample.per_slice is not None):
            raise ValueError("judge.max_calls picks input.sample's rate: give the budget or input.sample's "
                             f"{'rate' if sample.rate is not None else 'per_slice'}, not both")
        if budget is not None and not self.judge_specs():
            raise ValueError("judge.max_calls: this config has no judge metric: nothing to budget")
        return self

    @pydantic.model_validator(mode="after")
    def _otel_events_of_traces(self) -> "EvalConfig":
        if self.output.otel_events and self.input.format != "otel_traces":
            raise ValueError("output.otel_events: the scores are linked to the traces they evaluate: it needs "
                             f"input.format otel_traces (this input is {self.input.inferred_format() or 'a table'})")
        return self

    @pydantic.model_validator(mode="after")
    def _labelled_metrics_known(self) -> "EvalConfig":
        names = [m.output_name for m in self.metrics]
        for metric in self.input.labels:
            if metric not in names:
                raise ValueError(f"input.labels: {metric!r} is not a metric of this config{did_you_mean(metric, names)}; "
                                 f"its metrics: {', '.join(names)}")
        return self

    @pydantic.field_validator("compare_tolerance")
    @classmethod
    def _a_tolerance(cls, value: float | str) -> float | str:
        from evalbeam.metrics.statistics.compare import parse_tolerance  # start-up time: the comparison's module where asked

        parse_tolerance(value)
        return value

    @pydantic.field_validator("compare_tolerances")
    @classmethod
    def _tolerances(cls, value: dict[str, float | str]) -> dict[str, float | str]:
        from evalbeam.metrics.statistics.compare import parse_tolerance  # start-up time: the comparison's module where asked

        for metric, tolerance in value.items():
            try:
                parse_tolerance(tolerance)
            except ValueError as e:
                raise ValueError(f"{metric}: {e}") from None
        return value

    @pydantic.model_validator(mode="after")
    def _gate_metrics_known(self) -> "EvalConfig":
        names = [m.output_name for m in self.metrics]
        known = set(names) | set(PASSTHROUGH_FIELDS)
        named = [(f"compare_tolerances.{m}", m) for m in self.compare_tolerances]
        named += [(f"compare_watch.{i}", m) for i, m in enumerate(self.compare_watch or [])]
        for field, metric in named:
            if metric not in known:
                raise ValueError(f"{field}: {metric!r} is not a metric of this config{did_you_mean(metric, known)}; "
                                 f"its metrics: {', '.join([*names, *(f for f in PASSTHROUGH_FIELDS if f not in names)])}")
        for i, column in enumerate(self.compare_gate_slices):
            if column not in self.input.slice_columns:
                raise ValueError(f"compare_gate_slices.{i}: {column!r} is not one of input.slice_columns"
                                 f"{did_you_mean(column, self.input.slice_columns)}: "
                                 f"{', '.join(self.input.slice_columns) or 'none'}")
        return self

    def gate(self) -> "Gate":
        """The comparison gate of this config: tolerances and watched metrics (metrics.statistics.compare.Gate)."""
        from evalbeam.metrics.statistics.compare import Gate, parse_tolerance

        names = {m.output_name for m in self.metrics}
        return Gate(parse_tolerance(self.compare_tolerance),
                    tuple((m, parse_tolerance(t)) for m, t in self.compare_tolerances.items()),
                    frozenset(self.compare_watch) if self.compare_watch is not None else None,
                    frozenset(f for f in PASSTHROUGH_FIELDS if f not in names), frozenset(self.compare_gate_slices))

    @pydantic.model_validator(mode="after")
    def _failure_mode_metrics(self) -> "EvalConfig":
        if self.failure_modes is not None:
            can_fail = {m.output_name: m.effective_threshold() is not None or m.judge_kind() == "rubric"
                        or (m.definition() is not None and m.definition().kind == "adk") for m in self.metrics}
            if self.input.is_adk:
                can_fail["adk_case_status"] = True
            check_metrics(self.failure_modes, can_fail)
        return self

    @pydantic.model_validator(mode="after")
    def _vertex_batch_staging(self) -> "EvalConfig":
        judge = self.judge
        if judge.mode == "batch" and judge.backend == "vertex_ai" and not judge.batch_staging \
                and not (self.output.parquet or "").startswith("gs://"):
            raise ValueError(
                "judge.batch_staging: batch mode on vertex_ai reads and writes Cloud Storage: set judge.batch_staging "
                "to a gs:// folder (or write output.parquet to gs://)")
        return self

    def judge_specs(self) -> list[MetricSpec]:
        """Every model-based metric (template and rubric judges alike)."""
        return [m for m in self.metrics if m.judge_kind()]

    def rubric_specs(self) -> list[MetricSpec]:
        return [m for m in self.metrics if m.judge_kind() == "rubric"]

    def template_judge_specs(self) -> list[MetricSpec]:
        """The judge metrics answered from one prompt template (not rubric metrics)."""
        return [m for m in self.metrics if m.judge_kind() and m.judge_kind() not in ("rubric", SIMULATOR_QUALITY)]

    def simulator_quality_specs(self) -> list[MetricSpec]:
        """per_turn_user_simulator_quality_v1 (transforms.simulator_quality)."""
        return [m for m in self.metrics if m.judge_kind() == SIMULATOR_QUALITY]

    def model_inference(self) -> bool:
        """Whether inference calls a model (through the judge layer)."""
        return self.inference is not None and self.inference.kind == "model"

    def deployed_inference(self) -> bool:
        """Whether inference calls a deployed agent (a2a, agent_engine): its finished cases are checkpointed."""
        return self.inference is not None and self.inference.deployed

    def calls_a_model(self) -> bool:
        """Whether the run calls a model: a judge metric or model inference (credentials, checkpoints, judge.cache)."""
        return bool(self.judge_specs()) or self.model_inference() or self.simulates_users() or \
            self.failure_modes is not None or self.generates_scenarios() or \
            (self.red_team is not None and self.red_team.generates)

    def generates_scenarios(self) -> bool:
        """Whether the run generates conversation scenarios (scenarios:, not pinned to an earlier set)."""
        return self.scenarios is not None and not self.scenarios.pinned

    def generation_only(self) -> "EvalConfig":
        """The config `evalbeam generate` runs: its scenarios made and written, nothing evaluated."""
        return self.model_copy(update={"metrics": [], "inference": None, "failure_modes": None, "compare_with": None,
                                       "compare_tolerances": {}, "compare_watch": None, "compare_gate_slices": [],
                                       "red_team": None})

    def metric_directions(self) -> dict[str, str]:
        """output name -> which way is better, for every metric the run reports
        (the passed-through agent values included)."""
        directions = {f: _metric(f).direction for f in PASSTHROUGH_FIELDS}
        directions.update({m.output_name: m.effective_direction() for m in self.metrics})
        return directions

    def computation_specs(self) -> list[MetricSpec]:
        return [m for m in self.metrics if not m.judge_kind()]

    def resolved_run_id(self, now: dt.datetime | None = None) -> str:
        """run_id, else <name>-<run_date> when a run date is given (so that a
        scheduled night's re-run replaces that night), else <name>-<UTC timestamp>-<4 random
        hex digits>: runs started in the same second get different run_ids (the
        suffix), which still sort by their start (the timestamp comes first)."""
        if self.run_id:
            return self.run_id
        if self.run_date:
            return f"{self.name}-{self.run_date:%Y%m%d}"
        now = now or dt.datetime.now(dt.timezone.utc)
        return f"{self.name}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"

    def resolved_run_date(self, now: dt.datetime | None = None) -> dt.date:
        return self.run_date or (now or dt.datetime.now(dt.timezone.utc)).date()

    def for_run_date(self, run_date: dt.date) -> "EvalConfig":
        """The config with `{run_date}` in input.query replaced by the run date (YYYY-MM-DD), so a
        nightly config selects its day: `WHERE DATE(timestamp) = '{run_date}'`."""
        if self.input.query is None or "{run_date}" not in self.input.query:
            return self
        query = self.input.query.replace("{run_date}", run_date.isoformat())
        return self.model_copy(update={"input": self.input.model_copy(update={"query": query})})

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)



def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def format_errors(error: pydantic.ValidationError) -> str:
    """One line per error, naming its field; a key the model does not have (a misspelt one) with
    the nearest key it has there."""
    model = EvalConfig if error.title == EvalConfig.__name__ else None
    lines = []
    for err in error.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and model is not None and err["loc"]:
            msg += did_you_mean(str(err["loc"][-1]), keys_at(model, err["loc"][:-1]))
        lines.append(f"  {_loc(err['loc']) or '(top level)'}: {msg}")
    return "\n".join(lines)


def keys_at(model: type[pydantic.BaseModel], loc: tuple) -> list[str]:
    """The keys a config may have at `loc` (a validation error's location: field names, list
    indexes, mapping keys) under `model`: its fields' names and aliases (both are accepted);
    [] where `loc` is no model."""
    node: Any = model
    for part in loc:
        node = _model_or_container(node)
        if isinstance(node, type) and issubclass(node, pydantic.BaseModel):
            field = next((f for name, f in node.model_fields.items() if part in (name, f.alias)), None)
            node = field.annotation if field is not None else None
        elif typing.get_origin(node) in (list, tuple) and isinstance(part, int):
            node = typing.get_args(node)[0]
        elif typing.get_origin(node) is dict:
            node = typing.get_args(node)[1]
        else:
            return []
    node = _model_or_container(node)
    if not (isinstance(node, type) and issubclass(node, pydantic.BaseModel)):
        return []
    return [key for name, f in node.model_fields.items() for key in (name, f.alias) if key]


def _model_or_container(annotation: Any) -> Any:
    """Of an optional or union annotation, its model, list or mapping part (a config's unions hold one)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if (isinstance(arg, type) and issubclass(arg, pydantic.BaseModel)) or \
                    typing.get_origin(arg) in (list, tuple, dict):
                return arg
    return annotation

