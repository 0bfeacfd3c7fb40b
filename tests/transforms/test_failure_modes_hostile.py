"""Failure modes with awkward inputs: taxonomies that must be refused, a run where nothing
fails, a judge that misbehaves, odd slice values, interrupted runs. Real runs (in-process,
DirectRunner) against the local judge stand-in through the real google-genai client."""
import json

import pytest

from evalbeam.metrics.failure_modes import TOOL_USE
from tests.helpers import evalbeam, table
from tests.judge_server import JudgeServer
from tests.transforms.test_failure_modes import api_key, run_config, write_config  # noqa: F401 - a fixture

PASSING = [{"id": f"i{n}", "team": "billing", "prompt": f"q{n}", "response": f"a{n}", "reference": f"a{n}"}
           for n in range(8)]


def test_a_run_with_no_failure_is_shown_and_compared_as_zero_per_mode(tmp_path, api_key):  # noqa: F811
    """Nothing fails: the tables are empty but the taxonomy is recorded; `show` says there was
    no failure, and `compare` counts every mode as 0 on that side instead of refusing, so a
    gate on mode growth sees modes that appear after a night without failure."""
    failing = [dict(r, response=f"wrong #mode=wrong_tool") for r in PASSING]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, PASSING, server.url, "clean"))
        assert server.stats.requests == 0
        run_config(write_config(tmp_path, failing, server.url, "broken"))
    out = tmp_path / "out"
    assert table(out / "clean", "failure_assignments") == [] and table(out / "clean", "failure_modes") == []
    [tax] = table(out / "clean", "taxonomies")
    assert tax["digest"] == TOOL_USE.digest

    show = evalbeam("show", "clean", "--parquet", out)
    assert "failure modes: no failure of exact_match to classify (taxonomy tool_use)" in show.stdout

    grew = evalbeam("compare", "clean", "broken", "--parquet", out, "--fail-on-mode-growth", "wrong_tool", check=False)
    assert "not compared" not in grew.stdout, grew.stdout
    assert "exact_match            overall              wrong_tool                 0     8" in grew.stdout
    # 8 of 8 paired instances gained the mode: McNemar p = 2/2^8, in overall and team=billing
    assert "2 gated failure mode growth(s) flagged" in grew.stdout and "wrong_tool grew (0 -> 8, p 0.0078)" in grew.stdout
    shrank = evalbeam("compare", "broken", "clean", "--parquet", out, "--fail-on-mode-growth", "any", check=False)
    assert "0 gated failure mode growth(s) flagged" in shrank.stdout and "  shrank" in shrank.stdout
