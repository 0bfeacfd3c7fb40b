"""Records -> instances with unique ids; a record that cannot be used goes to the dead letters.

Ids are unique within a run, so that no two rows' results can ever be merged
(the judge joins its answers back by instance id). Instances are grouped by id
(the shuffle that also spreads them over the workers) and, within an id, put
in source order (file, then line):
- with `input.id_column`, the first occurrence is kept and every later one is
  dead-lettered, naming the first;
- with the default content-hash id, identical rows are all kept, the k-th
  occurrence (k >= 2) getting the id `<hash>-k`, so ids stay deterministic.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from metrics.instance import Instance, InvalidField, RowSpec, build_instance
from transforms.read import DEAD_LETTER, MAX_RAW_CHARS, DeadLetter, Record


@dataclasses.dataclass
class Candidate:
    """An instance waiting for its id to be checked, with what a dead letter would need."""

    order: tuple[str, int]  # (origin, line): source order
    instance: Instance
    raw: str


class ToInstanceFn(beam.DoFn):
    def __init__(self, spec: RowSpec):
        self._spec = spec
        self._bad = Metrics.counter("evalbeam", "records_invalid")

    def process(self, record: Record):
        try:
            instance = build_instance(record.data, self._spec, record.source, record.from_csv, record.line_count)
        except InvalidField as e:
            reason, field = str(e), e.field
        except Exception as e:  # noqa: BLE001 - no single record may stop the run
            reason, field = f"cannot be used: {type(e).__name__}: {e}", None
        else:
            yield instance.instance_id, Candidate((record.origin, record.line), instance, record.raw[:MAX_RAW_CHARS])
            return
        self._bad.inc()
        yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
            record.source, reason, record.raw, field, record.origin, record.line, record.line_count))


class UniqueIdFn(beam.DoFn):
    def __init__(self, keep_first: bool, id_column: str | None):
        self._keep_first = keep_first
        self._id_column = id_column
        self._ok = Metrics.counter("evalbeam", "instances")
        self._duplicates = Metrics.counter("evalbeam", "records_duplicate_id")

    def process(self, element):
        instance_id, candidates = element
        ordered = sorted(candidates, key=lambda c: c.order)
        first = ordered[0]
        self._ok.inc()
        yield first.instance
        for k, c in enumerate(ordered[1:], start=2):
            if self._keep_first:
                self._duplicates.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                    c.instance.source,
                    f"duplicate id {instance_id!r} in column {self._id_column!r}: first seen at {first.instance.source}",
                    c.raw, "instance_id", *c.order, c.instance.line_count))
            else:
                self._ok.inc()
                yield dataclasses.replace(c.instance, instance_id=f"{instance_id}-{k}")


class ToInstances(beam.PTransform):
    """Records -> Instances with unique ids (main) and DeadLetters (tag 'dead_letter')."""

    def __init__(self, spec: RowSpec):
        super().__init__()
        self._spec = spec

    def expand(self, records):
        built = records | "BuildInstances" >> beam.ParDo(ToInstanceFn(self._spec)).with_outputs(
            DEAD_LETTER, main="candidates")
        unique = (
            built.candidates
            | "ById" >> beam.GroupByKey()
            | "UniqueIds" >> beam.ParDo(UniqueIdFn(self._spec.id_column is not None, self._spec.id_column))
            .with_outputs(DEAD_LETTER, main="instances")
        )
        dead = (built[DEAD_LETTER], unique[DEAD_LETTER]) | "InvalidOrDuplicate" >> beam.Flatten()
        return unique.instances, dead
