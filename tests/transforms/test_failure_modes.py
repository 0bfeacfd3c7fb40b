"""Failure modes in real runs (in-process, DirectRunner) against the local judge
stand-in, through the real google-genai client: planted failures whose modes the
markers script (#mode=ID), counted per mode and slice and checked against a direct
computation; a judge answering an unknown mode, junk, or failing; a re-run from the
judge cache making no classification call."""
import json
import re
import random

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from evalbeam.configs import load_config
from evalbeam.metrics.taxonomy import OTHER, TOOL_USE
from evalbeam.pipelines.evaluate import run
from evalbeam.pipelines.plan import plan
from tests.helpers import table
from tests.servers.judge_server import JudgeServer

KEY = "AIzaSy-test-key-failure-modes-0123456"


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def planted_rows(n=60, seed=3):
    """Rows of two teams; a failed exact_match plants its mode in the response (#mode=...)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        team = rng.choice(["billing", "shipping"])
        if rng.random() < 0.3:
            rows.append({"id": f"i{i}", "team": team, "prompt": f"q{i}", "response": f"a{i}", "reference": f"a{i}"})
            continue
        mode = rng.choice(["wrong_tool", "bad_arguments", "bad_arguments", "tool_not_called"])
        rows.append({"id": f"i{i}", "team": team, "prompt": f"q{i}", "response": f"wrong {i} #mode={mode}",
                     "reference": f"a{i}"})
    # the judge answers a mode outside the taxonomy, junk every time, or fails with 503s
    rows += [{"id": "unknown", "team": "billing", "prompt": "q", "response": "x #mode=cosmic_rays", "reference": "y"},
             {"id": "junk", "team": "billing", "prompt": "q", "response": "x #malformed=99", "reference": "y"},
             {"id": "down", "team": "shipping", "prompt": "q", "response": "x #fail", "reference": "y"}]
    return rows


def write_config(tmp_path, rows, server_url, run_id, **extra):
    data = tmp_path / f"{run_id}.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = {
        "name": "failmodes", "run_id": run_id,
        "input": {"uri": str(data), "id_column": "id", "slice_columns": ["team"]},
        "metrics": [{"name": "exact_match", "threshold": 1.0}],
        "failure_modes": {"metrics": ["exact_match"], "taxonomy": "tool_use"},
        "judge": {"base_url": server_url, "requests_per_minute": 6000, "max_attempts": 3, "timeout_seconds": 10,
                  "hedge_share": 0},
        "output": {"parquet": str(tmp_path / "out")},
    }
    config.update(extra)
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_config(path):
    run(load_config(path), PipelineOptions([]))


def expected_modes(rows):
    """(instance_id, team) -> the mode it must be counted under, None when unclassified."""
    out = {}
    for r in rows:
        if r["response"] == r["reference"]:
            continue
        if "#fail" in r["response"] or "#malformed" in r["response"]:
            out[(r["id"], r["team"])] = None
            continue
        mode = r["response"].split("#mode=")[1]
        out[(r["id"], r["team"])] = mode if mode in TOOL_USE.ids else OTHER
    return out


@pytest.mark.slow
def test_planted_failures_counted_per_mode_and_slice_and_a_cached_rerun(tmp_path, api_key):
    rows = planted_rows()
    expected = expected_modes(rows)
    with JudgeServer() as server:
        planned = {r["metric"]: r for r in plan(load_config(write_config(tmp_path, rows, server.url, "f1")))["metrics"]}
        assert server.stats.requests == 0
        # exact: the computation metric is scored offline, its failures' requests built as the run builds them
        counted = planned["exact_match:failure_modes"]
        assert (counted["asked"], counted["distinct"], counted["to_call"], counted["upper_bound"]) == (
            len(expected), len(expected), len(expected), False)
        run_config(write_config(tmp_path, rows, server.url, "f1"))
        first_calls = server.stats.requests
        assert server.stats.stages["failure_mode"] == len(expected) - 1 + 2  # #fail gets no answer; junk 3 tries
    out = tmp_path / "out"
    assignments = table(out / "f1", "failure_assignments")
    # one row per failure, none lost
    assert sorted((a["instance_id"], a["team"]) for a in assignments) == sorted(expected)
    by_id = {a["instance_id"]: a for a in assignments}
    for (i, _), mode in expected.items():
        assert by_id[i]["mode"] == mode, i
        assert by_id[i]["rubric_id"] is None and by_id[i]["taxonomy_digest"] == TOOL_USE.digest
    assert by_id["unknown"]["judge_mode"] == "cosmic_rays" and by_id["unknown"]["rationale"] == "The case shows cosmic_rays."
    assert by_id["junk"]["error"].startswith("judge failed after 3 attempts; last: invalid judge output")
    assert by_id["down"]["error"].startswith("judge failed after 3 attempts; last: HTTP 503")

    modes = table(out / "f1", "failure_modes")
    got = {(m["slice"], m["mode"]): m for m in modes}
    for slice_name, keep in (("overall", lambda t: True), ("team=billing", lambda t: t == "billing"),
                             ("team=shipping", lambda t: t == "shipping")):
        in_slice = {k: v for k, v in expected.items() if keep(k[1])}
        unclassified = sum(v is None for v in in_slice.values())
        for mode in TOOL_USE.ids:
            ids = sorted(i for (i, _), v in in_slice.items() if v == mode)
            row = got[(slice_name, mode)]
            assert (row["count"], row["failures"], row["unclassified"]) == (len(ids), len(in_slice), unclassified)
            assert row["share"] == pytest.approx(len(ids) / len(in_slice))
            assert set(json.loads(row["examples"])) <= set(ids) and len(json.loads(row["examples"])) == min(5, len(ids))
            if 0 < len(ids) < len(in_slice):
                assert row["share_ci_low"] <= row["share"] <= row["share_ci_high"]
        assert sum(got[(slice_name, m)]["count"] for m in TOOL_USE.ids) + unclassified == len(in_slice)

    [runs] = table(out / "f1", "runs")
    usage = json.loads(runs["judge_usage"])["exact_match:failure_modes"]
    assert usage["requests"] == len(expected) and usage["failures"] == 2 and usage["cache_hits"] == 0
    assert runs["judge_calls"] == first_calls

    # a re-run from the judge cache: only the two failed classifications are asked again
    with JudgeServer() as server:
        cached = {"base_url": server.url, "cache": [str(out / "f1" / "judge_cache")]}
        planned = plan(load_config(write_config(tmp_path, rows, server.url, "f2", judge=cached)))
        assert planned["metrics"][0]["to_call"] == 2 and planned["calls"] == 2
        run_config(write_config(tmp_path, rows, server.url, "f2",
                                judge={"base_url": server.url, "requests_per_minute": 6000, "max_attempts": 3,
                                       "timeout_seconds": 10, "hedge_share": 0, "cache": [str(out / "f1" / "judge_cache")]}))
        assert server.stats.requests == 6
    [runs] = table(out / "f2", "runs")
    usage = json.loads(runs["judge_usage"])["exact_match:failure_modes"]
    assert usage["cache_hits"] == len(expected) - 2
    assert {(m["slice"], m["mode"], m["count"]) for m in table(out / "f2", "failure_modes")} == {
        (m["slice"], m["mode"], m["count"]) for m in modes}

    # without the failing judge: nothing asked at all
    clean = [r for r in rows if r["id"] not in ("junk", "down")]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, clean, server.url, "f3",
                                judge={"base_url": server.url, "cache": [str(out / "f1" / "judge_cache")]}))
        assert server.stats.requests == 0
    assert len(table(out / "f3", "failure_assignments")) == len(expected) - 2


@pytest.mark.emulators
def test_failed_rubrics_classified_one_by_one_into_bigquery_and_its_latest_view(cloud, tmp_path, api_key):
    """A rubric metric's failures are its rubrics not met (rubric_id set), each classified
    apart; the tables and the latest_failure_modes view in BigQuery hold the Parquet rows."""
    from evalbeam.transforms.local_cloud import bigquery_client
    from tests.emulators.control import PROJECT

    dataset = f"{PROJECT}.evals_failure_modes"
    rows = [{"id": "a", "team": "billing", "prompt": "P #rubrics=3", "response": "ra #verdicts=ynn #mode=wrong_tool"},
            {"id": "b", "team": "billing", "prompt": "P #rubrics=3", "response": "rb #verdicts=yyy"},
            {"id": "c", "team": "shipping", "prompt": "P #rubrics=3", "response": "rc #verdicts=nyy #mode=oops"}]
    with JudgeServer() as server:
        path = write_config(tmp_path, rows, server.url, "g1",
                            metrics=[{"name": "evalbeam_general_quality", "threshold": 1.0}],
                            failure_modes={"metrics": ["evalbeam_general_quality"], "taxonomy": "tool_use"},
                            output={"parquet": str(tmp_path / "out"), "bigquery": dataset})
        run_config(path)
        assert server.stats.stages["failure_mode"] == 3  # a's r2 and r3, c's r1
    got = sorted((a["instance_id"], a["rubric_id"], a["mode"], a["judge_mode"], a["team"])
                 for a in table(tmp_path / "out" / "g1", "failure_assignments"))
    assert got == [("a", "r2", "wrong_tool", "wrong_tool", "billing"), ("a", "r3", "wrong_tool", "wrong_tool", "billing"),
                   ("c", "r1", OTHER, "oops", "shipping")]
    client = bigquery_client(PROJECT)
    in_bq = sorted(tuple(r.values()) for r in client.query(
        f"SELECT instance_id, rubric_id, mode, judge_mode, team FROM `{dataset}.failure_assignments`").result())
    assert in_bq == got
    view = {(r["slice"], r["mode"]): (r["name"], r["count"], r["failures"]) for r in client.query(
        f"SELECT name, slice, mode, count, failures FROM `{dataset}.latest_failure_modes` WHERE count > 0").result()}
    assert view == {("overall", "wrong_tool"): ("failmodes", 2, 3), ("overall", OTHER): ("failmodes", 1, 3),
                    ("team=billing", "wrong_tool"): ("failmodes", 2, 2), ("team=shipping", OTHER): ("failmodes", 1, 1)}


@pytest.mark.slow
def test_discovered_taxonomy_is_stored_pinned_and_reused_by_digest(tmp_path, api_key):
    from evalbeam.configs import ConfigError

    rows = [r for r in planted_rows(40, seed=5) if r["id"] not in ("junk", "down")]
    expected = {i: m for (i, _), m in expected_modes(rows).items()}
    discover = {"metrics": ["exact_match"], "taxonomy": "discover", "discover_sample": 200, "seed": 1}
    out = tmp_path / "out"
    with JudgeServer() as server:
        run_config(write_config(tmp_path, rows, server.url, "d1", failure_modes=discover))
        assert server.stats.stages["taxonomy"] == 1  # one discovery, from the sample
    [tax] = table(out / "d1", "taxonomies")
    modes = [m["id"] for m in json.loads(tax["modes"])]
    # the stand-in proposes the modes the sampled failures plant, in order, and other is added
    planted = {r["response"].split("#mode=")[1] for r in rows if "#mode=" in r["response"]}
    assert set(modes) == planted | {OTHER} and "cosmic_rays" in modes
    assert (tax["origin"], tax["discovered_in"], tax["sample_size"], tax["seed"]) == ("discovered", "d1", 200, 1)
    got = {a["instance_id"]: a["mode"] for a in table(out / "d1", "failure_assignments")}
    # cosmic_rays is a mode of this taxonomy: counted as itself, not as other
    assert got == {i: ("cosmic_rays" if i == "unknown" else m) for i, m in expected.items()}
    assert {m["taxonomy_digest"] for m in table(out / "d1", "failure_modes")} == {tax["digest"]}

    # the next night: pinned by taxonomies_from, with the cache: no discovery, no call at all
    pinned = {**discover, "taxonomies_from": [str(out / "d1" / "taxonomies")]}
    with JudgeServer() as server:
        path = write_config(tmp_path, rows, server.url, "d2", failure_modes=pinned,
                            judge={"base_url": server.url, "cache": [str(out / "d1" / "judge_cache")]})
        assert plan(load_config(path))["calls"] == 0
        run_config(path)
        assert server.stats.requests == 0
    [again] = table(out / "d2", "taxonomies")
    assert (again["digest"], again["discovered_in"], again["sample_size"]) == (tax["digest"], "d1", None)
    assert {a["instance_id"]: a["mode"] for a in table(out / "d2", "failure_assignments")} == got
    # a table holding no discovered taxonomy (a built-in one's run) is refused, never re-discovered in silence
    with JudgeServer() as server:
        run_config(write_config(tmp_path, rows, server.url, "b1"))
        with pytest.raises(ConfigError, match="no discovered taxonomy in .*b1.*does not discover a new one"):
            run_config(write_config(tmp_path, rows, server.url, "d3", failure_modes={
                **discover, "taxonomies_from": [str(out / "b1" / "taxonomies")]}))
        assert server.stats.stages.get("taxonomy", 0) == 0


@pytest.mark.slow
def test_the_discovery_sample_is_seeded_and_a_failed_discovery_loses_no_row(tmp_path, api_key):
    rows = [r for r in planted_rows(40, seed=5) if r["id"] not in ("junk", "down")]
    prompts = []
    for run_id, seed in (("s1", 1), ("s2", 1), ("s3", 2)):
        with JudgeServer() as server:
            run_config(write_config(tmp_path, rows, server.url, run_id, failure_modes={
                "metrics": ["exact_match"], "taxonomy": "discover", "discover_sample": 6, "seed": seed}))
            [prompt] = [p for p in server.stats.prompts if p.count("## Failure ") >= 1]
            prompts.append(prompt)
    assert prompts[0] == prompts[1] != prompts[2] and prompts[0].count("## Failure ") == 6
    # the judge fails the discovery: every failure keeps its row, with the error
    failing = rows + [{"id": "down", "team": "billing", "prompt": "q", "response": "x #fail", "reference": "y"}]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, failing, server.url, "s4", failure_modes={
            "metrics": ["exact_match"], "taxonomy": "discover"}))
        assert server.stats.stages.get("failure_mode", 0) == 0
    assignments = table(tmp_path / "out" / "s4", "failure_assignments")
    assert len(assignments) == len(expected_modes(failing))
    assert {a["error"].split(";")[0] for a in assignments} == {"taxonomy discovery failed: judge failed after 3 attempts"}


def shifted_rows(rows, share=0.6, seed=11):
    """The same instances, with a share of billing's wrong_tool failures now bad_arguments."""
    rng = random.Random(seed)
    out = []
    for r in rows:
        r = dict(r)
        if r["team"] == "billing" and "#mode=wrong_tool" in r["response"] and rng.random() < share:
            r["response"] = r["response"].replace("#mode=wrong_tool", "#mode=bad_arguments")
        out.append(r)
    return out


@pytest.mark.slow
def test_compare_says_which_modes_grew_per_slice_and_refuses_other_taxonomies(tmp_path, api_key):
    from scipy.stats import binomtest

    from evalbeam.pipelines.failure_mode_results import TaxonomiesDiffer, compare_failure_modes, failure_mode_rows
    from evalbeam.pipelines.reports.text import format_failure_modes
    from evalbeam.pipelines.results import ParquetResults
    from tests.helpers import evalbeam

    base = [r for r in planted_rows(120, seed=9) if r["id"] not in ("junk", "down")]
    for r in base:  # billing fails with wrong_tool more often
        if r["team"] == "billing" and "#mode=" in r["response"] and "cosmic" not in r["response"]:
            r["response"] = r["response"].split("#mode=")[0] + "#mode=wrong_tool"
    night = shifted_rows(base)
    with JudgeServer() as server:
        run_config(write_config(tmp_path, base, server.url, "c1"))
        run_config(write_config(tmp_path, night, server.url, "c2"))
        run_config(write_config(tmp_path, night, server.url, "c3", failure_modes={
            "metrics": ["exact_match"], "taxonomy": "discover"}))
    out = tmp_path / "out"
    results = ParquetResults(str(out))
    rows = {(r["slice"], r["mode"]): r for r in compare_failure_modes(results, "c1", "c2")}
    before, after = expected_modes(base), expected_modes(night)
    for slice_name, team in (("overall", None), ("team=billing", "billing"), ("team=shipping", "shipping")):
        for mode in ("wrong_tool", "bad_arguments"):
            had = {i for (i, t), m in before.items() if m == mode and team in (None, t)}
            has = {i for (i, t), m in after.items() if m == mode and team in (None, t)}
            r = rows[(slice_name, mode)]
            assert (r["base_count"], r["count"], r["grew_in"], r["shrank_in"]) == (
                len(had), len(has), len(has - had), len(had - has)), (slice_name, mode)
            n = len(has - had) + len(had - has)
            if n:
                assert r["p_value"] == pytest.approx(binomtest(len(has - had), n, 0.5).pvalue)
    moved = rows[("team=billing", "bad_arguments")]
    assert moved["grew"] and moved["grew_in"] >= 10 and rows[("team=billing", "wrong_tool")]["shrank"]
    assert not rows[("team=shipping", "bad_arguments")]["grew"]  # shipping was left alone
    assert rows[("overall", "bad_arguments")]["n_paired"] == len(night)

    with pytest.raises(TaxonomiesDiffer, match="different taxonomies .* Pin one taxonomy"):
        compare_failure_modes(results, "c1", "c3")
    shown = format_failure_modes(failure_mode_rows(results, "c2"))
    assert re.search(r"\nexact_match +team=billing +bad_arguments +\d+ +\d+ +0\.\d\d +\[", shown), shown

    # the command: the growth is flagged, and gates when asked
    gated = evalbeam("compare", "c1", "c2", "--parquet", out, "--fail-on-mode-growth", "bad_arguments", check=False)
    assert gated.returncode == 1 and "GREW" in gated.stdout and "2 gated failure mode growth(s) flagged" in gated.stdout  # overall and billing
    other = evalbeam("compare", "c1", "c3", "--parquet", out, "--fail-on-mode-growth", "any", check=False)
    assert other.returncode == 2 and "failure modes not compared: runs c1 and c3 classified failures into " \
                                      "different taxonomies" in other.stdout  # a gate that could not look fails
    assert "the failure modes of run(s) c3 could not be compared with c1's" in other.stderr
    ungated = evalbeam("compare", "c1", "c3", "--parquet", out, check=False)
    assert ungated.returncode == 0 and "failure modes not compared" in ungated.stdout
    show = evalbeam("show", "c2", "--parquet", out)
    assert "failure modes (top 3 per metric and slice" in show.stdout and "bad_arguments" in show.stdout


@pytest.mark.slow
def test_the_report_charts_modes_per_slice_linked_to_example_instances(tmp_path, api_key):
    import re

    from evalbeam.pipelines.reports.data import report_data
    from evalbeam.pipelines.reports.html import render
    from evalbeam.pipelines.results import ParquetResults

    rows = [r for r in planted_rows(30, seed=4) if r["id"] not in ("junk", "down")]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, rows, server.url, "p1"))
    results = ParquetResults(str(tmp_path / "out"))
    data = report_data(results, "p1")
    page = render(data)
    assert '<a href="#failure-modes">Failure modes</a>' in page and '<section id="failure-modes">' in page
    modes = {r["mode"] for r in table(tmp_path / "out" / "p1", "failure_modes") if r["count"]}
    assert {m for m in modes} == set(re.findall(r'<g id="mode-([a-z_]+)"', page))  # a bar series per mode
    links = set(re.findall(r'<a href="#(fm-[^"]+)"><code>', page))
    anchors = set(re.findall(r'<tr class="instance" id="(fm-[^"]+)">', page))
    # every example of the overall slice links to its instance, shown with the judge's rationale
    overall = {i for r in table(tmp_path / "out" / "p1", "failure_modes") if r["slice"] == "overall"
               for i in json.loads(r["examples"])}
    assert links == anchors and len(anchors) == len(overall) > 0
    assert "The case shows bad_arguments." in page or "The case shows wrong_tool." in page


@pytest.mark.slow
def test_an_agent_run_that_failed_is_a_failure_and_batch_mode_classifies_the_same(tmp_path, api_key):
    """inference.function raising on a case: its metric row's error is classified as a failure of
    the case (the agent's error in the prompt); the same run in judge batch mode (Gemini batch
    jobs at the stand-in) gives the same assignments."""
    from tests.servers.judge_server import Behaviour

    rows = [{"id": "ok", "prompt": "weather in paris", "reference": "WEATHER IN PARIS"},
            {"id": "miss", "prompt": "weather in oslo #mode=output_misused", "reference": "It is cold."},
            {"id": "boom", "prompt": "boom #mode=run_failed", "reference": "x"}]
    for r in rows:
        r["team"] = "billing"
    got = {}
    for mode, extra in (("online", {}), ("batch", {"mode": "batch", "batch_poll_seconds": 0.05,
                                                    "batch_poll_max_seconds": 0.1})):
        with JudgeServer(Behaviour(batch_seconds=0.2)) as server:
            run_config(write_config(tmp_path, rows, server.url, mode,
                                    inference={"function": "tests.inference_app:answer"},
                                    judge={"base_url": server.url, "hedge_share": 0, **extra}))
            prompts = [p for p in (server.stats.prompts if mode == "online" else server.stats.batch_prompts)
                       if "#mode=run_failed" in p]
            if mode == "batch":
                assert server.stats.batch_items >= 2 and server.stats.stages.get("failure_mode", 0) >= 2
        assert len(prompts) == 1 and "the app broke on 'boom #mode=run_failed'" in prompts[0]
        got[mode] = sorted((a["instance_id"], a["mode"], a["error"]) for a in table(tmp_path / "out" / mode,
                                                                                     "failure_assignments"))
    assert got["online"] == [("boom", "run_failed", None), ("miss", "output_misused", None)]
    assert got["batch"] == got["online"]


@pytest.mark.emulators
def test_dataflow_dry_run_builds_the_failure_modes_stage(cloud, monkeypatch, tmp_path):
    """The stage on the Dataflow submission path, offline: built into the job (the discovery,
    the classification through the judge layer's shards, the count), every DoFn and the count's
    CombineFn unpickling, the key nowhere in the job."""
    from apache_beam.internal import pickler
    from apache_beam.portability import common_urns, python_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from tests.emulators.control import BUCKET, PROJECT
    from evalbeam.transforms.local_cloud import storage_client

    secret = "AIzaSy-failure-modes-key-not-in-the-job"
    monkeypatch.setenv("GOOGLE_API_KEY", secret)
    storage_client(PROJECT).bucket(BUCKET).blob("fm/in/data.jsonl").upload_from_string(
        json.dumps({"id": "a", "team": "billing", "prompt": "p", "response": "x", "reference": "y"}) + "\n")
    path = write_config(tmp_path, [], "http://127.0.0.1:9", "dryfm",
                        failure_modes={"metrics": ["exact_match"], "taxonomy": "discover"},
                        output={"parquet": f"gs://{BUCKET}/fm/out"})
    config = load_config(path, [f"input.uri=gs://{BUCKET}/fm/in/*.jsonl"])
    options = PipelineOptions(["--runner=DataflowRunner", f"--project={PROJECT}", "--region=us-central1",
                               f"--temp_location=gs://{BUCKET}/tmp", "--dry_run=True"])
    _, result = run(config, options)
    proto = result.job.proto_pipeline
    names = {t.unique_name for t in proto.components.transforms.values()}
    for step in ("FailureModes/ClassifyFailures/Discover/AskJudge/CallJudge",
                 "FailureModes/ClassifyFailures/Classify/CallJudge", "FailureModes/ClassifyFailures/Count/CountModes",
                 "Write/Write_failure_assignments", "Write/Write_failure_modes", "Write/Write_taxonomies"):
        assert any(n.startswith(step) for n in names), step
    loaded = set()
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            if payload.do_fn.urn == python_urns.PICKLED_DOFN_INFO:
                loaded.add(type(pickler.loads(payload.do_fn.payload)[0]).__name__)
        if t.spec.urn == common_urns.composites.COMBINE_PER_KEY.urn:
            payload = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload)
            loaded.add(type(pickler.loads(payload.combine_fn.payload)).__name__)
    assert {"CallJudgeFn", "ModeCountsFn"} <= loaded, loaded
    assert secret not in result.job.json() and secret.encode() not in proto.SerializeToString()


@pytest.mark.slow
def test_the_example_config_classifies_every_failed_adk_criterion(tmp_path, api_key):
    """configs/failure_modes.yaml on the demo's agent conversations: one assignment per metric row
    that did not pass (failed ADK criteria), each agent case rendered with its tool calls; the
    counts reconcile with metric_results per metric and slice."""
    from evalbeam.metrics.taxonomy import TOOL_USE

    with JudgeServer() as server:
        config = load_config("configs/failure_modes.yaml", [f"judge.base_url={server.url}", "judge.hedge_share=0",
                                                             f"output.parquet={tmp_path / 'out'}", "run_id=ex1"])
        run(config, PipelineOptions([]))
        prompts = [p for p in server.stats.prompts if "# The failure modes to choose from" in p]
    out = tmp_path / "out" / "ex1"
    failed = {(r["instance_id"], r["metric"]) for r in table(out, "metric_results") if r["passed"] is False}
    assignments = table(out, "failure_assignments")
    assert sorted((a["instance_id"], a["metric"]) for a in assignments) == sorted(failed) and failed
    assert {a["mode"] for a in assignments} <= set(TOOL_USE.ids) and all(a["error"] is None for a in assignments)
    assert len(prompts) == len(failed) and any("tool_calls: [" in p for p in prompts)
    modes = table(out, "failure_modes")
    for metric in ("tool_trajectory_avg_score", "response_match_score"):
        for slice_name in {m["slice"] for m in modes if m["metric"] == metric}:
            rows = [m for m in modes if m["metric"] == metric and m["slice"] == slice_name]
            ids = {a["instance_id"] for a in assignments if a["metric"] == metric and (
                slice_name == "overall" or f"dataset={a['dataset']}" == slice_name)}
            assert sum(m["count"] for m in rows) == rows[0]["failures"] == len(ids)
