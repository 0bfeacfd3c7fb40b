"""transforms.write: the rows of a table made Arrow tables as they come."""
import random

import pytest

from evalbeam.transforms import write
from evalbeam.metrics.rows.tables import RunKey, arrow_schema, instance_row
from evalbeam.transforms.score import result_base


@pytest.mark.parametrize("group_bytes", [1, 40_000, write.ROW_GROUP_BYTES])
def test_extend_makes_the_tables_add_makes_row_by_row(monkeypatch, group_bytes):
    monkeypatch.setattr(write, "ROW_GROUP_BYTES", group_bytes)
    rng = random.Random(3)
    run = RunKey("r", __import__("datetime").date(2026, 11, 27))
    rows = [{**result_base(run), "instance_id": f"i{i}", "metric": rng.choice("abc"), "score": rng.random()}
            for i in range(5321)]
    schema = arrow_schema("metric_results")
    one, many = write._ArrowBatches(schema), write._ArrowBatches(schema)
    by_add = [t for t in map(one.add, rows) if t is not None] + [one.rest()]
    by_extend, start = [], 0
    while start < len(rows):  # lists of every size, as instances give them
        size = rng.choice([0, 1, 7, 11, 999, 1000, 1001, 2500])
        by_extend += many.extend(rows[start:start + size])
        start += size
    by_extend.append(many.rest())
    assert len(by_add) == len(by_extend) > (1 if group_bytes < write.ROW_GROUP_BYTES else 0)
    for a, b in zip(by_add, by_extend):
        assert a.equals(b) and [len(x) for x in a.to_batches()] == [len(x) for x in b.to_batches()]


def test_instance_rows_write_every_field_column():
    from evalbeam.metrics.rows.instance import Instance

    run = RunKey("r", __import__("datetime").date(2026, 11, 27))
    instance = Instance("i1", {"response": "x", "predicted_trajectory": [{"tool_name": "t", "tool_input": {"b": 1, "a": "é"}}],
                               "latency_in_seconds": 2.5}, {"lang": "en"}, "f:3")
    row = instance_row(run, instance)
    names = arrow_schema("instances", ["lang"]).names
    assert list(row) == names
    assert row["run_id"] == "r" and row["instance_id"] == "i1" and row["source"] == "f:3" and row["lang"] == "en"
    assert row["predicted_trajectory"] == '[{"tool_input": {"a": "é", "b": 1}, "tool_name": "t"}]'
    assert row["response"] == "x" and row["latency_in_seconds"] == 2.5 and row["reference"] is None
