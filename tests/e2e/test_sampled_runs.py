"""Evaluating a seeded, stable sample (`input.sample`): which cases are in is decided by their
identity and the seed alone, so nights pair; the summary says its estimates are over the sample,
with each slice's population beside them; a judge budget (judge.max_calls) picks the rate, which
`evalbeam plan` shows and the run keeps to."""
from __future__ import annotations

import hashlib
import json
import random

import pytest
import yaml

from tests.helpers import evalbeam, table
from tests.metrics.judge.test_judge import KEY
from tests.servers.judge_server import JudgeServer


def place(seed: int, case: str) -> float:
    """A case's place in [0, 1) for a seed, as docs/configuration.md defines it: the first 8 bytes of
    SHA-256 of the seed, a NUL and the case's id, big-endian, over 2**64."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{case}".encode()).digest()[:8], "big") / 2 ** 64


def rows(n: int, night: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    topics = ["billing"] * 10 + ["login"] * 5 + ["other"] * 2
    out = []
    for i in range(n):
        reference = f"answer {i % 7}"
        # the same questions every night; the answers change from night to night
        response = reference if rng.random() < 0.5 + 0.1 * night else f"answer {(i + night) % 5}"
        out.append({"id": f"case-{i}", "prompt": f"question {i}", "reference": reference, "response": response,
                    "topic": topics[i % len(topics)]})
    return out


def config(tmp_path, name: str, data, sample: dict, **extra) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "sampled", "run_id": name,
        "input": {"uri": str(data), "slice_columns": ["topic"], "sample": sample, **extra.pop("input", {})},
        "metrics": extra.pop("metrics", ["exact_match"]), "output": {"parquet": str(tmp_path / "out")}, **extra}))
    return str(path)


def write(path, items) -> None:
    path.write_text("\n".join(json.dumps(r) for r in items) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("ids", ["id_column", "inputs"])
def test_a_rate_samples_the_same_cases_every_night_and_compare_pairs_them(tmp_path, ids):
    """rate 0.3, seed 5, over 200 cases, two nights whose answers differ: the cases in are those whose
    place is below 0.3 (with input.id_column, their ids'; without, their inputs' hashes: the same
    both nights, as the answers are no part of them); `evalbeam compare` pairs every one of them."""
    extra = {"input": {"id_column": "id"}} if ids == "id_column" else {}
    for night in (1, 2):
        data = tmp_path / f"night{night}.jsonl"
        write(data, rows(200, night))
        evalbeam("run", config(tmp_path, f"n{night}", data, {"rate": 0.3, "seed": 5}, **dict(extra)))
    sampled = {night: {r["instance_id"] for r in table(tmp_path / "out" / f"n{night}", "instances")}
               for night in (1, 2)}
    assert sampled[1] == sampled[2] and 40 < len(sampled[1]) < 80
    if ids == "id_column":
        assert sampled[1] == {f"case-{i}" for i in range(200) if place(5, f"case-{i}") < 0.3}
    run = table(tmp_path / "out" / "n2", "runs")[0]
    assert json.loads(run["sample"]) == {"rate": 0.3, "seed": 5, "population": 200, "sampled": len(sampled[2])}
    # read = scored + dead-lettered over the sample; the rest of the lines were read and skipped
    assert (run["read_count"], run["scored_count"], run["dead_letter_count"]) == (len(sampled[2]), len(sampled[2]), 0)
    assert run["lines_read"] == 200 == run["lines_scored"] + run["lines_skipped"]
    summary = {r["slice"]: r for r in table(tmp_path / "out" / "n2", "summary")}
    assert summary["overall"]["population_count"] == 200 and summary["overall"]["row_count"] == len(sampled[2])
    assert summary["topic=login"]["population_count"] == sum(1 for i in range(200) if i % 17 in range(10, 15))
    shown = evalbeam("show", "n2", "--parquet", str(tmp_path / "out")).stdout
    assert f"input.sample (rate 0.3, seed 5): {len(sampled[2])} of 200 cases evaluated" in shown
    compared = evalbeam("compare", "n1", "n2", "--parquet", str(tmp_path / "out"), "--json", check=False)
    overall = next(r for r in json.loads(compared.stdout)["comparisons"] if r["slice"] == "overall")
    assert overall["n_paired"] == len(sampled[1])


@pytest.mark.slow
def test_per_slice_takes_the_cases_of_smallest_place_in_each_slice(tmp_path):
    """per_slice 3 over slices of 30, 14 and 4 cases (a local run: the cases wait for the thresholds on
    disk): 3 of each, those of smallest place (past 10 a slice, a callable CombinePerKey compacting its
    buffer took more); per_slice 10: 10, 10 and all 4."""
    data = tmp_path / "data.jsonl"
    items = rows(48, 1)
    write(data, items)
    evalbeam("run", config(tmp_path, "p1", data, {"per_slice": 3, "seed": 11}, input={"id_column": "id"}))
    got = {r["instance_id"] for r in table(tmp_path / "out" / "p1", "instances")}
    want = set()
    for topic in ("billing", "login", "other"):
        ids = sorted((place(11, r["id"]), r["id"]) for r in items if r["topic"] == topic)
        want |= {i for _, i in ids[:3]}
    assert got == want and len(got) == 9
    run = table(tmp_path / "out" / "p1", "runs")[0]
    assert json.loads(run["sample"]) == {"per_slice": 3, "seed": 11, "population": 48, "sampled": 9}
    evalbeam("run", config(tmp_path, "p2", data, {"per_slice": 10, "seed": 11}, input={"id_column": "id"}))
    per_topic = {r["slice"]: (r["row_count"], r["population_count"]) for r in table(tmp_path / "out" / "p2", "summary")}
    assert (per_topic["topic=billing"], per_topic["topic=login"], per_topic["topic=other"]) == ((10, 30), (10, 14), (4, 4))


@pytest.mark.slow
def test_a_judge_budget_picks_the_rate_plan_shows_it_and_the_run_keeps_to_it(tmp_path, monkeypatch):
    """judge.max_calls 30 over 40 cases of a judge metric judged twice each (sampling_count 2): the
    15 cases of smallest place fit; `plan` shows the rate that picks them and counts their
    judgments; the run asks for those 30 and no more."""
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    data = tmp_path / "data.jsonl"
    items = [{"id": f"q{i}", "prompt": f"Say hello number {i}", "response": f"Hello {i}! #score=4",
              "topic": "greeting"} for i in range(40)]
    write(data, items)
    order = sorted(items, key=lambda r: place(3, r["id"]))
    want = {r["id"] for r in order[:15]}
    with JudgeServer() as server:
        path = config(tmp_path, "b1", data, {"seed": 3}, input={"id_column": "id"}, metrics=["fluency"],
                      judge={"base_url": server.url, "requests_per_minute": 6000, "max_calls": 30, "sampling_count": 2})
        planned = json.loads(evalbeam("plan", path, "--json").stdout)
        assert planned["sample"] == {"max_calls": 30, "seed": 3, "population": 40, "sampled": 15,
                                     "rate": place(3, order[14]["id"])}
        assert planned["calls"] == 30 and server.stats.requests == 0
        shown = evalbeam("plan", path).stdout
        assert f"input.sample (judge.max_calls 30 picks rate {place(3, order[14]['id']):.4g}, seed 3): 15 of 40" in shown
        evalbeam("run", path)
        run = table(tmp_path / "out" / "b1", "runs")[0]
        assert run["judge_requests"] == 30 and server.stats.accepted == 30
    assert {r["instance_id"] for r in table(tmp_path / "out" / "b1", "instances")} == want


def test_sample_settings_that_cannot_work_are_refused_naming_the_field(tmp_path):
    data = tmp_path / "data.jsonl"
    write(data, rows(5, 1))
    for sample, extra, message in (
            ({"rate": 0.2, "per_slice": 3}, {}, "input.sample: give rate or per_slice, not both"),
            ({"seed": 1}, {}, "input.sample: give rate, per_slice, or a judge budget (judge.max_calls)"),
            ({"rate": 1.5}, {}, "input.sample.rate"),
            ({"rate": 0.5}, {"judge": {"max_calls": 10}}, "judge.max_calls picks input.sample's rate: give the budget"),
            ({"seed": 1}, {"judge": {"max_calls": 10}}, "judge.max_calls: this config has no judge metric")):
        result = evalbeam("validate", config(tmp_path, "bad", data, sample, **extra), check=False)
        assert result.returncode == 2 and message in result.stderr, (sample, result.stderr)


@pytest.mark.slow
def test_a_sample_of_traces_is_taken_by_conversation_id(tmp_path):
    """OpenTelemetry traces (real ADK spans cloned into 30 conversations): a case is a conversation,
    in the sample by its id's place; the spans of those left out are read and counted as skipped."""
    from tests.e2e.test_nightly_traces import Traces, write as write_spans

    make = Traces(seed=9)
    folder = tmp_path / "traces"
    folder.mkdir()
    names = [f"conv-{i}" for i in range(30)]
    spans = [s for i, name in enumerate(names) for trace in make.conversation(name, "s_two", [10**18, 10**18 + i])
             for s in trace]
    write_spans(folder / "spans.jsonl", spans)
    path = tmp_path / "otel.yaml"
    path.write_text(yaml.safe_dump({
        "name": "sampled-traces", "run_id": "t1",
        "input": {"uri": str(folder / "*.jsonl"), "format": "otel_traces", "otel": {"group_by": "conversation"},
                  "sample": {"rate": 0.5, "seed": 2}},
        "metrics": ["failure", "tool_call_count_v1"], "output": {"parquet": str(tmp_path / "out")}}))
    evalbeam("run", str(path))
    got = {r["instance_id"] for r in table(tmp_path / "out" / "t1", "instances")}
    assert got == {n for n in names if place(2, n) < 0.5} and 5 < len(got) < 25
    run = table(tmp_path / "out" / "t1", "runs")[0]
    assert json.loads(run["sample"])["population"] == 30
    assert run["lines_read"] == len(spans) == run["lines_scored"] + run["lines_skipped"]
    assert run["lines_scored"] == len(spans) * len(got) // 30
