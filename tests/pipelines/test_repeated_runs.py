"""Repeated runs (inference.num_runs > 1) through the whole pipeline: a real inference
function that learns its run number and answers right in some runs, the summary's
pass@k / pass^k, clustered standard error and between-run std checked against what
the script implies (pass@k by direct enumeration of run subsets), and `evalbeam show`."""
from __future__ import annotations

import itertools
import json
import math
import statistics

import pytest
import yaml

from tests.helpers import evalbeam, table

NUM_RUNS = 3
# case -> (group, runs right (of 3), the run that raises or None)
CASES = {"a": ("g1", 3, None), "b": ("g1", 1, None), "c": ("g1", 0, None), "d": ("g2", 2, None),
         "e": ("g2", 2, 2), "f": ("g2", 1, 1)}


def run_scores(right, boom):
    """The exact_match score of each run of a case (None: the run raised)."""
    return [None if run == boom else float(run <= right) for run in range(1, NUM_RUNS + 1)]


def enumerated(passes, k):
    subsets = list(itertools.combinations(passes, k))
    return sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets)


def expected(cases):
    """The summary the script implies for these cases, computed the long way."""
    valid = [[s for s in run_scores(right, boom) if s is not None] for _, right, boom in cases]
    scores = [s for case in valid for s in case]
    mean = statistics.fmean(scores)
    g = len(valid)
    se = math.sqrt(g / (g - 1) * sum((sum(c) - len(c) * mean) ** 2 for c in valid)) / len(scores)
    curves = {}
    for j, name in enumerate(("pass_at_k", "pass_all_k")):
        curves[name] = []
        for k in range(1, NUM_RUNS + 1):
            values = [enumerated([s >= 1.0 for s in c], k)[j] for c in valid if len(c) >= k]
            curves[name].append({"k": k, "value": pytest.approx(statistics.fmean(values), abs=1e-12),
                                 "cases": len(values)})
    return {"mean": pytest.approx(mean, rel=1e-12), "standard_error": pytest.approx(se, rel=1e-9),
            "between_run_std": pytest.approx(statistics.fmean(statistics.stdev(c) for c in valid), rel=1e-9),
            "case_count": g, "valid_count": len(scores), **curves}


@pytest.fixture(scope="module")
def repeated_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("repeats")
    data = tmp / "cases.jsonl"
    data.write_text("\n".join(json.dumps({
        "id": case, "group": group, "reference": f"answer {case}",
        "prompt": f"question {case} #right={right}" + (f" #boom={boom}" if boom else "")})
        for case, (group, right, boom) in CASES.items()) + "\n")
    config = tmp / "repeats.yaml"
    config.write_text(yaml.safe_dump({
        "name": "repeats", "run_id": "rep1",
        "input": {"uri": str(data), "id_column": "id", "slice_columns": ["group"]},
        "inference": {"function": "tests.inference_app:right_in_early_runs", "num_runs": NUM_RUNS},
        "metrics": [{"name": "exact_match", "threshold": 1.0}, {"name": "exact_match", "as": "em_open"}],
        "output": {"parquet": str(tmp / "out")}}))
    result = evalbeam("run", config)
    return tmp / "out", config, result


@pytest.mark.slow
def test_the_summary_of_repeated_runs_is_what_the_script_implies(repeated_run):
    out, _, result = repeated_run
    run = out / "rep1"
    results = {(r["instance_id"], r["metric"]): r for r in table(run, "metric_results")}
    # the function learned its run: case d is right in runs 1 and 2 only
    assert [results[(f"d:run{k}", "exact_match")]["score"] for k in (1, 2, 3)] == [1.0, 1.0, 0.0]
    assert results[("e:run2", "exact_match")]["error"].startswith("inference failed: RuntimeError: run 2 broke")
    summary = {(s["metric"], s["slice"]): s for s in table(run, "summary")}
    slices = {"overall": list(CASES.values()), "group=g1": [c for c in CASES.values() if c[0] == "g1"],
              "group=g2": [c for c in CASES.values() if c[0] == "g2"]}
    for slice_name, cases in slices.items():
        want = expected(cases)
        row = summary[("exact_match", slice_name)]
        got = {**row, "pass_at_k": json.loads(row["pass_at_k"]), "pass_all_k": json.loads(row["pass_all_k"])}
        assert {k: got[k] for k in want} == want, slice_name
        assert got["error_count"] == sum(boom is not None for _, _, boom in cases)
        # the interval resamples cases: it holds the mean
        assert got["ci_low"] <= got["mean"] <= got["ci_high"]
        # no threshold: the same scores, no pass curves
        open_row = summary[("em_open", slice_name)]
        assert open_row["pass_at_k"] is None and open_row["pass_all_k"] is None
        assert open_row["standard_error"] == pytest.approx(row["standard_error"], rel=1e-12)
        assert open_row["position_consistency"] is None
    # 6 cases read, each scored once in the counts (3 runs each)
    [runs] = table(run, "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (6, 6, 0)
    assert "pass@k" in result.stdout
    # beside 'read 6 = scored 6', how the summary's n of 18 comes about (issue 32, item 5)
    assert "read 6 = scored 6 + dead-lettered 0" in result.stdout
    assert ("each of the 6 case(s) scored ran 3 times (inference.num_runs): 18 instances, counted in the summary's n "
            "and errors") in result.stdout


@pytest.mark.slow
def test_show_prints_pass_at_k_and_the_clustered_standard_error(repeated_run):
    out, config, _ = repeated_run
    shown = evalbeam("show", "rep1", "--config", str(config)).stdout
    want = expected(list(CASES.values()))
    assert f"{want['standard_error'].expected:.4f}" in shown
    repeats = shown.split("repeated runs (pass@k")[1]
    line = next(line for line in repeats.splitlines() if line.split()[:2] == ["exact_match", "overall"])
    assert " ".join(f"{p['value'].expected:.3f}" for p in want["pass_at_k"]) in line
    data = json.loads(evalbeam("show", "rep1", "--json", "--config", str(config)).stdout)
    [overall] = [s for s in data["summary"] if s["metric"] == "exact_match" and s["slice"] == "overall"]
    assert [p["value"] for p in overall["pass_at_k"]] == [p["value"] for p in want["pass_at_k"]]
    assert overall["standard_error"] == want["standard_error"]


@pytest.mark.slow
def test_the_report_shows_the_pass_curves(repeated_run):
    import lxml.html

    out, config, _ = repeated_run
    page = out.parent / "repeats.html"
    evalbeam("report", "rep1", "--config", str(config), "-o", str(page))
    dom = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    assert [h.text_content() for h in dom.xpath("//h2")][:3] == ["Run", "Summary", "Repeated runs"]
    section = dom.xpath("//section[@id='repeated-runs']")[0]
    assert len(section.xpath(".//figure/svg")) == 1  # one chart: the one metric with a threshold, overall
    cells = {tuple(td.text_content() for td in tr.xpath("td")[:2]): [td.text_content() for td in tr.xpath("td")]
             for tr in section.xpath(".//tr[td]")}
    want = expected(list(CASES.values()))
    row = cells[("exact_match", "overall")]
    assert row[3:9] == [f"{p['value'].expected:.3f}" for p in want["pass_at_k"] + want["pass_all_k"]]
    se = dom.xpath("//section[@id='summary']//tr[td[1]/a[text()='exact_match']]/td[5]")[0].text_content()
    assert float(se) == pytest.approx(want["standard_error"].expected, abs=1e-4)


def test_show_with_many_runs_prints_a_few_k_not_all_of_them():
    """num_runs 100: `show` prints pass@k and pass^k at k = 1, 2, 3, 5, 10, 20, 50, 100 (named in the
    heading), not 100 numbers per column; the values are the curve's at those k."""
    from evalbeam.pipelines.reports.text import format_repeats

    curve = [{"k": k, "value": 1 - 0.5 ** k, "cases": 2} for k in range(1, 101)]
    every = [{"k": k, "value": 0.5 ** k, "cases": 2} for k in range(1, 101)]
    text = format_repeats([{"metric": "m", "slice": "overall", "case_count": 2, "pass_at_k": json.dumps(curve),
                            "pass_all_k": json.dumps(every), "between_run_std": 0.5}])
    assert "k = 1, 2, 3, 5, 10, 20, 50, 100" in text
    line = next(t for t in text.splitlines() if t.startswith("m "))
    shown = [1, 2, 3, 5, 10, 20, 50, 100]
    assert " ".join(f"{1 - 0.5 ** k:.3f}" for k in shown) in line
    assert " ".join(f"{0.5 ** k:.3f}" for k in shown) in line
    assert len(line) < 200
    few = format_repeats([{"metric": "m", "slice": "overall", "case_count": 2, "pass_at_k": json.dumps(curve[:3]),
                           "pass_all_k": json.dumps(every[:3]), "between_run_std": 0.5}])
    assert "k = 1, 2, 3;" in few  # up to 8 runs: every k


@pytest.mark.slow
def test_the_report_table_with_many_runs_has_the_same_few_k():
    """The report's repeated-runs table, num_runs 100: columns at the k `show` prints (the chart keeps
    the whole curve), not 200 columns."""
    import lxml.html

    from evalbeam.pipelines.reports.html import _repeats

    curve = [{"k": k, "value": 1 - 0.5 ** k, "cases": 2} for k in range(1, 101)]
    every = [{"k": k, "value": 0.5 ** k, "cases": 2} for k in range(1, 101)]
    html = _repeats({"summary": [{"metric": "m", "slice": "overall", "case_count": 2, "pass_at_k": curve,
                                  "pass_all_k": every, "between_run_std": 0.5}]})
    table = lxml.html.fromstring(html).xpath("//table")[0]
    shown = [1, 2, 3, 5, 10, 20, 50, 100]
    assert [th.text_content() for th in table.xpath(".//th")] == (
        ["metric", "slice", "cases"] + [f"pass@{k}" for k in shown] + [f"pass^{k}" for k in shown] + ["between-run std"])
    cells = [td.text_content() for td in table.xpath(".//tr[td]")[0].xpath("td")]
    assert cells[3:11] == [f"{1 - 0.5 ** k:.3f}" for k in shown]
