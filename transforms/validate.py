"""Records -> instances with unique ids; a record that cannot be used goes to the dead letters.

Ids are unique within a run, so that no two rows' results can ever be merged
(the judge joins its answers back by instance id). Instances are grouped by id
(the shuffle that also spreads them over the workers) and, within an id, put
in source order (file, then line):
- with `input.id_column`, the first occurrence is kept and every later one is
  dead-lettered, naming the first;
- with the default content-hash id, identical rows are all kept, the k-th
  occurrence (k >= 2) getting the id `<hash>-k`, so ids stay deterministic.

On a local runner, grouping whole instances by id holds every row in memory
(the local runner keeps a shuffle's data in its own process). There the input
is read twice instead: a first pass takes each record's id alone, without
building the instance (`RepeatedIds`: its id column's value, or its content
hash), and groups only the ids, packed in batches per shard of ids, to find
the few seen more than once; only if there are such, the records with those
ids are read once more and built, and the decisions for their ids made from
those that are instances (`UniqueIdDecisions`), so a record that is none
never counts as an id's first; the last pass builds each instance and looks
its position up in the decisions, so the instances stream from the reader to
the writers without being held.
"""
from __future__ import annotations

import array
import collections
import dataclasses
import zlib

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

from evalbeam.metrics.rows.fields import InvalidField
from evalbeam.metrics.rows.instance import Instance, RowSpec, build_instance, instance_id_of
from evalbeam.transforms.records import DEAD_LETTER, MAX_RAW_CHARS, DeadLetter, Record


@dataclasses.dataclass
class Candidate:
    """An instance waiting for its id to be checked, with what a dead letter would need."""

    order: tuple[str, int]  # (origin, line), for its dead letter
    instance: Instance
    raw: str
    position: tuple[str, int]  # (origin, number among the origin's records): source order, one per record


class ToInstanceFn(beam.DoFn):
    def __init__(self, spec: RowSpec):
        self._spec = spec
        self._bad = Metrics.counter("evalbeam", "records_invalid")

    def process(self, record: Record, count: bool = True):
        try:
            instance = build_instance(record.data, self._spec, record.source, record.from_csv, record.line_count)
        except InvalidField as e:
            reason, field = str(e), e.field
        except Exception as e:  # noqa: BLE001 - no single record may stop the run
            reason, field = f"cannot be used: {type(e).__name__}: {e}", None
        else:
            yield instance.instance_id, Candidate((record.origin, record.line), instance, record.raw[:MAX_RAW_CHARS],
                                                  (record.origin, record.index or record.line))
            return
        if count:
            self._bad.inc()
        yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
            record.source, reason, record.raw, field, record.origin, record.line, record.line_count))


def id_decisions(keep_first: bool, instance_id: str, seen) -> list:
    """The fate of every occurrence of an id but the first: seen is [(position, source)]
    of all of them, in source order -> [(position, ("duplicate", first's source) or
    ("rename", new id))]."""
    first_source = seen[0][1]
    return [(position, ("duplicate", first_source) if keep_first else ("rename", f"{instance_id}-{k}"))
            for k, (position, _) in enumerate(seen[1:], start=2)]


class _Decide:
    """Applies an id decision to a candidate: yields the instance or its dead letter."""

    def __init__(self, id_column: str | None):
        self._id_column = id_column
        self._ok = Metrics.counter("evalbeam", "instances")
        self._duplicates = Metrics.counter("evalbeam", "records_duplicate_id")

    def __call__(self, instance_id: str, c: Candidate, decision):
        if decision is None:
            self._ok.inc()
            yield c.instance
        elif decision[0] == "rename":
            self._ok.inc()
            yield dataclasses.replace(c.instance, instance_id=decision[1])
        else:
            self._duplicates.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                c.instance.source,
                f"duplicate id {instance_id!r} in column {self._id_column!r}: first seen at {decision[1]}",
                c.raw, "instance_id", *c.order, c.instance.line_count))


class UniqueIdFn(beam.DoFn):
    """(id, every candidate with it) -> instances and duplicate dead letters."""

    def __init__(self, keep_first: bool, id_column: str | None):
        self._keep_first = keep_first
        self._id_column = id_column

    def setup(self):
        self._decide = _Decide(self._id_column)

    def process(self, element):
        instance_id, candidates = element
        ordered = sorted(candidates, key=lambda c: c.position)
        decisions = id_decisions(self._keep_first, instance_id, [(i, c.instance.source) for i, c in enumerate(ordered)])
        for c, decision in zip(ordered, [None] + [d for _, d in decisions]):
            yield from self._decide(instance_id, c, decision)


class DecideIdFn(beam.DoFn):
    """(id, candidate) and the decisions for repeated ids (a side input) -> instance or dead letter."""

    def __init__(self, id_column: str | None):
        self._id_column = id_column

    def setup(self):
        self._decide = _Decide(self._id_column)

    def process(self, element, decisions):
        instance_id, candidate = element
        yield from self._decide(instance_id, candidate, decisions.get(candidate.position))


ID_SHARDS = 64


def id_shard(data: bytes) -> int:
    """The shard of an id (its UTF-8 bytes) in both id passes' shuffles."""
    return zlib.crc32(data) % ID_SHARDS


class _IdBatch:
    """One shard's ids from one bundle, packed: each row costs its id's UTF-8
    bytes and 24 bytes of numbers (its length, origin number, position, line), instead of a
    tuple of Python objects (about 300 bytes a row, which the local runner's
    shuffle held for every row of the input)."""

    _NUMBERS = "q"  # position and line: 64-bit; lengths and origin numbers: 32-bit

    def __init__(self):
        self.origins: dict[str, int] = {}
        self.ids = bytearray()
        self.lengths = array.array("I")
        self.origin_of = array.array("I")
        self.positions = array.array(self._NUMBERS)
        self.lines = array.array(self._NUMBERS)

    def add(self, instance_id: str, position: tuple[str, int], line: int) -> None:
        data = instance_id.encode("utf-8", "surrogatepass")
        self.ids += data
        self.lengths.append(len(data))
        self.origin_of.append(self.origins.setdefault(position[0], len(self.origins)))
        self.positions.append(position[1])
        self.lines.append(line)

    def packed(self) -> tuple:
        return (tuple(self.origins), bytes(self.ids), self.lengths.tobytes(), self.origin_of.tobytes(),
                self.positions.tobytes(), self.lines.tobytes())

    @classmethod
    def rows(cls, packed: tuple):
        """A packed batch -> (instance id, position, line) per row, in the order added."""
        origins, ids, *numbers = packed
        lengths, origin_of, positions, lines = (array.array(code, data) for code, data in zip(
            ("I", "I", cls._NUMBERS, cls._NUMBERS), numbers))
        start = 0
        for length, origin, position, line in zip(lengths, origin_of, positions, lines):
            yield ids[start:start + length].decode("utf-8", "surrogatepass"), (origins[origin], position), line
            start += length


class _IdBatchesFn(beam.DoFn):
    """Records -> (shard, a packed _IdBatch) once per shard and bundle: the ids
    go to the shuffle in a few large, compact batches, not one element per
    record (the local runner holds each element of a shuffle as its own
    objects, several hundred bytes apiece). A record that is not an instance
    gives nothing. Only records whose id RepeatedIds found repeated are built."""

    def __init__(self, spec: RowSpec):
        self._spec = spec
        self._build = ToInstanceFn(spec)

    def start_bundle(self):
        self._batches: dict[int, _IdBatch] = {}

    def process(self, record: Record, repeated):
        if record_id(record, self._spec) not in repeated:
            return  # an instance, if it is one, whose id no other record has
        for out in self._build.process(record, count=False):
            if not isinstance(out, beam.pvalue.TaggedOutput):
                instance_id, candidate = out
                shard = id_shard(instance_id.encode("utf-8", "surrogatepass"))
                batch = self._batches.get(shard) or self._batches.setdefault(shard, _IdBatch())
                batch.add(instance_id, candidate.position, candidate.order[1])

    def finish_bundle(self):
        for shard, batch in self._batches.items():
            yield window.GlobalWindows.windowed_value((shard, batch.packed()))
        self._batches = {}


def _repeated_ids(shard_batches, keep_first: bool):
    """(shard, its packed batches) -> the decisions for the ids seen more than once in it."""
    _, batches = shard_batches
    seen: dict[str, list] = {}
    for batch in batches:
        for instance_id, position, line in _IdBatch.rows(batch):
            seen.setdefault(instance_id, []).append((position, line))
    for instance_id, where in seen.items():
        if len(where) > 1:
            yield from id_decisions(keep_first, instance_id,
                                    [(position, f"{position[0]}:{line}") for position, line in sorted(where)])


def record_id(record: Record, spec: RowSpec) -> str | None:
    """The id the record has if it is an instance (None: it is none)."""
    try:
        return instance_id_of(record.data, spec)
    except Exception:  # noqa: BLE001 - no instance: the pass that builds it dead-letters it, saying why
        return None


class _IdsFn(beam.DoFn):
    """Records -> (shard, packed ids) once per shard and bundle, as _IdBatchesFn
    does, but with only each record's id (`record_id`), no instance built: a
    record that turns out to be none may make its id look repeated, which
    costs that id's records a second look (UniqueIdDecisions), nothing else."""

    def __init__(self, spec: RowSpec):
        self._spec = spec

    def start_bundle(self):
        self._batches: dict[int, bytearray] = {}

    def process(self, record: Record):
        instance_id = record_id(record, self._spec)
        if instance_id is not None:
            data = instance_id.encode("utf-8", "surrogatepass")
            shard = id_shard(data)
            batch = self._batches.get(shard)
            if batch is None:
                batch = self._batches[shard] = bytearray()
            # the id's length, then its bytes: 4 bytes a row beside the id itself
            batch += len(data).to_bytes(4, "little") + data

    def finish_bundle(self):
        for shard, batch in self._batches.items():
            yield window.GlobalWindows.windowed_value((shard, bytes(batch)))
        self._batches = {}


def _ids_in(batch: bytes):
    start = 0
    while start < len(batch):
        length = int.from_bytes(batch[start:start + 4], "little")
        yield batch[start + 4:start + 4 + length].decode("utf-8", "surrogatepass")
        start += 4 + length


def _ids_seen_again(shard_batches):
    """(shard, its packed ids) -> (id, times seen) for the ids seen more than once."""
    seen = collections.Counter()
    for batch in shard_batches[1]:
        seen.update(_ids_in(batch))
    for instance_id, times in seen.items():
        if times > 1:
            yield instance_id, times


class RepeatedIds(beam.PTransform):
    """Records (a first read of the input) -> (id, times seen) for every id
    that more than one record would have: small, for a side input."""

    def __init__(self, spec: RowSpec):
        super().__init__()
        self._spec = spec

    def expand(self, records):
        return (
            records
            | "Ids" >> beam.ParDo(_IdsFn(self._spec))
            | "ByShard" >> beam.GroupByKey()
            | "SeenAgain" >> beam.FlatMap(_ids_seen_again)
        )


class UniqueIdDecisions(beam.PTransform):
    """Records (read again; only those with a repeated id are looked at) and the
    output of RepeatedIds -> (position, decision) for every occurrence of an
    id but its first, among the records that are instances: small, for a side input."""

    def __init__(self, spec: RowSpec, repeated):
        super().__init__()
        self._spec = spec
        self._repeated = repeated

    def expand(self, records):
        return (
            records
            | "IdBatches" >> beam.ParDo(_IdBatchesFn(self._spec), beam.pvalue.AsDict(self._repeated))
            | "ByShard" >> beam.GroupByKey()
            | "Repeated" >> beam.FlatMap(_repeated_ids, self._spec.id_column is not None)
        )


class ToInstances(beam.PTransform):
    """Records -> Instances with unique ids (main) and DeadLetters (tag 'dead_letter').

    decisions: None to group the instances by id (a shuffle, which also spreads
    them over the workers), or the output of UniqueIdDecisions over the same
    records read once more (the lean local path)."""

    def __init__(self, spec: RowSpec, decisions=None):
        super().__init__()
        self._spec = spec
        self._decisions = decisions

    def expand(self, records):
        built = records | "BuildInstances" >> beam.ParDo(ToInstanceFn(self._spec)).with_outputs(
            DEAD_LETTER, main="candidates")
        if self._decisions is None:
            unique = (
                built.candidates
                | "ById" >> beam.GroupByKey()
                | "UniqueIds" >> beam.ParDo(UniqueIdFn(self._spec.id_column is not None, self._spec.id_column))
                .with_outputs(DEAD_LETTER, main="instances")
            )
        else:
            unique = built.candidates | "UniqueIds" >> beam.ParDo(
                DecideIdFn(self._spec.id_column), beam.pvalue.AsDict(self._decisions)).with_outputs(
                DEAD_LETTER, main="instances")
        dead = (built[DEAD_LETTER], unique[DEAD_LETTER]) | "InvalidOrDuplicate" >> beam.Flatten()
        return unique.instances, dead
