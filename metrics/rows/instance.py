"""Canonical instance fields and the conversion of a dataset row into an instance.

Every dataset row becomes one instance. A column mapping renames dataset
columns to canonical fields; values are checked and normalised here, and a row
that cannot be used raises ``InvalidField`` naming the field and the reason.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Iterable, Iterator, Mapping

from evalbeam.metrics.statistics.calibration import parse_label
from evalbeam.metrics.rows.calls import CallFormatError, parse_trajectory
from evalbeam.metrics.rows.fields import (
    CANONICAL_FIELDS,
    FLAG_FIELDS,
    IDENTITY_FIELDS,
    IDENTITY_TURN_KEYS,
    INFERENCE_FIELDS,
    NUMBER_FIELDS,
    TEXT_FIELDS,
    TRAJECTORY_FIELDS,
    InvalidField,
    as_number,
    structured_value,
    value_kind,
)
from evalbeam.metrics.registry import unmet_inputs
from evalbeam.metrics.rows.trace import TraceError, complete_agent_fields, parse_turns

# set by a reader (metrics.rows.otel) on a record: {field: why it is missing}
MISSING_BECAUSE = "_missing_because"

@dataclasses.dataclass
class Instance:
    instance_id: str
    fields: dict[str, Any]
    slices: dict[str, str | None]
    source: str
    line_count: int = 1  # physical lines of the source it came from
    # metric label -> the inputs it lacks: such a metric gets an error row
    # ("missing input ..."), the instance's other metrics their scores
    missing_inputs: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # input.labels: metric -> its human labels, one an annotator (None: missing or refused),
    # and the reasons of the labels refused (metrics.statistics.calibration.parse_label)
    labels: Mapping[str, tuple[float | None, ...]] = dataclasses.field(default_factory=dict)
    label_errors: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # red_team: the attack this run carries (metrics.red_team.PlannedAttack.for_case); None on a twin
    attack: Mapping[str, Any] | None = None
    # field -> (its value, that value's JSON text as the instances table writes it): made
    # by the value check (checked_json_text) and reused for the row (tables.instance_row)
    # while the field still holds that very object. Values are never changed in place once
    # built (a changed instance gets new values: dataclasses.replace). Not pickled: a copy
    # in another process makes its texts again.
    json_texts: dict[str, tuple[Any, str]] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["json_texts"] = {}
        return state


# Deeper values are refused: they cannot be pickled between workers or written
# as JSON reliably, and no evaluation input needs them.
MAX_NESTING = 100


@dataclasses.dataclass(frozen=True)
class RowSpec:
    """How rows of one dataset become instances."""

    column_mapping: Mapping[str, str]
    id_column: str | None
    slice_columns: tuple[str, ...]
    # One entry per requested metric: (metric label, input alternatives).
    requirements: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]
    # input.labels: (metric, its label columns)
    label_columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Worked out once from the above, for build_instance (a row's work): each canonical field
    # with the column it is read from and whether it is a text field (TEXT_FIELDS: text kept as
    # given, an empty CSV cell too), in CANONICAL_FIELDS' order; and the distinct input
    # alternatives of the requirements (metrics mostly share theirs: the bench's 11 have 3),
    # with, per requirement, the index of its alternatives among them.
    field_columns: tuple[tuple[str, str, bool], ...] = dataclasses.field(init=False, repr=False, compare=False)
    distinct_alternatives: tuple[tuple[tuple[str, ...], ...], ...] = dataclasses.field(
        init=False, repr=False, compare=False)
    alternatives_index: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        distinct: dict[tuple, int] = {}
        index = tuple(distinct.setdefault(alternatives, len(distinct)) for _, alternatives in self.requirements)
        object.__setattr__(self, "field_columns", tuple(
            (field, self.column_mapping.get(field, field), field in TEXT_FIELDS)
            for field in CANONICAL_FIELDS))
        object.__setattr__(self, "distinct_alternatives", tuple(distinct))
        object.__setattr__(self, "alternatives_index", index)


# An instance of a case run num_runs > 1 times has `:run<k>` (k from 1) on its case's id
# (transforms.inference.run_copies); these read it back.


def first_run(instance_id: str, num_runs: int) -> bool:
    """Whether an instance is its case's first run: the one the run's counts count."""
    return num_runs == 1 or instance_id.endswith(":run1")


def case_id(instance_id: str) -> str:
    """The case an instance is a run of: its id without `:run<k>` (the id itself when it has none)."""
    case, sep, k = instance_id.rpartition(":run")
    return case if sep and k.isdigit() else instance_id


def run_number(instance_id: str) -> int:
    """Which run of its case an instance is, from 1 (1 when its id has no `:run<k>`)."""
    _, sep, k = instance_id.rpartition(":run")
    return int(k) if sep and k.isdigit() else 1


# json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str),
# its encoder made once (json.dumps builds one a call when its options are not the defaults)
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def content_id(record: Mapping[str, Any]) -> str:
    """A stable id from a row's content: independent of key order and file position."""
    canonical = _CANONICAL_JSON.encode(record)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:20]


# How a run's instances got their ids (the runs table's id_scheme): two runs pair their instances in
# `evalbeam compare` only when they share one. `column:<name>` is input.id_column's (ADK's and
# OpenTelemetry's inputs: `column:instance_id`, their own ids).
ID_SCHEME_INPUTS = "inputs"  # case_identity's hash: what was asked, not what was answered
ID_SCHEME_ROW = "row"  # a hash of the whole row: evalbeam's default before id_scheme was recorded


def id_scheme(spec: RowSpec) -> str:
    return f"column:{spec.id_column}" if spec.id_column else ID_SCHEME_INPUTS


def case_identity(record: Mapping[str, Any], column_mapping: Mapping[str, str]) -> dict[str, Any] | None:
    """What identifies a row's case: its IDENTITY_FIELDS by canonical name (a column renamed by the
    mapping keeps its cases), and of `invocations` each turn's asked side (IDENTITY_TURN_KEYS). Never
    what the system under test produced (OUTPUT_FIELDS), nor any column that is no canonical field.
    None when the row holds none of them (say, a response alone): then nothing but the whole row
    tells it apart."""
    identity: dict[str, Any] = {}
    for field in IDENTITY_FIELDS:
        value = record.get(column_mapping.get(field, field))
        if value is not None:
            identity[field] = value
    turns = structured_value(record.get(column_mapping.get("invocations", "invocations")))
    if isinstance(turns, list) and turns:
        identity["invocations"] = [{k: turn[k] for k in IDENTITY_TURN_KEYS if k in turn} if isinstance(turn, dict)
                                   else turn for turn in turns]
    return identity or None


def inputs_id(record: Mapping[str, Any], column_mapping: Mapping[str, str]) -> str:
    """A row's default id: the content hash of its case_identity, or of the whole row when it has none."""
    identity = case_identity(record, column_mapping)
    return content_id(record if identity is None else identity)


def _nodes(value: Any, limit: int) -> Iterator[tuple[Any, int]]:
    """Every value inside `value` (mapping keys too) with its depth, the
    containers at depth `limit` not entered. Iterative: a value nested past any
    recursion limit is walked all the same."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        yield item, depth
        if isinstance(item, (dict, list)) and depth < limit:
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str):
                    stack.append((key, depth + 1))
                stack.append((child, depth + 1))


def _too_deep(item: Any, depth: int) -> bool:
    return isinstance(item, (dict, list)) and depth >= MAX_NESTING


def deepest_column(record: Mapping[str, Any]) -> str | None:
    """The first column whose value is nested more than MAX_NESTING levels deep,
    else None (such values cannot even be pickled between workers)."""
    for column, value in record.items():
        if any(_too_deep(item, depth) for item, depth in _nodes(value, MAX_NESTING)):
            return column
    return None


def check_value(value: Any) -> None:
    """Raise ValueError if a value holds what no output can carry: nesting
    deeper than MAX_NESTING, a non-finite number, or text with a lone surrogate
    (truncated LLM output often ends in half an escape pair)."""
    checked_json_text(value)


# json.dumps with these options, made once: json.dumps builds an encoder each call
# whenever an option differs from its defaults (about 1 us of the check's 5).
_CHECKED_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False, sort_keys=True)


def _one_shot_encoder(encoder: json.JSONEncoder):
    """encoder.encode for a value that is not text, with the C encoder that encode makes
    anew on every call (json.encoder.JSONEncoder.iterencode, one-shot with no indent) made
    once: the same C code with the same arguments, so the same text and the same errors, at
    some 0.8 us less a trajectory. encoder.encode itself where Python has no C encoder."""
    make = json.encoder.c_make_encoder
    if make is None or encoder.indent is not None or encoder.check_circular:
        return encoder.encode
    c_encode = make(None, encoder.default, json.encoder.encode_basestring_ascii if encoder.ensure_ascii
                    else json.encoder.encode_basestring, encoder.indent, encoder.key_separator,
                    encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    return lambda value: "".join(c_encode(value, 0))


_checked_json = _one_shot_encoder(_CHECKED_JSON)


def checked_json_text(value: Any) -> str | None:
    """check_value; and for a value that is not text, when the check's fast path
    took it, its JSON text as the tables write it (`metrics.rows.tables.to_json_text`:
    keys sorted, not ASCII-escaped), else None."""
    if isinstance(value, str):
        if value.isascii():
            return None
    else:
        # The fast path for the common case, in C: JSON text with no NaN or
        # infinity that encodes as UTF-8 (no lone surrogate anywhere, keys too)
        # and has fewer brackets than MAX_NESTING (so cannot nest that deep) holds
        # nothing the walk below would refuse. Anything else (a value JSON cannot
        # write, keys that cannot be sorted, bytes, a datetime...) takes the walk,
        # which decides. The keys are sorted so that the text is the one the
        # instances table writes (a check and a row's text: one encoding, not two).
        try:
            text = _checked_json(value)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            if text.count("[") + text.count("{") < MAX_NESTING:
                if text.isascii():  # ASCII (a flag Python keeps) holds no surrogate: no need to encode
                    return text
                try:
                    text.encode("utf-8")
                    return text
                except UnicodeEncodeError:
                    pass
    check_by_walk(value)
    return None


def check_by_walk(value: Any) -> None:
    """check_value's rule itself: every value inside is visited."""
    for item, depth in _nodes(value, MAX_NESTING):
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"holds text that is not valid Unicode ({item[e.start]!r} at character {e.start}, "
                                 "a lone surrogate)") from None
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"holds a non-finite number ({item!r})")
        elif _too_deep(item, depth):
            raise ValueError(f"is nested more than {MAX_NESTING} levels deep")


def instance_id_of(record: Mapping[str, Any], spec: RowSpec) -> str:
    """The id build_instance gives a row that is an instance: its id column's value as text, or
    its inputs_id. Raises InvalidField when that column makes the row no instance. A row
    refused for any other reason would have had this id (the id check's first pass,
    transforms.validate, relies on it)."""
    if spec.id_column:
        raw_id = record.get(spec.id_column)
        if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
            raise InvalidField("instance_id", "id column is missing or empty", spec.id_column)
        if isinstance(raw_id, (dict, list)):
            raise InvalidField("instance_id", "id must be a string or number", spec.id_column)
        try:
            check_value(raw_id)
        except ValueError as e:
            raise InvalidField("instance_id", f"id {e}", spec.id_column) from None
        return str(raw_id)
    try:
        return inputs_id(record, spec.column_mapping)
    except (RecursionError, ValueError) as e:
        raise InvalidField("instance_id", f"cannot hash the row for its id ({type(e).__name__})") from None


def build_instance(record: Mapping[str, Any], spec: RowSpec, source: str, from_csv: bool = False,
                   line_count: int = 1) -> Instance:
    fields: dict[str, Any] = {}
    json_texts: dict[str, tuple[Any, str]] = {}
    for field, column, text_field in spec.field_columns:
        if column not in record:
            continue
        value = record[column]
        if text_field and type(value) is str and value.isascii():
            fields[field] = value  # what normalise_field and the value check make of ASCII text: itself
            continue
        value = normalise_field(field, column, value, from_csv)
        if value is not None:
            try:
                text = checked_json_text(value)
            except ValueError as e:
                raise InvalidField(field, str(e), column) from None
            fields[field] = value
            if text is not None:
                json_texts[field] = (value, text)

    try:
        complete_agent_fields(fields)
    except TraceError as e:
        raise InvalidField(e.field, str(e.reason), spec.column_mapping.get(e.field, e.field)) from None

    # A row lacking one metric's inputs loses that metric only (its error row);
    # it is dead-lettered when no metric can score it.
    # A reader may say why a field is missing (metrics.rows.otel: content not recorded): the error names it.
    because = record.get(MISSING_BECAUSE)
    because = because if isinstance(because, dict) else {}
    unmet, unmet_fields = {}, {}
    # the inputs each distinct set of alternatives lacks, once; the requirements looked at only if some lack any
    lacking = [unmet_inputs(alternatives, fields) for alternatives in spec.distinct_alternatives]
    if any(lacking):
        for (label, _), i in zip(spec.requirements, spec.alternatives_index):
            missing = lacking[i]
            if missing:
                unmet_fields[label] = missing
                unmet[label] = tuple(f"{m} ({because[m]})" if m in because else m for m in missing)
    if unmet:
        if len(unmet) == len(spec.requirements):
            label = list(unmet)[0]
            missing = unmet_fields[label]
            case = fields.get("adk_case")
            if missing[0] == "invocations" and isinstance(case, dict) and "conversation_scenario" in case:
                raise InvalidField("invocations", "a conversation_scenario case has no turns until the agent runs "
                                   "with the user simulator: set inference.function or inference.agent (see "
                                   "docs/agents.md, 'User simulation')")
            raise InvalidField(
                missing[0],
                f"missing or null; needed by metric '{label}'" + (f": {because[missing[0]]}" if missing[0] in because else ""),
                spec.column_mapping.get(missing[0], missing[0]),
            )

    instance_id = instance_id_of(record, spec)

    slices = {}
    for col in spec.slice_columns:
        try:
            check_value(record.get(col))
        except ValueError as e:
            raise InvalidField(col, f"slice column {e}", col) from None
        slices[col] = slice_value(record.get(col))
    labels, label_errors = read_labels(record, spec.label_columns, source)
    return Instance(instance_id=instance_id, fields=fields, slices=slices, source=source, line_count=line_count,
                    missing_inputs=unmet, labels=labels, label_errors=label_errors, json_texts=json_texts)


def read_labels(record: Mapping[str, Any], label_columns, source: str):
    """A row's human labels per metric, and the reasons of those refused. A bad label
    does not dead-letter the row (its scores stand): it counts as missing, and its
    reason is counted in the calibration table."""
    labels, errors = {}, {}
    for metric, columns in label_columns:
        values, refused = [], []
        for column in columns:
            try:
                values.append(parse_label(record.get(column)))
            except ValueError as e:
                values.append(None)
                refused.append(f"{source}: label column {column!r} of metric {metric!r}: {e}")
        labels[metric] = tuple(values)
        if refused:
            errors[metric] = tuple(refused)
    return labels, errors


def slice_value(value: Any) -> str | None:
    """A slice column's value as the summary names it (None: missing)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def normalise_field(field: str, column: str, value: Any, from_csv: bool) -> Any:
    if value is None:
        return None
    if from_csv and value == "" and field not in TEXT_FIELDS:
        return None  # an empty CSV cell is a missing value, except for text
    try:
        if field in TEXT_FIELDS or field in INFERENCE_FIELDS:
            if not isinstance(value, str):
                raise ValueError(f"must be a string, got {value_kind(value)}")
            return value
        if field in TRAJECTORY_FIELDS:
            return parse_trajectory(value)
        if field in NUMBER_FIELDS:
            return as_number(value)
        if field in FLAG_FIELDS:
            return _flag(value)
        if field == "invocations":
            return parse_turns(structured_value(value))
        return structured_value(value)
    except (ValueError, CallFormatError) as e:
        raise InvalidField(field, str(e), column) from None
    except RecursionError:
        raise InvalidField(field, "is nested too deeply to read", column) from None


_FLAG_TEXT = {"0": 0, "1": 1, "false": 0, "true": 1, "0.0": 0, "1.0": 1}


def _flag(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _FLAG_TEXT:
        return _FLAG_TEXT[value.strip().lower()]
    raise ValueError(f"must be 0 or 1 (or true/false), got {value!r}")


def present_columns(records: Iterable[Mapping[str, Any]]) -> set[str]:
    columns: set[str] = set()
    for r in records:
        columns.update(k for k, v in r.items() if v is not None)
    return columns
