"""Position consistency of pairwise judge metrics, through the whole pipeline against the
local judge server (the real google-genai client) given order-biased answers: the rate
the summary, `show` and the report give equals what the scripted bias implies."""
from __future__ import annotations

import json
import statistics

import lxml.html
import numpy as np
import pytest

from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.metrics.judge.test_judge import judge_config, write_data

KEY = "AIzaSy-test-key-position-0123456789"
GOOD, POOR = "Hello there! #quality=4", "hi #quality=2"
# id -> (slice, response, baseline, the share of its 3 samples whose two orders agree; None: no judgment)
ROWS = {
    "p1": ("g1", GOOD, POOR, 1.0),  # the judge sees the better response wherever it is
    "p2": ("g1", "meh #quality=1", "fine #quality=3", 1.0),
    "p3": ("g1", "same #quality=2", "same too #quality=2", 1.0),  # SAME in both orders agrees
    "p4": ("g1", GOOD, POOR + " #bias", 0.0),  # always "A": the two orders pick different responses
    "p5": ("g2", GOOD, POOR, 1.0),
    "p6": ("g2", GOOD, POOR + " #bias", 0.0),
    "p7": ("g2", POOR, GOOD + " #bias", 0.0),
    "p8": ("g2", "down #fail", POOR, None),  # the judge fails after its retries: an error, no agreement
    "q1": ("g3", GOOD, POOR + " #bias_samples=100", 2 / 3),  # sample 0 biased, 1 and 2 not
    "q2": ("g3", GOOD, POOR + " #bias_samples=1", 0.0),
    "q3": ("g3", POOR, GOOD + " #bias_samples=0", 1.0),
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("position")
    data = write_data(tmp, [{"id": i, "group": g, "prompt": "Greet the user", "response": r,
                             "baseline_model_response": b} for i, (g, r, b, _) in ROWS.items()])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GOOGLE_API_KEY", KEY)
        with JudgeServer() as server:
            config = judge_config(tmp, data, server.url, ["pairwise_fluency", "fluency"], run_id="pos1",
                                  sampling_count=3, max_attempts=2)
            text = config.read_text().replace("id_column: id", "id_column: id\n  slice_columns: [group]")
            config.write_text(text)
            evalbeam("run", config)
    return tmp / "out", config


def expected_rate(ids):
    shares = [ROWS[i][3] for i in ids if ROWS[i][3] is not None]
    return statistics.fmean(shares)


@pytest.mark.slow
def test_position_consistency_is_what_the_scripted_bias_implies(judged):
    out, _ = judged
    rows = {(r["instance_id"], r["metric"]): r for r in table(out / "pos1", "metric_results")}
    for i, (_, _, _, share) in ROWS.items():
        row = rows[(i, "pairwise_fluency")]
        assert row["position_agreement"] == (None if share is None else pytest.approx(share)), i
        assert rows[(i, "fluency")]["position_agreement"] is None
    assert rows[("p4", "pairwise_fluency")]["pairwise_choice"] == "TIE"  # the bias decided nothing
    assert rows[("p1", "pairwise_fluency")]["pairwise_choice"] == "CANDIDATE"
    summary = {(s["metric"], s["slice"]): s for s in table(out / "pos1", "summary")}
    slices = {"overall": list(ROWS), **{f"group={g}": [i for i in ROWS if ROWS[i][0] == g] for g in ("g1", "g2", "g3")}}
    for name, ids in slices.items():
        got = summary[("pairwise_fluency", name)]
        assert got["position_consistency"] == pytest.approx(expected_rate(ids), rel=1e-12), name
        assert summary[("fluency", name)]["position_consistency"] is None
    assert summary[("pairwise_fluency", "group=g1")]["position_consistency"] == 0.75
    # the interval: the Poisson bootstrap of the instances with an agreement, seeded by their ids
    kept = [i for i in ROWS if ROWS[i][3] is not None]
    w = bootstrap_weight_matrix(kept)
    rates = (np.array([ROWS[i][3] for i in kept]) @ w) / w.sum(axis=0)
    overall = summary[("pairwise_fluency", "overall")]
    assert (overall["position_consistency_ci_low"], overall["position_consistency_ci_high"]) == pytest.approx(
        tuple(np.percentile(rates, [2.5, 97.5])), rel=1e-12)
    assert overall["position_consistency_ci_low"] < overall["position_consistency"] < overall["position_consistency_ci_high"]


@pytest.mark.slow
def test_show_and_the_report_give_position_consistency(judged):
    out, config = judged
    shown = evalbeam("show", "pos1", "--config", str(config)).stdout
    section = shown.split("position consistency (pairwise")[1]
    line = next(line for line in section.splitlines() if line.split()[:2] == ["pairwise_fluency", "group=g2"])
    assert line.split()[2] == f"{1 / 3:.3f}"
    data = json.loads(evalbeam("show", "pos1", "--json", "--config", str(config)).stdout)
    [overall] = [s for s in data["summary"] if s["metric"] == "pairwise_fluency" and s["slice"] == "overall"]
    assert overall["position_consistency"] == pytest.approx(expected_rate(ROWS))
    page = out.parent / "position.html"
    evalbeam("report", "pos1", "--config", str(config), "-o", str(page))
    dom = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    assert "Position consistency" in [h.text_content() for h in dom.xpath("//h2")]
    cells = {tuple(td.text_content() for td in tr.xpath("td")[:2]): tr.xpath("td")[2].text_content()
             for tr in dom.xpath("//section[@id='position-consistency']//tr[td]")}
    assert cells == {("pairwise_fluency", s): f"{expected_rate(ids):.3f}" for s, ids in (
        ("overall", list(ROWS)), *((f"group={g}", [i for i in ROWS if ROWS[i][0] == g]) for g in ("g1", "g2", "g3")))}
