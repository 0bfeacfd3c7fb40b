"""Live progress: counts from the workers (in this process or others) summed by the launcher."""
import pytest
import io

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from tests.helpers import evalbeam
from evalbeam.transforms.progress import CountFn, ProgressDisplay, describe, read_counts


@pytest.mark.slow
def test_counts_from_worker_processes_are_summed(tmp_path):
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    with beam.Pipeline(options=options) as p:
        numbers = p | beam.Create(range(1000)) | beam.Reshuffle()
        numbers | "Evens" >> beam.Filter(lambda n: n % 2 == 0) | "CountEvens" >> beam.ParDo(CountFn(str(tmp_path), "read"))
        numbers | "CountAll" >> beam.ParDo(CountFn(str(tmp_path), "judge_needed"))
        numbers | "Weighted" >> beam.ParDo(CountFn(str(tmp_path), "judge_done", weight=lambda n: n < 10))
    assert read_counts(str(tmp_path)) == {"read": 500, "judge_needed": 1000, "judge_done": 10}


def test_the_line_says_rate_quota_and_eta():
    line = describe({"read": 120, "scored": 100, "dead_lettered": 20, "judge_needed": 400, "judge_done": 100},
                    elapsed=60, quota_per_minute=200)
    assert line == ("read 120 | scored 100 | dead-lettered 20 | judgments 100/400 at 100/min (50% of the quota), "
                    "ETA 0:03:00 | 0:01:00")


def test_answers_reused_from_checkpoints_are_shown_apart_and_cost_no_quota():
    # a re-run of a killed run: 19 of its 33 answers came from the checkpoints, 14 were calls
    line = describe({"judge_needed": 60, "judge_done": 33, "judge_reused": 19}, elapsed=60, quota_per_minute=60)
    assert line.startswith("read 0 | scored 0 | dead-lettered 0 | judgments 33/60 (19 from checkpoints) at 14/min "
                           "(23% of the quota), ETA 0:01:55")
    # the needed count is written apart from the done: never shown below it
    assert "judgments 14/14 at 14/min" in describe({"judge_needed": 1, "judge_done": 14}, elapsed=60, quota_per_minute=None)


@pytest.mark.slow
def test_a_burst_of_elements_is_counted_without_waiting_for_its_bundle_to_end(tmp_path):
    """The judgments an instance needs come at once, then the calls take minutes: the
    count is written by the DoFn's timer, not only by a later element or the bundle's end."""
    import time

    count = CountFn(str(tmp_path), "judge_needed")
    count.setup()
    try:
        for n in range(14):
            count.process(n)
        deadline = time.monotonic() + 30
        while read_counts(str(tmp_path)).get("judge_needed") != 14 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_counts(str(tmp_path)) == {"judge_needed": 14}
    finally:
        count.teardown()


def test_read_is_never_shown_below_what_was_scored_or_dead_lettered_from_it():
    # each process tallies per bundle: a moment's read count may lag the others
    assert describe({"read": 3336, "scored": 3338, "dead_lettered": 1}, elapsed=1, quota_per_minute=None).startswith(
        "read 3,339 | scored 3,338 | dead-lettered 1 |")


def test_plain_lines_when_not_a_terminal(tmp_path):
    out = io.StringIO()
    with ProgressDisplay(str(tmp_path), None, stream=out, interval=0.05):
        (tmp_path / "a.json").write_text('{"read": 7}')
        (tmp_path / "b.json").write_text('{"read": 3, "scored": 9}')
    assert out.getvalue().splitlines()[-1].startswith("evalbeam progress: read 10 | scored 9 | dead-lettered 0")


@pytest.mark.slow
def test_a_run_prints_its_run_id_first_and_its_final_counts(tmp_path):
    result = evalbeam("run", "configs/demo.yaml", "--set", f"output.parquet={tmp_path}", "--set", "run_id=progress-test")
    lines = result.stderr.splitlines()
    assert lines[0].startswith("evalbeam: run progress-test (run date ")
    assert [line for line in lines if line.startswith("evalbeam progress:")][-1].startswith(
        "evalbeam progress: read 15 | scored 15 | dead-lettered 0")


@pytest.mark.slow
def test_rows_are_counted_read_as_they_are_read(tmp_path):
    """A run over a large input (in parts, in worker processes) counts rows read while
    it reads them, not all at the end: a progress line with rows scored has rows read
    too. (Not "as many": each counter is flushed about every second on its own.)"""
    import json
    import re

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "response": "an answer " * 20, "reference": "an answer " * 19})
                            + "\n" for i in range(30000)) + "{bad\n")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"name": "p", "run_id": "p", "input": {"uri": str(data), "id_column": "id"},
                                  "metrics": ["rouge_l", "bleu"], "output": {"parquet": str(tmp_path / "out")}}))
    result = evalbeam("run", str(config), env={"EVALBEAM_PROGRESS_SECONDS": "0.2", "EVALBEAM_PARALLEL_INPUT_BYTES": "1000",
                                               "EVALBEAM_PART_BYTES": "500000"})
    counts = [tuple(int(n.replace(",", "")) for n in m.groups()) for m in re.finditer(
        r"evalbeam progress: read ([\d,]+) \| scored ([\d,]+) \| dead-lettered ([\d,]+)", result.stderr)]
    assert counts[-1] == (30001, 30000, 1)
    assert any(0 < scored < 30000 for _, scored, _ in counts)  # lines from the middle of the run
    assert any(0 < read < 30001 for read, _, _ in counts), str(counts)
    assert all(read > 0 for read, scored, _ in counts if scored >= 1000), str(counts)
