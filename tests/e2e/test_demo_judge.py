"""Trying judge features on one's own config without a key: `make demo-judge CONFIG=...` runs it
against the tests' local stand-in (tests/demo_judge.py), every judge of it pointed there."""
import json
import os
import subprocess

import pytest
import yaml

from evalbeam.configs import load_config
from tests import demo_judge
from tests.helpers import ROOT, table

# One juror of each kind a user may write: inheriting the run's Gemini judge, naming its own
# backend (Vertex AI, which would need Application Default Credentials), another provider.
JURY = [{"model": "gemini-2.5-pro", "name": "pro"},
        {"model": "gemini-2.5-flash-lite", "name": "lite", "backend": "vertex_ai", "project": "my-project",
         "location": "us-central1"},
        {"provider": "openai_compatible", "model": "gpt-4o-mini", "name": "gpt", "base_url": "https://llm.example.com/v1"}]


def write_config(folder):
    """An eval of the user's own, in its own folder: twelve answers, four of them wrong, exact_match
    with failure modes and a jury; its input and output relative to its folder."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{k}", "prompt": f"What is {k} + {k}?", "response": str(2 * k if k % 3 else k),
             "reference": str(2 * k), "topic": ["math", "trivia"][k % 2]} for k in range(1, 13)]
    (folder / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"name": "my-offline-try", "run_id": "try1",
              "input": {"uri": "cases.jsonl", "id_column": "id", "slice_columns": ["topic"]},
              "metrics": [{"name": "exact_match", "threshold": 1},
                          {"name": "evalbeam_fluency", "judges": JURY, "jury": {"aggregate": "mean", "quorum": 2}}],
              "failure_modes": {"metrics": ["exact_match"], "taxonomy": "task_success"},
              "judge": {"model": "gemini-2.5-flash"},
              "output": {"parquet": "out/"}}
    path = folder / "my_eval.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_every_judge_of_a_config_is_pointed_at_the_stand_in(tmp_path):
    """The run's judge, and each juror by the provider it calls: its own backend, endpoint and key
    variable replaced (a juror left on Vertex AI or a team's server would call it for real)."""
    config = load_config(write_config(tmp_path))
    sets = demo_judge.overrides(config, "http://127.0.0.1:1")
    given = dict(s.split("=", 1) for s in sets[1::2])
    assert sets[::2] == ["--set"] * len(given)
    assert {k: given[f"judge.{k}"] for k in ("base_url", "backend", "api_key_env")} == {
        "base_url": "http://127.0.0.1:1", "backend": "gemini_api", "api_key_env": "GOOGLE_API_KEY"}
    for j, expected in enumerate([("http://127.0.0.1:1", "gemini_api", "GOOGLE_API_KEY")] * 2
                                 + [("http://127.0.0.1:1/v1", "openai_api", "OPENAI_API_KEY")]):
        assert tuple(given[f"metrics.1.judges.{j}.{k}"] for k in ("base_url", "backend", "api_key_env")) == expected
    assert not [k for k in given if k.startswith("metrics.0.")]  # exact_match has no judge
    # laid over the config as `evalbeam run` lays them, they validate, and every judge calls the stand-in
    pointed = load_config(write_config(tmp_path), sets[1::2])
    jurors = pointed.metrics[1].jurors(pointed.judge)
    assert [(name, s.base_url) for name, s in jurors] == [
        ("pro", "http://127.0.0.1:1"), ("lite", "http://127.0.0.1:1"), ("gpt", "http://127.0.0.1:1/v1")]
    assert demo_judge.user_sets(["--set", "a=1", "--workers", "2", "--set=b=2"]) == ["a=1", "b=2"]


def test_make_demo_judge_passes_config_and_its_arguments():
    """The Makefile's wiring: CONFIG as given (a path with a space kept whole), the default without it."""
    # as from a shell, not as a sub-make of `make test-fast` (its MAKEFLAGS, "Entering directory" lines)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}

    def command(*args):
        out = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed", "demo-judge", *args],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[-1]

    assert command("CONFIG=my evals/x.yaml", "DEMO_JUDGE_ARGS=--set run_id=r") == \
        ".venv/bin/python -m tests.demo_judge 'my evals/x.yaml' --set run_id=r"
    assert command().endswith("-m tests.demo_judge 'configs/demo_judge.yaml'")
    assert command("CONFIG=").endswith("-m tests.demo_judge 'configs/demo_judge.yaml'")


@pytest.mark.slow
def test_make_demo_judge_runs_your_own_config_with_failure_modes_and_a_jury_without_a_key(tmp_path):
    """Issue 42, item 8: `make demo-judge CONFIG=...` with a config of one's own, given by a path
    relative to the repository: it runs against the stand-in with no key in the environment, its
    results where the config says (relative to its folder), every juror and the failure-mode
    classification answered, under the eval name <name>-stand-in."""
    folder = tmp_path / "my evals"
    path = write_config(folder)
    env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    result = subprocess.run(["make", "-s", "-o", ".venv/.installed", "demo-judge",
                             f"CONFIG={os.path.relpath(path, ROOT)}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "they mean NOTHING about the responses" in result.stdout

    out = folder / "out" / "try1"
    [run] = table(out, "runs")
    assert run["name"] == "my-offline-try-stand-in"
    assert run["judge_failures"] == 0 and run["metric_error_count"] == 0
    usage = json.loads(run["judge_usage"])
    assert {k: (u["calls"], u["failures"]) for k, u in usage.items() if k.startswith("evalbeam_fluency:")} == {
        "evalbeam_fluency:pro": (12, 0), "evalbeam_fluency:lite": (12, 0), "evalbeam_fluency:gpt": (12, 0)}
    assert (usage["exact_match:failure_modes"]["calls"], usage["exact_match:failure_modes"]["failures"]) == (4, 0)
    scores = [r for r in table(out, "metric_results") if r["metric"] == "evalbeam_fluency"]
    assert len(scores) == 12 and all(r["score"] is not None for r in scores)
    # the four wrong answers (k = 3, 6, 9, 12), each classified into a mode of the taxonomy
    assigned = table(out, "failure_assignments")
    assert sorted(a["instance_id"] for a in assigned) == ["q12", "q3", "q6", "q9"]
    assert all(a["mode"] and not a["error"] for a in assigned)
    assert [m for m in table(out, "failure_modes") if m["slice"] == "overall" and m["count"]]
    assert not (ROOT / "out").exists()  # nothing written relative to the repository
