"""transforms/parsers.py: a file holding one JSON array is read a window of lines at a time
(_ArrayWindow), in memory that follows its largest element, not the file, with the dead letters,
line numbers and line accounting of every element as before."""
import io
import json
import random
import tracemalloc

import pytest

from evalbeam.transforms import parsers
from evalbeam.transforms.parsers import parse_jsonl
from evalbeam.transforms.records import DeadLetter, Record, SourceLines


RECORD = {"response": "r" * 60, "reference": "x" * 60}


def array_file(path, count: int):
    """A JSON array file of `count` pretty-printed records, five lines each."""
    with open(path, "w") as f:
        f.write("[\n")
        for n in range(count):
            f.write((",\n" if n else "") + json.dumps({"id": f"c{n:06d}", **RECORD}, indent=1))
        f.write("\n]\n")
    return path


def read_whole(path, count: int) -> tuple[int, int]:
    """Parse the file, discarding what is read: (records read, peak bytes allocated meanwhile)."""
    with open(path, "rb") as stream:
        tracemalloc.start()
        try:
            records = 0
            for item in parse_jsonl(str(path), stream):
                if isinstance(item, Record):
                    records += 1
                elif isinstance(item, SourceLines):
                    assert item.lines == count * 5 + 2 and item.skipped == 2
                else:
                    raise AssertionError(item)
            return records, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


def test_a_json_array_is_read_in_memory_that_does_not_grow_with_the_file(tmp_path):
    """8,000 and 24,000 records (about 1.4 and 4.2 MB): every one read, and the peak of what was
    allocated (the reader's 1 MB chunks and the window of lines) grows by less than a tenth of what
    the file grew by; before, the whole text and its lines were held at once."""
    small, small_peak = read_whole(array_file(tmp_path / "small.json", 8_000), 8_000)
    large, large_peak = read_whole(array_file(tmp_path / "large.json", 24_000), 24_000)
    assert (small, large) == (8_000, 24_000)
    grown = (tmp_path / "large.json").stat().st_size - (tmp_path / "small.json").stat().st_size
    assert large_peak - small_peak < grown / 10, (small_peak, large_peak, grown)


PIECES = ['{"a": 1}', '{"b":\n  [1, 2,\n 3]}', '7', '"s"', '{"c": "x\\u00e9"}', '{"d": {"e": null}}',
          '{"n": [[[[1]]]]}', '{"s": "a,]b"}']


@pytest.mark.parametrize("read_ahead", [1, 7, parsers.READ_AHEAD])
def test_generated_arrays_read_as_json_reads_them_with_each_element_on_its_line(monkeypatch, read_ahead):
    """Arrays of mixed elements across lines (some several to a line, some over several lines): each
    object element is a record equal to json.loads' element, whose line is the line it starts on; each
    other element a dead letter on its line; the lines reconcile. With the window read on a line at a
    time (1, 7 characters at least) as with the run's read-ahead."""
    monkeypatch.setattr(parsers, "READ_AHEAD", read_ahead)
    rng = random.Random(47)
    for _ in range(500):
        elements = [rng.choice(PIECES) for _ in range(rng.randint(1, 12))]
        text, starts = rng.choice(["[", "[\n", "  [\n\n"]), []
        for i, element in enumerate(elements):
            starts.append(text.count("\n") + 1)
            text += element + ("" if i == len(elements) - 1 else rng.choice([",\n", ", ", ",\n\n", "\n,", ","]))
        text += rng.choice(["]", "\n]\n", "\n]"])
        items = list(parse_jsonl("f", io.BytesIO(text.encode())))
        *elements_read, lines = items
        assert len(elements_read) == len(elements), text
        for value, start, item in zip(json.loads(text), starts, elements_read):
            if isinstance(value, dict):
                assert isinstance(item, Record) and item.data == value and item.line == start, (text, item)
                assert json.loads(item.raw) == value
            else:
                assert isinstance(item, DeadLetter) and item.line == start and "must be a JSON object" in item.reason
        assert lines.lines == text.count("\n") + (not text.endswith("\n"))
        assert lines.lines == lines.skipped + sum(i.line_count for i in elements_read)


def test_damage_in_a_json_array_costs_what_it_must_and_names_where():
    items = list(parse_jsonl("f", io.BytesIO(b'[\n{"a": 1},\n{"b": "x\xff"},\n{"c":\n}\n,{"d": 4}\n]\n')))
    assert [(type(i).__name__, getattr(i, "line", None)) for i in items] == [
        ("Record", 2), ("DeadLetter", 3), ("DeadLetter", 4), ("SourceLines", None)]
    assert items[1].reason.startswith("line 3 is not valid UTF-8")
    assert items[2].reason == ("invalid JSON: Expecting value: line 5 column 1; element 3 of the JSON array and the "
                               "rest of the file cannot be read")
    assert items[2].line_count == 4 and items[3].lines == 7 and items[3].skipped == 1
    # text after the closing bracket, also of an empty array, is a dead letter, not skipped unseen
    for data in (b'[\n{"a": 1}\n]\nextra\n', b'[]\nextra\n'):
        *_, after, lines = parse_jsonl("f", io.BytesIO(data))
        assert (after.reason, after.raw_record, lines.lines) == ("unexpected text after the end of the JSON array",
                                                          "extra", data.count(b"\n"))
