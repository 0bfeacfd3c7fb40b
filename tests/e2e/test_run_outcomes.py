"""What a run says and keeps when its input is partly unusable, its comparison
pairs nothing, or its output cannot be written (issue 21, items 2, 3 and 5),
through the real `evalbeam` command."""
import json
import random
from pathlib import Path

import pytest
import yaml

from tests import helpers
from tests.helpers import evalbeam, table

T = {"tool_name": "get", "tool_input": {"id": 1}}


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config_file(tmp_path, data, metrics, run_id="r1", name="outcomes", output=None, **extra):
    config = {"name": name, "run_id": run_id, "input": {"uri": str(data), "id_column": "id"}, "metrics": metrics,
              "output": {"parquet": str(output or tmp_path / "out")}, **extra}
    path = tmp_path / f"{run_id}-{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# ------------------------------------------------ 5. missing inputs are per metric


@pytest.mark.slow
def test_a_row_lacking_one_metrics_inputs_loses_only_that_metric(tmp_path):
    rows = [{"id": f"c{i}", "response": "the cat sat", "reference": "the cat sat", "reference_trajectory": [T],
             **({"predicted_trajectory": [T]} if i % 2 == 0 else {})} for i in range(6)]
    rows.append({"id": "nothing", "reference_trajectory": [T]})  # no metric can score it
    data = jsonl(tmp_path / "d.jsonl", rows)
    metrics = ["exact_match", "bleu", "rouge_1", "trajectory_exact_match"]
    result = evalbeam("run", config_file(tmp_path, data, metrics))
    assert "read 7 = scored 6 + dead-lettered 1; metric errors 3" in result.stdout
    assert "trajectory_exact_match: 3 x missing input predicted_trajectory" in result.stdout
    results = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "r1", "metric_results")}
    assert set(results) == {(f"c{i}", m) for i in range(6) for m in metrics}
    for i in range(6):
        for m in ("exact_match", "bleu", "rouge_1"):
            assert (round(results[f"c{i}", m]["score"], 9), results[f"c{i}", m]["error"]) == (1.0, None)
        trajectory = results[f"c{i}", "trajectory_exact_match"]
        assert (trajectory["score"], trajectory["error"]) == (
            (1.0, None) if i % 2 == 0 else (None, "missing input predicted_trajectory"))
    [dead] = table(tmp_path / "out" / "r1", "dead_letter")
    assert (dead["line"], dead["field"]) == (7, "response")
    [runs] = table(tmp_path / "out" / "r1", "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (7, 6, 1)
    overall = {s["metric"]: s for s in table(tmp_path / "out" / "r1", "summary") if s["slice"] == "overall"}
    assert (overall["trajectory_exact_match"]["valid_count"], overall["trajectory_exact_match"]["error_count"]) == (3, 3)
    assert overall["bleu"]["valid_count"] == 6


# ------------------------------------------------ 2. exit statuses tell the truth


@pytest.mark.slow
def test_a_run_that_scores_nothing_or_dead_letters_too_much_fails(tmp_path):
    latin = tmp_path / "latin1.csv"
    latin.write_bytes("id,response,reference\n".encode() + b"".join(
        f"c{i},caf\u00e9 {i},caf\u00e9\n".encode("latin-1") for i in range(5)))
    nothing = evalbeam("run", config_file(tmp_path, latin, ["exact_match"]), check=False)
    assert nothing.returncode == 1, nothing.stderr
    assert "read 5 = scored 0 + dead-lettered 5" in nothing.stdout
    assert "PROBLEMS:\n  no instance was scored: all 5 records read were dead-lettered" in nothing.stdout
    assert "evalbeam: run r1 finished with problems (listed above)" in nothing.stderr
    # 3 of 5 dead-lettered: past the default share (0.5), within a configured 0.6
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "response": "a", "reference": "a"}) + "\n" for i in range(2))
                    + "{broken\n[1]\n{\"id\": \"c9\"}\n")
    too_many = evalbeam("run", config_file(tmp_path, data, ["exact_match"], run_id="r2"), check=False)
    assert too_many.returncode == 1
    assert "3 of 5 records read were dead-lettered (60%), more than max_dead_letter_share 0.5 allows" in too_many.stdout
    allowed = evalbeam("run", config_file(tmp_path, data, ["exact_match"], run_id="r3", max_dead_letter_share=0.6))
    assert "PROBLEMS" not in allowed.stdout and "read 5 = scored 2 + dead-lettered 3" in allowed.stdout


@pytest.mark.slow
def test_an_empty_input_fails_the_run_naming_it_unless_expected(tmp_path):
    """Issue 32, item 7: an empty file exited 0 with an empty table, a pass in CI and a base for
    compare_with: previous. It fails (status 1) naming the input, unless input.allow_empty."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = evalbeam("run", config_file(tmp_path, empty, ["exact_match"], run_id="r4"), check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"PROBLEMS:\n  no record was read from input.uri {empty}: an empty input fails the run "
            "(set input.allow_empty: true when it is expected)") in result.stdout
    assert "evalbeam: run r4 finished with problems" in result.stderr
    expected = evalbeam("run", config_file(tmp_path, empty, ["exact_match"], run_id="r5"), "--set", "input.allow_empty=true")
    assert "PROBLEMS" not in expected.stdout and "read 0 = scored 0 + dead-lettered 0" in expected.stdout
    # compare_with: previous passes over the runs that read nothing to the last one that read something
    evalbeam("run", scored_run(tmp_path, ["a", "b"], "r0"), "--set", "run_date=2026-11-01")
    for run_id, day in (("r4", "02"), ("r5", "03")):
        evalbeam("run", config_file(tmp_path, empty, ["exact_match"], run_id=run_id), "--set", f"run_date=2026-11-{day}",
                 "--set", "input.allow_empty=true")
    later = evalbeam("run", scored_run(tmp_path, ["a", "b"], "r6", compare_with="previous"), "--set", "run_date=2026-11-04")
    assert "compared with r0:" in later.stdout, later.stdout


def scored_run(tmp_path, ids, run_id, name="outcomes", **extra):
    data = jsonl(tmp_path / f"{run_id}.jsonl", [{"id": i, "response": "a", "reference": "a"} for i in ids])
    return config_file(tmp_path, data, ["exact_match"], run_id=run_id, name=name, **extra)


@pytest.mark.slow
def test_compare_refuses_what_pairs_too_little_or_another_eval(tmp_path):
    out = tmp_path / "out"
    evalbeam("run", scored_run(tmp_path, ["a0", "a1", "a2", "a3"], "base"))
    evalbeam("run", scored_run(tmp_path, ["b0", "b1", "b2", "b3"], "disjoint"))
    evalbeam("run", scored_run(tmp_path, ["a0", "a1", "a2", "a3"], "other_eval", name="other"))

    none = evalbeam("compare", "base", "disjoint", "--parquet", out, check=False)
    assert none.returncode == 2, none.stderr
    assert none.stderr.splitlines() == [
        "evalbeam: compare: disjoint vs base: metric exact_match: 4 of the base's 4 instance(s) (100%) are missing "
        "from the run (4) or have no valid score in it (0), more than --max-missing 0.05 allows"]
    # the base's cases all gone: allowing them to be still leaves nothing paired
    few = evalbeam("compare", "base", "disjoint", "--max-missing", "100%", "--parquet", out, check=False)
    assert few.returncode == 2 and few.stderr.splitlines() == [
        "evalbeam: compare: disjoint vs base: metric exact_match: pairs 0 instance(s), fewer than 2 (--min-paired): "
        "4 only in base, 4 only in run, 0 with an error in either"]
    assert evalbeam("compare", "base", "disjoint", "--min-paired", "0", "--max-missing", "1", "--parquet",
                    out).returncode == 0
    listed = evalbeam("runs", "--parquet", out).stdout
    assert "vs base: NOTHING PAIRED for exact_match" in listed and "no change flagged" not in listed

    other = evalbeam("compare", "base", "other_eval", "--parquet", out, check=False)
    assert other.returncode == 2
    assert other.stderr.splitlines() == [
        "evalbeam: run other_eval is of eval 'other', base run base of eval 'outcomes': runs of different evals "
        "are not compared (--allow-different-evals to compare them anyway)"]
    assert evalbeam("compare", "base", "other_eval", "--allow-different-evals", "--parquet", out).returncode == 0


@pytest.mark.slow
def test_compare_with_in_a_run_gates_the_same_way(tmp_path):
    evalbeam("run", scored_run(tmp_path, ["a0", "a1", "a2", "a3"], "base"))
    evalbeam("run", scored_run(tmp_path, ["a0", "a1"], "other_eval", name="other"))
    disjoint = evalbeam("run", scored_run(tmp_path, ["b0", "b1", "b2"], "r2", compare_with="base"), check=False)
    assert disjoint.returncode == 2
    assert disjoint.stderr.splitlines()[-1] == (
        "evalbeam: compare: r2 vs base: metric exact_match: 4 of the base's 4 instance(s) (100%) are missing from "
        "the run (4) or have no valid score in it (0), more than --max-missing 0.05 allows")
    other = evalbeam("run", scored_run(tmp_path, ["a0", "a1"], "r3", compare_with="other_eval"), check=False)
    assert other.returncode == 2 and not (tmp_path / "out" / "r3").exists()
    assert other.stderr.splitlines() == [
        "evalbeam: compare_with: run r3 is of eval 'outcomes', base run other_eval of eval 'other': runs of different "
        "evals are not compared (--allow-different-evals to compare them anyway)"]
    allowed = evalbeam("run", scored_run(tmp_path, ["a0", "a1"], "r4", compare_with="other_eval"),
                       "--allow-different-evals")
    assert "compared with other_eval" in allowed.stdout


# ------------------------------------------------ 3. a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A real 400 KiB filesystem (a tmpfs: CI runs as root)."""
    with helpers.small_disk(tmp_path, "400k") as disk:
        yield disk


@pytest.mark.slow
def test_a_full_disk_ends_the_run_with_120_and_one_line_leaving_the_previous_output(tmp_path, small_disk):
    out = small_disk / "out"
    small = jsonl(tmp_path / "small.jsonl", [{"id": f"s{i}", "response": "a", "reference": "a"} for i in range(3)])
    config = config_file(tmp_path, small, ["exact_match"], run_id="b1", output=out)
    evalbeam("run", config)
    before = sorted(r["instance_id"] for r in table(out / "b1", "instances"))
    files_before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    rng = random.Random(1)
    big = jsonl(tmp_path / "big.jsonl", [
        {"id": f"c{i}", "response": " ".join(str(rng.random()) for _ in range(60)), "reference": "x"}
        for i in range(600)])  # some 1.4 MB of text: its tables do not fit
    config.write_text(config.read_text().replace(str(small), str(big)))
    full = evalbeam("run", config, check=False, process=True)  # a full disk: the process ends with 120
    assert full.returncode == 120, full.stderr
    assert "Traceback" not in full.stderr and "ERROR" not in full.stderr
    assert full.stderr.splitlines()[-1] == (
        f"evalbeam: could not write the output under {out}: [Errno 28] No space left on device "
        "(in step Write/Write_instances/WriteFiles); this run's partial files were removed and the previous output of "
        "run_id b1, if any, is as it was")
    # the previous output of b1, whole; nothing of the failed attempt left
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == files_before
    assert sorted(r["instance_id"] for r in table(out / "b1", "instances")) == before
    # the next run that fits succeeds
    config.write_text(config.read_text().replace(str(big), str(small)))
    jsonl(small, [{"id": f"t{i}", "response": "a", "reference": "a"} for i in range(4)])
    evalbeam("run", config)
    assert sorted(r["instance_id"] for r in table(out / "b1", "instances")) == ["t0", "t1", "t2", "t3"]


# ------------------------------------------------ 4. many slice values


@pytest.mark.slow
def test_many_slice_values_are_bounded_in_the_summary_and_on_the_terminal(tmp_path):
    """The cap is input.max_slice_values (default 1,000; a constant before issue 32, item 8)."""
    from evalbeam.configs import EvalConfig
    from evalbeam.metrics.statistics.summary import MAX_SLICE_VALUES as DEFAULT  # the transforms' default, the config's too

    assert EvalConfig.model_fields["input"].annotation.model_fields["max_slice_values"].default == DEFAULT == 1000
    MAX_SLICE_VALUES = 40
    n = MAX_SLICE_VALUES + 50
    data = jsonl(tmp_path / "d.jsonl", [{"id": f"c{i}", "response": "a", "reference": "a" if i % 4 else "b",
                                         "user": f"u{i:05d}", "ds": "x" if i % 2 else "y"} for i in range(n)])
    config = config_file(tmp_path, data, ["exact_match"], input={"uri": str(data), "id_column": "id",
                                                                 "slice_columns": ["user", "ds"],
                                                                 "max_slice_values": MAX_SLICE_VALUES})
    result = evalbeam("run", config)
    summary = {s["slice"]: s for s in table(tmp_path / "out" / "r1", "summary")}
    users = sorted(name for name in summary if name.startswith("user=u"))
    # every slice has one instance: the first MAX_SLICE_VALUES by name are kept, the rest are one slice
    assert users == [f"user=u{i:05d}" for i in range(MAX_SLICE_VALUES)]
    other = summary["user=(other)"]
    assert (other["row_count"], other["valid_count"]) == (50, 50)
    assert other["mean"] == pytest.approx(sum(1.0 if i % 4 else 0.0 for i in range(MAX_SLICE_VALUES, n)) / 50)
    assert (summary["ds=x"]["row_count"], summary["ds=y"]["row_count"], summary["overall"]["row_count"]) == (
        n // 2, n - n // 2, n)
    assert summary["overall"]["mean"] == pytest.approx(sum(1.0 if i % 4 else 0.0 for i in range(n)) / n)
    assert f"slice column 'user' has {n} values, more than input.max_slice_values ({MAX_SLICE_VALUES}): the " \
           f"{MAX_SLICE_VALUES} largest are summarized one slice each, the other 50 as one slice, user=(other)" \
           in result.stderr
    # the terminal: overall and the 20 largest slices of the metric, and where the rest are
    assert len(result.stdout.splitlines()) < 40
    assert f"({MAX_SLICE_VALUES + 3 - 20:,} more slice rows not shown, the largest 20 of each metric are: every slice " \
           f"is in the run's summary table in {tmp_path / 'out'})" in result.stdout


@pytest.mark.slow
def test_a_run_compared_with_itself_is_refused(tmp_path):
    """Issue 32, item 8: `compare p1 p1` was accepted (and flags nothing, whatever changed);
    compare_with naming the run's own run_id is refused likewise, before any work."""
    evalbeam("run", scored_run(tmp_path, ["a", "b"], "p1"))
    result = evalbeam("compare", "p1", "p1", "--parquet", tmp_path / "out", check=False)
    assert result.returncode == 2 and "run p1 is the base run itself: a run compared with itself can flag nothing" \
        in result.stderr, result.stderr
    result = evalbeam("run", scored_run(tmp_path, ["a", "b"], "p1", compare_with="p1"), check=False)
    assert result.returncode == 2 and "compare_with: p1 is this run's own run_id" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_full_disk_under_a_labelled_run_ends_it_with_120_and_keeps_the_previous_output(tmp_path, small_disk):
    """Issue 32, item 8: a full disk was not tried with the calibration table among the tables. A
    labelled run with a slice per row (a calibration row per slice) whose tables do not fit: status
    120, one line naming the step (whichever table's write meets the full disk first: here the
    instances'), nothing of the attempt left, the previous output and its calibration table whole."""
    import re

    out = small_disk / "out"
    rows = [{"id": f"s{i}", "response": "a", "reference": "a", "human": 1, "who": f"u{i}"} for i in range(3)]
    small = jsonl(tmp_path / "small.jsonl", rows)
    config = config_file(tmp_path, small, ["exact_match"], run_id="c1", output=out,
                         input={"uri": str(small), "id_column": "id", "slice_columns": ["who"],
                                "labels": {"exact_match": "human"}})
    evalbeam("run", config)
    assert len(table(out / "c1", "calibration")) == 4  # overall and three slices
    files_before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    rng = random.Random(2)
    big = jsonl(tmp_path / "big.jsonl", [
        {"id": f"c{i}", "response": " ".join(str(rng.random()) for _ in range(40)), "reference": "x",
         "human": i % 2, "who": f"user-{i:05d}-{rng.random()}"} for i in range(900)])
    config.write_text(config.read_text().replace(str(small), str(big)))
    full = evalbeam("run", config, check=False, process=True)  # a full disk: the process ends with 120
    assert full.returncode == 120, full.stdout + full.stderr
    assert "Traceback" not in full.stderr
    assert re.fullmatch(rf"evalbeam: could not write the output under {re.escape(str(out))}: \[Errno 28\] No space left "
                        r"on device \(in step [\w/]+\); this run's partial files were removed and the previous output "
                        r"of run_id c1, if any, is as it was", full.stderr.splitlines()[-1]), full.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == files_before
    assert len(table(out / "c1", "calibration")) == 4
