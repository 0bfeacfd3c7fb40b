"""Each transform in a real Beam pipeline."""
import json
import os
import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from evalbeam.configs import MetricSpec
from evalbeam.metrics.rows.instance import Instance, RowSpec
from evalbeam.transforms.read import ReadRecords
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import ScoreInstances
from evalbeam.transforms.summary import SummarizeScores
from evalbeam.transforms.validate import ToInstances
from tests.helpers import ROOT


@pytest.mark.slow
def test_read_jsonl_numbers_lines_and_dead_letters_bad_ones(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b'{"a": 1}\n'
        b"\n"
        b'{"a": 2, "b": "caf\xc3\xa9"}\n'
        b"{not json\n"
        b"[1, 2]\n"
        b'{"a": "\xff"}\n'
        b'{"a": 3}'  # no final newline
    )
    with TestPipeline() as p:
        records, dead, lines = p | ReadRecords("jsonl", uri=str(path))
        assert_that(records | beam.Map(lambda r: (r.source.rsplit(":", 1)[1], r.line, r.data)),
                    equal_to([("1", 1, {"a": 1}), ("3", 3, {"a": 2, "b": "café"}), ("7", 7, {"a": 3})]), label="records")
        assert_that(dead | beam.Map(lambda d: (d.source.rsplit(":", 1)[1], d.line, d.reason.split(":")[0].split(" (")[0])),
                    equal_to([("4", 4, "invalid JSON"), ("5", 5, "a record must be a JSON object, got array"),
                              ("6", 6, "line 6 is not valid UTF-8")]), label="dead")
        assert_that(lines | beam.Map(lambda s: (s.lines, s.skipped)), equal_to([(7, 1)]), label="lines")


@pytest.mark.slow
def test_read_csv_quoted_newlines_and_short_rows(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('id,response\n1,"two\nlines"\n2,ok\n3\n\n4,"x,y"\n', encoding="utf-8")
    with TestPipeline() as p:
        records, dead, lines = p | ReadRecords("csv", uri=str(tmp_path / "*.csv"))
        assert_that(records | beam.Map(lambda r: (r.source.split(":", 1)[1], r.line_count, r.data)),
                    equal_to([("row 1 (lines 2-3)", 2, {"id": "1", "response": "two\nlines"}),
                              ("row 2 (line 4)", 1, {"id": "2", "response": "ok"}),
                              ("row 4 (line 7)", 1, {"id": "4", "response": "x,y"})]), label="records")
        assert_that(dead | beam.Map(lambda d: (d.source.split(":", 1)[1], d.reason)),
                    equal_to([("row 3 (line 5)", "row has 1 cells, the header has 2")]), label="dead")
        # 7 lines: the header and a blank line hold no record
        assert_that(lines | beam.Map(lambda s: (s.lines, s.skipped)), equal_to([(7, 2)]), label="lines")


@pytest.mark.slow
def test_read_in_another_encoding_by_lines_and_transcoded(tmp_path):
    """input.encoding: a cp1252 CSV split at its line bytes, a UTF-16 JSONL file (two bytes a line
    break, with a byte order mark, gzipped) transcoded as it is read; a line that does not decode
    is dead-lettered alone, with its line and the encoding named."""
    import gzip

    rows = [{"id": "1", "response": "café – “quoted”"}, {"id": "2", "response": "naïve"}]
    # 0x81 is one of the five bytes cp1252 leaves undefined
    (tmp_path / "d.csv").write_bytes("id,response\r\n1,café – “quoted”\r\n2,naïve\r\n".encode("cp1252") + b"3,\x81\r\n")
    lines = [json.dumps(r, ensure_ascii=False).encode("utf-16-le") for r in rows]
    lines.insert(1, '{"id": "x", "response": "'.encode("utf-16-le") + b"\x00\xd8" + '"}'.encode("utf-16-le"))  # a lone surrogate
    with gzip.open(tmp_path / "d.jsonl.gz", "wb") as f:
        f.write(b"\xff\xfe" + "\n".encode("utf-16-le").join(lines) + "\n".encode("utf-16-le"))
    with TestPipeline() as p:
        csv_records, csv_dead, _ = p | "Csv" >> ReadRecords("csv", uri=str(tmp_path / "*.csv"), encoding="cp1252")
        json_records, json_dead, json_lines = p | "Json" >> ReadRecords("jsonl", uri=str(tmp_path / "*.gz"), encoding="utf-16")
        assert_that(csv_records | beam.Map(lambda r: r.data), equal_to(rows), label="csv")
        assert_that(csv_dead | beam.Map(lambda d: (d.line, d.reason)), equal_to(
            [(4, "line 4 is not valid cp1252 (input.encoding): character maps to <undefined> at byte 2")]), label="csv dead")
        assert_that(json_records | beam.Map(lambda r: (r.line, r.data)), equal_to([(1, rows[0]), (3, rows[1])]), label="json")
        assert_that(json_dead | beam.Map(lambda d: (d.line, d.reason)), equal_to(
            [(2, "line 2 is not valid utf-16 (input.encoding)")]), label="json dead")
        assert_that(json_lines | beam.Map(lambda s: (s.lines, s.skipped)), equal_to([(3, 0)]), label="json lines")


def test_a_line_that_is_not_utf8_suggests_input_encoding(tmp_path):
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import DeadLetter, Record

    path = tmp_path / "latin.csv"
    path.write_bytes("id,response\n1,café\n2,plain\n".encode("latin-1"))
    dead = [i for i in parse_file(str(path), "csv") if isinstance(i, DeadLetter)]
    assert [d.reason for d in dead] == ["line 2 is not valid UTF-8 (unexpected end of data at byte 5); if the file is "
                                        "in another encoding, set input.encoding (e.g. latin-1, cp1252, utf-16)"]
    assert [i.data for i in parse_file(str(path), "csv", "latin-1") if isinstance(i, Record)] == [
        {"id": "1", "response": "café"}, {"id": "2", "response": "plain"}]


RUN = RunKey("r1", __import__("datetime").date(2026, 11, 20))


def _instance(i, response, reference="gold", **fields):
    return Instance(f"id{i}", {"response": response, "reference": reference, **fields}, {"grp": "a" if i % 2 else "b"}, f"f:{i}")


@pytest.mark.slow
def test_to_instances_splits_valid_and_invalid():
    spec = RowSpec({}, None, (), (("exact_match", (("response", "reference"),)),))
    from evalbeam.transforms.records import Record

    records = [Record("f:1", {"response": "x", "reference": "x"}, "{}", False),
               Record("f:2", {"response": 3, "reference": "x"}, "{raw}", False)]
    with TestPipeline() as p:
        instances, dead = p | beam.Create(records) | ToInstances(spec)
        assert_that(instances | beam.Map(lambda i: (i.source, i.fields["response"])), equal_to([("f:1", "x")]), label="ok")
        assert_that(dead | beam.Map(lambda d: (d.source, d.field, d.reason, d.raw_record)),
                    equal_to([("f:2", "response", "field 'response': must be a string, got number", "{raw}")]), label="bad")


@pytest.mark.slow
def test_score_keeps_every_row_when_a_metric_raises():
    specs = [MetricSpec(name="exact_match"),
             MetricSpec(name="fragile_length", function="tests.custom_metrics:fragile_length")]
    instances = [_instance(1, "gold", latency_in_seconds=2.0), _instance(2, "boom")]
    with TestPipeline() as p:
        scored = p | beam.Create(instances) | ScoreInstances(RUN, specs)
        rows = scored | beam.FlatMap(lambda s: [(r["instance_id"], r["metric"], r["score"], r["error"], r["extra"]) for r in s.results])
        assert_that(rows, equal_to([
            ("id1", "exact_match", 1.0, None, None),
            ("id1", "fragile_length", 4.0, None, json.dumps({"upper": "GOLD"})),
            ("id1", "latency_in_seconds", 2.0, None, None),  # reported automatically when present
            ("id2", "exact_match", 0.0, None, None),
            ("id2", "fragile_length", None, "ValueError: cannot score an explosion", None),
        ]))


@pytest.mark.slow
def test_summarize_by_slice_with_thresholds():
    specs = [MetricSpec(name="exact_match", threshold=0.5)]
    instances = [_instance(i, "gold" if i < 3 else "other") for i in range(6)]
    with TestPipeline() as p:
        scored = p | beam.Create(instances) | ScoreInstances(RUN, specs)
        summary = scored | SummarizeScores(RUN, {"exact_match": 0.5})
        assert_that(summary | beam.Map(lambda r: (r["slice"], r["row_count"], r["mean"], r["pass_rate"], r["threshold"])),
                    equal_to([("overall", 6, 0.5, 0.5, 0.5),
                              ("grp=a", 3, pytest.approx(1 / 3), pytest.approx(1 / 3), 0.5),  # ids 1, 3, 5
                              ("grp=b", 3, pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5)]))


@pytest.mark.slow
@pytest.mark.parametrize("lean", [False, True], ids=["grouped", "read-twice"])
def test_to_instances_makes_ids_unique_in_source_order(lean):
    """Both ways of making ids unique: grouping the instances by id, and the
    local runner's (a first read packs only the ids into batches per shard, to
    find those repeated; the records with those are built and their ids'
    decisions made; the last pass applies them)."""
    from evalbeam.transforms.records import Record
    from evalbeam.transforms.validate import RepeatedIds, UniqueIdDecisions

    def rec(line, data, origin="f"):
        return Record(f"{origin}:{line}", data, json.dumps(data), False, origin, line)

    def unique(p, label, records, spec):
        made = p | label >> beam.Create(records)
        decisions = made | f"{label}Decisions" >> UniqueIdDecisions(spec, made | f"{label}Repeated" >> RepeatedIds(spec)) \
            if lean else None
        return made | f"{label}Unique" >> ToInstances(spec, decisions)

    same = {"response": "x", "reference": "x"}
    odd = "é😀\n\u2028,"  # multi-byte characters and line breaks (a lone surrogate is dead-lettered earlier)
    # given out of order: source order (file, then line) decides which is first
    records = [rec(9, {**same, "id": "a", "n": 3}), rec(2, {**same, "id": "a", "n": 1}),
               rec(5, {**same, "id": "b"}), rec(1, {**same, "id": "a", "n": 0}, origin="g"),
               rec(6, {**same, "id": odd}), rec(8, {**same, "id": odd, "n": 1}), rec(3, {**same, "id": odd + "x"}),
               # a row that is no instance does not count as the first of its id
               rec(10, {"response": "x", "id": "c"}), rec(11, {**same, "id": "c"})]
    spec = RowSpec({}, "id", (), (("exact_match", (("response", "reference"),)),))
    with TestPipeline() as p:
        instances, dead = unique(p, "WithIdColumn", records, spec)
        assert_that(instances | beam.Map(lambda i: (i.instance_id, i.source)),
                    equal_to([("a", "f:2"), ("b", "f:5"), (odd, "f:6"), (odd + "x", "f:3"), ("c", "f:11")]),
                    label="first kept")
        assert_that(dead | beam.Map(lambda d: (d.source, d.field, d.reason)), equal_to([
            ("f:9", "instance_id", "duplicate id 'a' in column 'id': first seen at f:2"),
            ("g:1", "instance_id", "duplicate id 'a' in column 'id': first seen at f:2"),
            ("f:8", "instance_id", f"duplicate id {odd!r} in column 'id': first seen at f:6"),
            ("f:10", "reference", "field 'reference': missing or null; needed by metric 'exact_match'")]), label="later dead")
        # ids from the inputs: rows of the same inputs are all kept, numbered by occurrence in source order,
        # whatever their outputs; other inputs, another id
        hashed = unique(p, "ByContent", [rec(7, same), rec(3, same), rec(4, {**same, "response": "y"}),
                                         rec(5, {**same, "reference": "y"})], RowSpec({}, None, (), ()))[0]
        assert_that(hashed | beam.Map(lambda i: (i.source, i.instance_id.split("-")[1:])),
                    equal_to([("f:3", []), ("f:4", ["2"]), ("f:7", ["3"]), ("f:5", [])]), label="numbered")


@pytest.mark.slow
def test_lost_records_show_as_a_line_mismatch():
    """The runs row counts the source's lines apart from the records: drop a
    scored record on the way and the two accounts no longer balance."""
    from evalbeam.transforms.records import DeadLetter, SourceLines
    from evalbeam.transforms.runs import RunRecord
    from evalbeam.transforms.score import ScoredInstance

    def runs_row(drop):
        scored = [ScoredInstance(_instance(i, "x"), []) for i in range(3)]
        scored[1].instance.line_count = 2
        kept = scored[1:] if drop else scored
        dead = [DeadLetter("f:9", "bad", "", line=9, line_count=1)]
        with TestPipeline() as p:
            parts = (p | "Read" >> beam.Create(["r"] * 4), p | "Scored" >> beam.Create(kept),
                     p | "All" >> beam.Create(kept), p | "Dead" >> beam.Create(dead),
                     p | "Usage" >> beam.Create([{}]), p | "Lines" >> beam.Create([SourceLines("f", 6, 1)]))
            row = parts | RunRecord(RUN, "e", "{}", "v", __import__("datetime").datetime.now())
            assert_that(row | beam.Map(lambda r: (r["lines_read"], r["lines_skipped"] + r["lines_scored"]
                                                  + r["lines_dead_lettered"])),
                        equal_to([(6, 5 if drop else 6)]))

    runs_row(drop=False)
    runs_row(drop=True)


def _rows_of(schema, n, seed):
    """n rows of random values of the schema's types (None where a field may be null)."""
    import datetime as dt
    import random

    import pyarrow as pa

    rng = random.Random(seed)

    def value(field, i):
        if field.nullable and rng.random() < 0.2:
            return None
        t = field.type
        if pa.types.is_string(t):
            return f"{field.name}-{i}-" + "".join(rng.choice("aé😀\n\"x ") for _ in range(rng.randrange(0, 40)))
        if pa.types.is_int64(t):
            return rng.choice([0, -1, 2 ** 62, rng.randrange(-10 ** 9, 10 ** 9)])
        if pa.types.is_floating(t):
            return rng.choice([0.0, -0.5, 1e300, rng.random()])
        if pa.types.is_boolean(t):
            return rng.random() < 0.5
        if pa.types.is_date32(t):
            return dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(400))
        if pa.types.is_timestamp(t):
            return dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=rng.randrange(10 ** 13))
        raise AssertionError(f"no generator for {t}")

    return [{f.name: value(f, i) for f in schema} for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("table, rows, lists", [("metric_results", 0, True), ("metric_results", 2600, False),
                                                ("metric_results", 2600, True), ("runs", 3, False)])
def test_direct_parquet_writes_hold_what_beams_sink_writes(tmp_path, monkeypatch, table, rows, lists):
    """Local runs write each bundle's Parquet file directly (WriteParquetTable direct);
    Dataflow's path goes through Beam's sink. Same schema, same rows, several row
    groups when the rows pass ROW_GROUP_BYTES, and a table with no rows still gets a file.
    With `lists` the elements are lists of rows (an instance's metric rows: 1 to 12 here)."""
    import pyarrow.parquet as pq

    from evalbeam.transforms import write
    from evalbeam.metrics.rows.tables import arrow_schema

    monkeypatch.setattr(write, "ROW_GROUP_BYTES", 64 * 1024)  # several row groups from 2,600 rows
    data = _rows_of(arrow_schema(table, ("dataset",)), rows, seed=rows)
    elements = data
    if lists:
        sizes = random.Random(rows).choices(range(1, 13), k=len(data))
        elements, at = [], 0
        while at < len(data):
            elements.append(data[at:at + sizes[len(elements)]])
            at += len(elements[-1])
    for direct in (False, True):
        folder = str(tmp_path / ("direct" if direct else "sink"))
        with TestPipeline() as p:
            written = {table: p | beam.Create(elements, reshuffle=False)
                       | write.WriteParquetTable(folder, table, ("dataset",), direct=direct, lists=lists)}
            if direct:
                written | write.WriteEmptyTables(folder, ("dataset",))
    read = {}
    for kind in ("sink", "direct"):
        files = sorted((tmp_path / kind / table).glob("*.parquet"))
        assert files, kind
        tables = [pq.read_table(f) for f in files]
        assert all(t.schema == arrow_schema(table, ("dataset",)) for t in tables)
        read[kind] = sorted((r for t in tables for r in t.to_pylist()), key=lambda r: json.dumps(r, default=str))
        if kind == "direct" and rows > 1000:
            assert max(pq.ParquetFile(f).num_row_groups for f in files) > 1
    assert read["direct"] == read["sink"] == sorted(data, key=lambda r: json.dumps(r, default=str))


@pytest.mark.parametrize("worker, duckdb, frozen", [(True, False, True), (False, False, False), (True, True, False)])
def test_a_worker_process_freezes_its_start_up_objects_once(worker, duckdb, frozen):
    """transforms.worker: in a Beam worker process (CONTROL_API_SERVICE_DESCRIPTOR set)
    the objects alive at the first call go to the collector's permanent generation, once;
    not in the launching process, nor where DuckDB's bindings would report them as
    leaks at exit (and nothing is reported on stderr)."""
    import subprocess
    import sys

    code = ("import gc, sys\n"
            + ("import duckdb\n" if duckdb else "")
            + "from evalbeam.transforms.worker import freeze_start_up_objects as f\n"
            "first, count = f(), gc.get_freeze_count()\n"
            "again = f()\n"
            "print(first, count > 1000, again, gc.get_freeze_count() == count)\n")
    env = {k: v for k, v in os.environ.items() if k != "CONTROL_API_SERVICE_DESCRIPTOR"}
    if worker:
        env["CONTROL_API_SERVICE_DESCRIPTOR"] = "url: 'localhost:1'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                            cwd=str(ROOT), check=True)
    assert result.stdout.split() == [str(frozen), str(frozen), "False", "True"]
    assert result.stderr == ""


def test_young_objects_are_collected_less_often_never_more():
    """transforms.worker.collect_young_less_often: the collector's first threshold goes up to
    YOUNG_COLLECTION_OBJECTS and the others stay; a higher one, or collection disabled, is left."""
    import subprocess
    import sys

    code = ("import gc\n"
            "from evalbeam.transforms.worker import collect_young_less_often as c, YOUNG_COLLECTION_OBJECTS as y\n"
            "gc.set_threshold(700, 7, 9); c(); print(gc.get_threshold() == (y, 7, 9))\n"
            "gc.set_threshold(2 * y, 7, 9); c(); print(gc.get_threshold() == (2 * y, 7, 9))\n"
            "gc.set_threshold(0); c(); print(gc.get_threshold()[0] == 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=True)
    assert result.stdout.split() == ["True", "True", "True"]


def test_every_metric_row_carries_the_threshold_in_force():
    """metric_results.threshold: a row scoring set (an ADK case's own criteria) keeps its own; a judge
    row (every column None to start with) and any other gets its metric's; none where it has none."""
    import datetime as dt

    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.rows.tables import RunKey, blank_metric_row
    from evalbeam.transforms.score import ScoredInstance, with_thresholds

    run = RunKey("r", dt.date(2026, 11, 25))
    rows = [blank_metric_row(run, "i", "fluency", "gemini"), {"metric": "response_match_score", "threshold": 0.09},
            {"metric": "tool_call_count_v1"}, {"metric": "custom"}]
    scored = with_thresholds(ScoredInstance(Instance("i", {}, {}, "s"), rows),
                             {"fluency": 3.0, "response_match_score": 0.8, "tool_call_count_v1": None})
    assert [r["threshold"] for r in scored.results] == [3.0, 0.09, None, None]
