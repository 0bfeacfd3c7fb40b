"""`evalbeam generate` and a run of what it makes, against the local Gemini stand-in
(tests/servers/judge_server.py, which scripts scenario answers: `#dup`, `#near`, `#tool=`, `#empty`,
`#badplan`, `#fewer=`, `#malformed=`, `#fail`, `#unavailable_at=`) through the real google-genai client,
with google-adk's own models as the validator (tier `agent`: each test runs again in .agent/ when this
interpreter has no google-adk)."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import ROOT, evalbeam, in_agent_env, table

pytestmark = [pytest.mark.agent]
KEY = "generate-test-key-1234"
AGENT = {"name": "weather", "instruction": "You answer questions about the weather with your tool.",
         "tools": [{"name": "get_weather", "description": "the weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}
OWN = {"id": "hurried", "description": "A user in a hurry who answers in few words.",
       "behaviors": [{"name": "terse", "description": "short answers", "behavior_instructions": ["Be brief."],
                      "violation_rubrics": ["The user writes long messages."]}]}


def _write(tmp_path, name: str, scenarios: dict, judge: dict, **extra) -> str:
    config = {"name": name, "run_id": extra.pop("run_id", name), "scenarios": scenarios,
              "judge": {"max_attempts": 3, "timeout_seconds": 20, "requests_per_minute": 6000, **judge},
              "output": {"parquet": str(tmp_path / "out"), "eval_set": str(tmp_path / f"{name}.evalset.json")},
              **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


@pytest.mark.agent_rerun
def test_generate_keeps_checks_and_dead_letters_each_scenario_asked_and_adk_loads_the_set(tmp_path, monkeypatch,
                                                                                              request):
    """One grid through the stand-in's 429s (a quota with Retry-After), a 503, a malformed answer and a
    generation that fails after its retries: a row per scenario asked, each decision as scripted, the
    eval set loaded by ADK's own EvalSet model and read by evalbeam's ADK reader."""
    if in_agent_env(request):
        return
    from google.adk.evaluation.eval_set import EvalSet

    from evalbeam.metrics.scenarios import scenario_digest, set_digest
    from tests.servers.judge_server import Behaviour, JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    goals = ["plain forecast", "dup #dup=1", "near #near=1", "tool #tool=cancel_order", "empty #empty",
             "badplan #badplan", "fewer #fewer=2", "malformed #malformed=1", "fail #fail", "flaky #unavailable_at=1"]
    scenarios = {"description": AGENT, "goals": goals, "personas": ["NOVICE", OWN], "per_cell": 3, "seed": 7}
    with JudgeServer(Behaviour(quota=8, window_seconds=1.0)) as server:
        # max_attempts 6: a cell may meet the quota's 429s before its scripted failure (each 429 is an attempt)
        config = _write(tmp_path, "grid", scenarios, {"base_url": server.url, "max_attempts": 6})
        result = evalbeam("generate", config)
        assert server.stats.rate_limited > 0  # the quota answered 429 with Retry-After, and was waited out
    rows = table(tmp_path / "out" / "grid", "scenarios")
    assert len(rows) == len(goals) * 2 * 3  # a row per scenario asked, none lost
    by_goal = collections.defaultdict(list)
    for r in rows:
        by_goal[r["goal"]].append(r)
    decisions = {goal: collections.Counter(r["decision"] for r in rs) for goal, rs in by_goal.items()}
    assert decisions["plain-forecast"] == decisions["malformed-malformed-1"] == decisions["flaky-unavailable-at-1"] \
        == {"kept": 6}
    assert decisions["dup-dup-1"] == decisions["near-near-1"] == {"kept": 4, "near_duplicate": 2}
    for r in by_goal["dup-dup-1"] + by_goal["near-near-1"]:
        if r["decision"] == "near_duplicate":
            first = next(f for f in by_goal[r["goal"]] if f["persona"] == r["persona"] and f["position"] == 0)
            assert r["duplicate_of"] == first["eval_id"] and r["position"] == 2
            assert r["reason"].startswith(f"near-duplicate of {first['eval_id']}")
    reasons = {goal: sorted((r["position"], r["field"], r["reason"]) for r in rs if r["decision"] == "dead_letter")
               for goal, rs in by_goal.items()}
    assert [x[:2] for x in reasons["tool-tool-cancel-order"]] == [(0, "tools")] * 2
    assert reasons["tool-tool-cancel-order"][0][2] == \
        "names tool(s) the agent does not have: cancel_order (its tools: get_weather)"
    assert {x[2] for x in reasons["empty-empty"]} == {"conversation_plan is empty"}
    assert {x[1] for x in reasons["badplan-badplan"]} == {"conversation_scenario"}
    assert all(x[2].startswith("ADK's EvalCase refuses it: conversation_scenario.conversation_plan: Input should be "
                               "a valid string") for x in reasons["badplan-badplan"])
    assert [x[:2] for x in reasons["fewer-fewer-2"]] == [(1, "scenarios"), (1, "scenarios"), (2, "scenarios"),
                                                         (2, "scenarios")]
    assert reasons["fewer-fewer-2"][0][2] == "not generated: the generator returned 1 of the 3 scenarios asked"
    assert len(reasons["fail-fail"]) == 6
    assert all(x[2].startswith("generation failed: judge failed after 6 attempts; last: HTTP 503") for x in
               reasons["fail-fail"])
    assert KEY not in json.dumps([str(v) for r in rows for v in r.values()])

    kept = sorted(r["eval_id"] for r in rows if r["decision"] == "kept")
    eval_set = EvalSet.model_validate_json((tmp_path / "grid.evalset.json").read_text())  # ADK's own model loads it
    assert [c.eval_id for c in eval_set.eval_cases] == kept and eval_set.eval_set_id == "grid"
    personas = {c.conversation_scenario.user_persona.id for c in eval_set.eval_cases}
    assert personas == {"NOVICE", "hurried"}
    digest = set_digest(scenario_digest(json.loads(r["conversation_scenario"])) for r in rows if r["decision"] == "kept")
    assert f"set digest {digest}" in eval_set.description and f"scenario set digest {digest}" in result.stdout
    assert f"asked 60 = kept {len(kept)} + near-duplicate 4 + dead-lettered" in result.stdout
    coverage = [line.split() for line in result.stdout.splitlines() if line.startswith("  fewer-fewer-2")]
    assert coverage == [["fewer-fewer-2", "NOVICE", "typical", "3", "1", "1", "0", "2"],
                        ["fewer-fewer-2", "hurried", "typical", "3", "1", "1", "0", "2"]]

    [runs] = table(tmp_path / "out" / "grid", "runs")
    usage = json.loads(runs["judge_usage"])["scenarios:generation"]
    assert usage["requests"] == 20 and usage["failures"] == 2 and usage["rate_limited"] > 0
    assert usage["calls"] >= 20 + 2 * 5 + 2 + 2  # #fail's retries, #malformed's and #unavailable_at's second calls
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (len(kept), len(kept), 0)

    # evalbeam's own ADK reader reads the file as any eval set: every case a conversation_scenario case
    reread = tmp_path / "reread.yaml"
    reread.write_text(yaml.safe_dump({"name": "reread", "input": {"uri": str(tmp_path / "grid.evalset.json")},
                                      "inference": {"function": "tests.simulation_app:scripted_agent"},
                                      "metrics": ["tool_call_count_v1"], "output": {"parquet": str(tmp_path / "o2")}}))
    checked = evalbeam("validate", reread, check=False)
    assert f"{len(kept)} case(s) to score, 0 `run` would dead-letter" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.agent_rerun
def test_a_second_generation_with_the_cache_calls_nothing_and_writes_the_same_bytes_and_a_pinned_set_is_reused(
        tmp_path, monkeypatch, request):
    """Seeded and pinned: the same config with judge.cache makes no call and writes a byte-identical eval set;
    a later config naming the set's digest (scenarios.pinned_from) reuses it, calling nothing; a digest not
    there is refused in one line before any work."""
    if in_agent_env(request):
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    scenarios = {"agent": "tests.inference_agent:root_agent", "goals": ["ask for a forecast", "convert a unit"],
                 "difficulties": ["easy", {"id": "hard", "description": "the user leaves the city out at first"}],
                 "per_cell": 2, "seed": 3}
    with JudgeServer() as server:
        first = _write(tmp_path, "pin", scenarios, {"base_url": server.url}, run_id="pin1")
        [priced] = json.loads(evalbeam("plan", first, "--json").stdout)["metrics"]  # priced first, calling nothing
        assert (priced["metric"], priced["to_call"], priced["cached"]) == ("scenarios:generation", 8, 0)
        assert server.stats.requests == 0
        made = evalbeam("generate", first)
        calls = server.stats.requests
        assert calls == 2 * 2 * 2  # a request per cell (goals x ADK's default personas x difficulties)
        prompt = next(iter(server.stats.prompts))
        # the agent read from its ADK object: its instruction, and its tools as ADK declares them
        assert "Answer weather questions with the tools." in prompt and "- remember_city:" in prompt
        eval_set = (tmp_path / "pin.evalset.json").read_bytes()
        digest = made.stdout.split("scenario set digest ")[1].split()[0]

        cached = _write(tmp_path, "pin", scenarios, {"base_url": server.url, "cache": str(tmp_path / "out" / "pin1" /
                                                                                          "judge_cache")},
                        run_id="pin2")
        [priced] = json.loads(evalbeam("plan", cached, "--json").stdout)["metrics"]
        assert (priced["to_call"], priced["cached"]) == (0, 8)  # the plan counts the calls the run then makes
        evalbeam("generate", cached)
        assert server.stats.requests == calls  # no call
        assert (tmp_path / "pin.evalset.json").read_bytes() == eval_set
        second = {(r["eval_id"], r["digest"], r["decision"]) for r in table(tmp_path / "out" / "pin2", "scenarios")}
        assert second == {(r["eval_id"], r["digest"], r["decision"]) for r in table(tmp_path / "out" / "pin1",
                                                                                      "scenarios")}

        pinned = {"pinned_from": str(tmp_path / "out"), "digest": digest}
        third = _write(tmp_path, "pin", pinned, {"base_url": server.url}, run_id="pin3")
        (tmp_path / "pin.evalset.json").unlink()
        reused = evalbeam("generate", third)
        assert server.stats.requests == calls
        assert (tmp_path / "pin.evalset.json").read_bytes() == eval_set and f"scenario set digest {digest}" in reused.stdout

        wrong = _write(tmp_path, "pin", {**pinned, "digest": "0" * 64}, {"base_url": server.url}, run_id="pin4")
        refused = evalbeam("generate", wrong, check=False)
        assert refused.returncode == 2
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("evalbeam: scenarios.pinned_from: no scenario set of digest " + "0" * 64) and digest in line
        assert server.stats.requests == calls


@pytest.mark.agent_rerun
def test_batch_mode_generates_the_same_set_at_the_batch_price(tmp_path, monkeypatch, request):
    """judge.mode: batch sends the cells' requests as Gemini batch jobs (google-genai's client.batches, against
    the stand-in): the same scenarios as online (the answers are the same), their tokens priced at the batch
    price."""
    if in_agent_env(request):
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    scenarios = {"description": AGENT, "goals": ["a forecast", "a dup #dup=1"], "per_cell": 3}
    prices = {"gemini-2.5-flash": {"input_per_million": 1.0, "output_per_million": 2.0}}
    made = {}
    with JudgeServer() as server:
        for mode in ("online", "batch"):
            judge = {"base_url": server.url, "mode": mode, "batch_poll_seconds": 0.05, "batch_poll_max_seconds": 0.2,
                     "prices": prices}
            evalbeam("generate", _write(tmp_path, mode, scenarios, judge, run_id=mode))
            made[mode] = sorted((r["goal"], r["persona"], r["position"], r["digest"], r["decision"])
                                for r in table(tmp_path / "out" / mode, "scenarios"))
            [runs] = table(tmp_path / "out" / mode, "runs")
            made[mode + "_usage"] = json.loads(runs["judge_usage"])["scenarios:generation"]
        assert server.stats.batch_items == 4  # the four cells, each a batch request
    assert made["online"] == made["batch"] and sum(d == "near_duplicate" for *_, d in made["batch"]) == 2
    batch = made["batch_usage"]
    assert batch["batch_prompt_tokens"] == batch["prompt_tokens"] > 0 and made["online_usage"]["batch_prompt_tokens"] == 0


@pytest.mark.parametrize("scenarios, message", [
    ({"personas": ["NOVCE"]}, "evalbeam: scenarios.personas.0: unknown persona 'NOVCE' (did you mean NOVICE?); "
                              "ADK's: EVALUATOR, EXPERT, NOVICE"),
    ({"agent": "no_such_module.agent:root", "description": None},
     "evalbeam: scenarios.agent: cannot load 'no_such_module.agent:root': ModuleNotFoundError"),
    ({"seeds": "missing.evalset.json"}, "evalbeam: scenarios.seeds: cannot read"),
])
@pytest.mark.agent_rerun
def test_bad_configuration_is_refused_in_one_line_before_any_call(tmp_path, monkeypatch, request, scenarios, message):
    if in_agent_env(request):
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    block = {k: v for k, v in {"description": AGENT, "goals": ["a forecast"], **scenarios}.items() if v is not None}
    with JudgeServer() as server:
        result = evalbeam("generate", _write(tmp_path, "bad", block, {"base_url": server.url}), check=False)
        assert server.stats.requests == 0
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(message), line
    assert not (tmp_path / "out" / "bad").exists()


@pytest.mark.timing  # killed at a moment, as tests/e2e/test_judge_durability.py's are
@pytest.mark.slow
@pytest.mark.agent_rerun
def test_a_killed_generation_resumes_from_its_checkpoints(tmp_path, request):
    """SIGKILL in the middle of generating, then the same run_id again: the re-run reuses what the
    checkpoints hold and asks only the cells they do not; the set is whole."""
    if in_agent_env(request):
        return
    from tests.servers.judge_server import Behaviour, JudgeServer

    goals = [f"goal number {i}" for i in range(100)]
    scenarios = {"description": AGENT, "goals": goals, "personas": ["NOVICE"], "per_cell": 2}
    folder = tmp_path / "out" / "_evalbeam_attempts" / "k1" / "judge_checkpoints"
    with JudgeServer(Behaviour(latency_median=0.1)) as server:
        config = _write(tmp_path, "kill", scenarios, {"base_url": server.url, "max_concurrency": 4,
                                                      "checkpoint_seconds": 1}, run_id="k1")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": KEY}
        first = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "evalbeam"), "generate", config], cwd=ROOT, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while (server.stats.accepted < 40 or not list(folder.glob("*.parquet"))) and first.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
            assert first.poll() is None, f"the run ended before it could be killed: {first.stderr.read()}"
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            first.stderr.close()
        time.sleep(1.0)
        asked_before = collections.Counter(server.stats.prompts)
        assert 0 < sum(asked_before.values()) < 100
        rerun = evalbeam("generate", config, env={"GOOGLE_API_KEY": KEY})
        asked_again = {p for p, n in server.stats.prompts.items() if n > asked_before[p]}
    [runs] = table(tmp_path / "out" / "k1", "runs")
    reused = json.loads(runs["judge_usage"])["scenarios:generation"]["checkpoint_reused"]
    assert reused > 0 and len(asked_again) == 100 - reused  # only what no checkpoint held was asked again
    assert len(table(tmp_path / "out" / "k1", "scenarios")) == 200 and "kept 200" in rerun.stdout


@pytest.mark.agent_rerun
def test_a_run_generates_then_runs_the_set_with_adks_simulator_against_an_in_process_agent(tmp_path, monkeypatch,
                                                                                           request):
    """scenarios: with inference.agent: the same run generates the set and runs each scenario through ADK's user
    simulator against an in-process ADK agent, scored, sliced by the grid; a later run of the pinned set pairs
    every instance with it in evalbeam compare."""
    if in_agent_env(request):
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    scenarios = {"agent": "tests.inference_agent:root_agent", "goals": ["ask for a forecast"],
                 "personas": ["NOVICE", "EXPERT"], "per_cell": 2}
    inference = {"agent": "tests.inference_agent:root_agent", "timeout_seconds": 120,
                 "user_simulator": {"max_allowed_invocations": 2}}
    metrics = ["tool_call_count_v1", {"name": "per_turn_user_simulator_quality_v1", "threshold": 0.5}]
    with JudgeServer() as server:
        monkeypatch.setenv("EVALBEAM_TEST_MODEL_URL", server.url)
        first = _write(tmp_path, "live", scenarios, {"base_url": server.url}, run_id="live1", inference=inference,
                       metrics=metrics)
        evalbeam("run", first)
        out = tmp_path / "out" / "live1"
        kept = [r for r in table(out, "scenarios") if r["decision"] == "kept"]
        assert len(kept) == 4
        instances = {r["instance_id"]: r for r in table(out, "instances")}
        assert set(instances) == {f"live:{r['eval_id']}" for r in kept}
        for r in kept:
            turns = json.loads(instances[f"live:{r['eval_id']}"]["invocations"])
            assert turns[0]["prompt"] == r["starting_prompt"] and len(turns) == 2  # the simulator's second message
            assert turns[0]["response"]  # the agent answered
            assert instances[f"live:{r['eval_id']}"]["persona"] == r["persona"]
        summary = {(s["metric"], s["slice"]) for s in table(out, "summary")}
        assert {("tool_call_count_v1", "persona=NOVICE"), ("tool_call_count_v1", "persona=EXPERT")} <= summary
        [runs] = table(out, "runs")
        usage = json.loads(runs["judge_usage"])
        assert usage["scenarios:generation"]["requests"] == 2 and usage["user_simulator"]["requests"] >= 4

        from evalbeam.metrics.scenarios import scenario_digest, set_digest

        pinned = {"pinned_from": str(out / "scenarios"),
                  "digest": set_digest(scenario_digest(json.loads(r["conversation_scenario"])) for r in kept)}
        second = _write(tmp_path, "live", pinned, {"base_url": server.url}, run_id="live2", inference=inference,
                        metrics=metrics)
        before = server.stats.stages["scenarios"]
        evalbeam("run", second)
        assert server.stats.stages["scenarios"] == before  # the pinned set: no generation call
        assert {r["instance_id"] for r in table(tmp_path / "out" / "live2", "instances")} == set(instances)
        compared = evalbeam("compare", "live1", "live2", "--parquet", str(tmp_path / "out"), "--json", check=False)
    assert compared.returncode in (0, 1), compared.stderr
    rows = [r for r in _dicts(json.loads(compared.stdout)) if r.get("metric") == "tool_call_count_v1"
            and r.get("slice") == "overall"]
    assert rows and rows[0]["n_paired"] == 4  # every generated case paired with its pinned twin


def _dicts(value):
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _dicts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _dicts(v)
