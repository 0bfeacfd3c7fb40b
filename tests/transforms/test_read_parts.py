"""A large JSONL file read in line-aligned parts gives what reading it whole gives:
the same records with the same line numbers, the same dead letters, the same
line counts; and a whole run over such a file scores and counts every row."""
import json
import random

import duckdb
import pytest

from tests.helpers import evalbeam
from evalbeam.transforms.file_parts import FilePart, file_parts
from evalbeam.transforms.read import parse_file, parse_part
from evalbeam.transforms.records import DeadLetter, Record, SourceLines


def _hostile_jsonl(rng: random.Random, rows: int) -> bytes:
    out = [b"\xef\xbb\xbf"]  # a byte order mark at the start
    for i in range(rows):
        kind = rng.random()
        if kind < 0.05:
            out.append(b"\n")  # blank
        elif kind < 0.08:
            out.append(b"{not json\n")
        elif kind < 0.10:
            out.append(b'{"id": "bad", "response": "\xff\xfe"}\n')  # not UTF-8
        elif kind < 0.12:
            out.append(b"[1, 2]\n")  # an array line, not a record (and not an array file)
        elif kind < 0.15:
            out.append(json.dumps({"id": f"r{i}", "response": "x" * rng.randint(0, 3000)}).encode() + b"\r\n")
        else:
            out.append(json.dumps({"id": f"r{i}", "response": f"row {i} é", "n": i}).encode() + b"\n")
    out.append(b'{"id": "last", "response": "no final newline"}')
    return b"".join(out)


def _summary(items):
    records = [(r.source, r.line, r.line_count, r.data) for r in items if isinstance(r, Record)]
    dead = [(d.source, d.line, d.reason) for d in items if isinstance(d, DeadLetter)]
    lines = [(s.lines, s.skipped) for s in items if isinstance(s, SourceLines)]
    return sorted(records, key=lambda r: r[1]), sorted(dead, key=lambda d: d[1]), tuple(map(sum, zip(*lines)))


@pytest.mark.parametrize("seed", range(6))
def test_parts_read_what_the_whole_file_reads(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "big.jsonl"
    path.write_bytes(_hostile_jsonl(rng, rng.randint(200, 2000)))
    part_bytes = rng.choice([1000, 4096, 20_000, 50_000])
    parts = file_parts(str(path), "jsonl", path.stat().st_size, part_bytes)
    assert len(parts) > 1
    # contiguous, line-aligned, covering the file
    assert parts[0].start == 0 and parts[0].first_line == 1 and parts[-1].end == path.stat().st_size
    data = path.read_bytes()
    for a, b in zip(parts, parts[1:]):
        assert a.end == b.start and data[b.start - 1:b.start] == b"\n"
        assert b.first_line == data[:b.start].count(b"\n") + 1
    whole = _summary(list(parse_file(str(path), "jsonl")))
    split = _summary([item for part in parts for item in parse_part(part, "jsonl")])
    assert split == whole
    assert whole[0] and whole[1]  # both kinds were met


def test_small_compressed_csv_and_array_files_are_read_whole(tmp_path):
    array = tmp_path / "a.jsonl"
    array.write_text("[\n" + ",\n".join(json.dumps({"id": i}) for i in range(5000)) + "\n]\n")
    assert file_parts(str(array), "jsonl", array.stat().st_size, 1000) == [FilePart(str(array))]
    small = tmp_path / "s.jsonl"
    small.write_text('{"id": 1}\n')
    assert file_parts(str(small), "jsonl", small.stat().st_size, 1000) == [FilePart(str(small))]
    for name, fmt in (("c.csv", "csv"), ("z.jsonl.gz", "jsonl"), ("z.jsonl.bz2", "jsonl")):
        assert file_parts(str(tmp_path / name), fmt, 10 ** 9, 1000) == [FilePart(str(tmp_path / name))]


@pytest.mark.slow
def test_a_run_over_a_file_read_in_parts_counts_every_row(tmp_path, monkeypatch):
    """A whole run with parts of 64 KB: every row scored or dead-lettered with its
    true line, duplicates across parts found (the id check spans the parts)."""
    rows = []
    for i in range(3000):
        rows.append(json.dumps({"id": f"r{i % 2900}", "response": f"answer {i}", "reference": f"answer {i % 7}"}))
    rows[1234] = "{broken"
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(rows) + "\n")
    assert path.stat().st_size > 3 * 65536
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"name": "parts", "run_id": "p1", "input": {"uri": str(path), "id_column": "id"},
                                  "metrics": ["exact_match"], "output": {"parquet": str(tmp_path / "out")}}))
    evalbeam("run", str(config), env={"EVALBEAM_PART_BYTES": "65536"})
    out = tmp_path / "out" / "p1"
    with duckdb.connect() as con:
        read, scored, dead = con.execute(f"SELECT read_count, scored_count, dead_letter_count FROM '{out}/runs/*.parquet'").fetchone()
        reasons = con.execute(f"SELECT line, reason FROM '{out}/dead_letter/*.parquet' ORDER BY line").fetchall()
        ids = con.execute(f"SELECT count(DISTINCT instance_id), count(*) FROM '{out}/instances/*.parquet'").fetchone()
    assert (read, scored, dead) == (3000, 2899, 101)
    assert reasons[0][0] == 1235 and reasons[0][1].startswith("invalid JSON")
    # rows 2900..2999 repeat the ids of rows 0..99: the first occurrence is kept
    assert [line for line, _ in reasons[1:]] == list(range(2901, 3001))
    assert all("duplicate id" in reason for _, reason in reasons[1:])
    assert ids == (2899, 2899)


@pytest.mark.slow
def test_a_large_input_uses_every_core_by_default_with_the_same_results(tmp_path):
    """With no flags, a local run over a large input (the size lowered here) scores in
    worker processes the command started, one per core, reading the file in parts;
    its tables equal those of a run in one process (--direct_num_workers=1)."""
    import os

    from tests.e2e.test_cli import evalbeam_pid

    rows = [json.dumps({"id": f"r{i}", "response": f"answer {i % 13}", "reference": f"answer {i % 7}"})
            for i in range(4000)]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(rows) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "name": "cores", "run_id": "many", "input": {"uri": str(path), "id_column": "id"},
        "metrics": ["exact_match", "rouge_l", {"name": "scoring_process", "function": "tests.custom_metrics:scoring_process",
                                               "inputs": ["response"]}],
        "output": {"parquet": str(tmp_path / "out")}}))
    small = {"EVALBEAM_PARALLEL_INPUT_BYTES": "1000", "EVALBEAM_PART_BYTES": "20000"}
    launcher = evalbeam_pid("run", config, env=small)
    evalbeam("run", config, "--set", "run_id=one", "--direct_num_workers=1", env=small)
    out = tmp_path / "out"
    with duckdb.connect() as con:
        extras = [json.loads(e) for (e,) in con.execute(
            f"SELECT extra FROM '{out}/many/metric_results/*.parquet' WHERE metric = 'scoring_process'").fetchall()]
        tables = [con.execute(f"SELECT instance_id, metric, score FROM '{out}/{run}/metric_results/*.parquet' "
                              "WHERE metric != 'scoring_process' ORDER BY ALL").fetchall() for run in ("many", "one")]
        summaries = [con.execute(f"SELECT metric, slice, valid_count, mean, ci_low, ci_high FROM '{out}/{run}/summary/*.parquet' "
                                 "WHERE metric != 'scoring_process' ORDER BY ALL").fetchall() for run in ("many", "one")]
    pids = {e["pid"] for e in extras}
    assert len(extras) == 4000 and launcher not in pids and all(launcher in e["ancestors"] for e in extras)
    # each worker froze its start-up objects before scoring (transforms.worker)
    assert all(e["frozen"] > 10000 for e in extras)
    assert 1 <= len(pids) <= os.cpu_count()  # the machine's cores (this one has 2)
    assert tables[0] == tables[1] and len(tables[0]) == 8000
    # the same statistics; the floats may differ in their last bits (sums taken in another order)
    assert [r[:3] for r in summaries[0]] == [r[:3] for r in summaries[1]]
    assert [r[3:] for r in summaries[0]] == [pytest.approx(r[3:], rel=1e-12) for r in summaries[1]]


@pytest.mark.slow
@pytest.mark.parametrize("workers, size, cap, parts", [
    (2, 28_000_000, 32 * 2**20, 4),  # under the cap: two parts a worker
    (2, 150_000_000, 32 * 2**20, 6),  # over it: parts of at most the cap, an even number
    (3, 150_000_000, 32 * 2**20, 6),
    (2, 1_400_000_000, 32 * 2**20, 42),
])
def test_a_run_with_several_workers_reads_an_equal_share_each(tmp_path, monkeypatch, workers, size, cap, parts):
    """pipelines.local.part_bytes: with several local workers, a file is read in
    a whole multiple of the workers' number of parts, two at least each, none over
    the part size; with one worker, in parts of the part size (None)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from evalbeam.configs import EvalConfig
    from evalbeam.pipelines import local

    monkeypatch.setattr(local, "input_bytes", lambda config: size)
    monkeypatch.setenv("EVALBEAM_PART_BYTES", str(cap))
    config = EvalConfig.model_validate({"name": "p", "input": {"uri": str(tmp_path / "d.jsonl")}, "metrics": ["exact_match"],
                                        "output": {"parquet": str(tmp_path / "out")}})
    several = beam.Pipeline(options=PipelineOptions([f"--direct_num_workers={workers}",
                                                     "--direct_running_mode=multi_processing"]))
    got = local.part_bytes(several, config)
    assert got <= cap and -(-size // got) == parts and parts % workers == 0
    assert local.part_bytes(beam.Pipeline(options=PipelineOptions([])), config) is None
    # and the parts of such a file: contiguous, as many as planned, the same size but for the last
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(json.dumps({"id": i, "text": "w" * (i % 50)}).encode() + b"\n" for i in range(20000)))
    monkeypatch.setattr(local, "input_bytes", lambda config: path.stat().st_size)
    planned = file_parts(str(path), "jsonl", path.stat().st_size, local.part_bytes(several, config))
    assert len(planned) == 2 * workers and planned[-1].end == path.stat().st_size


def test_the_id_pass_parse_gives_every_id_and_error_json_gives(tmp_path):
    """parsers.IdFirstLoads (orjson where it is exact for the id) against json.loads, on
    many generated lines: ids of text (escaped, non-ASCII, a lone surrogate's escape), of
    numbers past 64 bits, NaN, booleans, objects, a repeated id key, no id, invalid JSON.
    Each line gives the same id (transforms.validate.record_id) or the same error; a
    file read with it gives the records' ids of a file read with json.loads."""
    from evalbeam.metrics.rows.instance import RowSpec
    from evalbeam.transforms.parsers import IdFirstLoads
    from evalbeam.transforms.validate import record_id

    rng = random.Random(17)
    ids = ['"a"', '"é\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"x\\udc00"', '""', '" "', "1", "-0", "2.50",
           "18446744073709551616", "-9223372036854775809", "123456789012345678901234567890", "1e400", "NaN",
           "Infinity", "true", "null", "[1]", '{"k": 1}', '"a\\"b"', '"tab\\t"']
    others = ['"response": "r"', '"n": 18446744073709551617', '"f": NaN', '"s": "\\udbff"', '"d": [[[1]]]',
              '"e": 1e999']
    loads = IdFirstLoads("id")
    spec = RowSpec({}, "id", (), ())
    lines, kinds = [], set()
    for _ in range(4000):
        members = [f'"id": {rng.choice(ids)}'] if rng.random() < 0.9 else []
        members += rng.sample(others, rng.randint(0, 3))
        if rng.random() < 0.1:
            members.append(f'"id": {rng.choice(ids)}')  # the last one counts, in both
        rng.shuffle(members)
        line = "{" + ", ".join(members) + "}"
        if rng.random() < 0.05:
            line = line[:-1] if rng.random() < 0.5 else "[" + line + "]"
        lines.append(line)

        def outcome(parse):
            try:
                data = parse(line)
            except ValueError as e:
                return "error", type(e).__name__, str(e)
            if not isinstance(data, dict):
                return "not an object", type(data).__name__
            return "id", record_id(Record("f:1", data, line, False), spec)

        expected = outcome(json.loads)
        assert outcome(loads) == expected, line
        kinds.add(expected[0] if expected[0] != "id" else f"id {expected[1] is not None}")
    assert kinds == {"error", "not an object", "id True", "id False"}

    path = tmp_path / "ids.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def ids_read(**options):
        return [(r.line, record_id(r, spec)) if isinstance(r, Record) else (r.line, r.reason)
                for r in parse_file(str(path), "jsonl", **options) if not isinstance(r, SourceLines)]

    assert ids_read(loads=loads) == ids_read()


def test_the_scoring_pass_parse_is_json_loads():
    """parsers.json_loads (json.loads's scanner called directly) against json.loads, on
    many generated lines: records, other values, whitespace before and after, a BOM, extra
    data, invalid JSON, nesting too deep to read. Each gives the same value or the same error."""
    from evalbeam.transforms.parsers import json_loads

    rng = random.Random(23)
    values = ['"a"', '"é\\u00e9"', '"\\ud800"', "1", "-0", "2.50", "123456789012345678901234567890", "1e400", "NaN",
              "-Infinity", "true", "null", "[1, [2, {}]]", '{"k": 1, "k": 2}', '"a\\"b"', '"tab\\t"', "1.0e-7"]
    outcomes = set()
    for _ in range(4000):
        line = "{" + ", ".join(f'"{rng.choice("abc")}": {rng.choice(values)}' for _ in range(rng.randint(0, 4))) + "}"
        change = rng.random()
        if change < 0.1:
            line = rng.choice(values)
        elif change < 0.2:
            line = rng.choice([" ", "\t", "\ufeff", "", "x"]) + line + rng.choice([" ", "\r", "", "}", " 1"])
        elif change < 0.25:
            line = line[:rng.randint(0, len(line))]
        elif change < 0.27:
            line = "[" * 100_000 + "]" * 100_000

        def outcome(parse):
            try:
                value = parse(line)
            except (ValueError, RecursionError) as e:
                return "error", type(e).__name__, str(e)
            return "value", type(value).__name__, repr(value)

        expected = outcome(json.loads)
        assert outcome(json_loads) == expected, line
        outcomes.add(expected[:2])
    assert {("error", "JSONDecodeError"), ("error", "RecursionError"), ("value", "dict"), ("value", "str")} <= outcomes


def test_the_id_pass_keeps_a_records_id_alone(tmp_path):
    """The id pass's parse (IdFirstLoads) makes a record of a text id its id column alone,
    whatever else its line holds, even nesting past MAX_NESTING, which the scoring pass's
    read dead-letters (such a record at most makes its id look repeated: the ids' decisions
    are made from the records read again in full, transforms.validate); a record whose id
    is no text is json's, whole."""
    from evalbeam.transforms.parsers import IdFirstLoads

    deep = "[" * 150 + "]" * 150
    path = tmp_path / "d.jsonl"
    path.write_text(f'{{"id": "x", "notes": {deep}, "n": 1}}\n{{"id": 7, "n": [1]}}\n{{"n": 2, "id": "y"}}\n')
    first_pass = [r for r in parse_file(str(path), "jsonl", loads=IdFirstLoads("id")) if isinstance(r, Record)]
    assert [r.data for r in first_pass] == [{"id": "x"}, {"id": 7, "n": [1]}, {"id": "y"}]
    scoring = [r for r in parse_file(str(path), "jsonl") if not isinstance(r, SourceLines)]
    assert isinstance(scoring[0], DeadLetter) and "nested more than 100 levels" in scoring[0].reason
    assert [r.data for r in scoring[1:]] == [{"id": 7, "n": [1]}, {"n": 2, "id": "y"}]
