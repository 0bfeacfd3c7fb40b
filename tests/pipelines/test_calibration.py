"""input.labels through a whole run: the calibration table (one Beam combine per metric and
slice) equals metrics.statistics.calibration's statistics (tested against scikit-learn/SciPy in
tests/metrics/statistics/test_calibration.py) of the pairs the run wrote; refused and missing labels are
counted, never dropped; `show`, `show --json` print it."""
from __future__ import annotations

import json
import random

import pytest
import yaml

from evalbeam.configs import EvalConfig
from evalbeam.metrics.statistics.calibration import CalibrationMoments
from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer

KEY = "test-key-calibration"


def rows(n: int = 40):
    rng = random.Random(3)
    out = []
    for i in range(n):
        judge = rng.randint(1, 5)
        rater_a = min(5, max(1, judge + rng.choice([-1, 0, 0, 1])))
        row = {"id": f"r{i}", "prompt": f"question {i}", "response": f"answer {i} #score={judge}", "reference": f"answer {i}" if i % 3 else "x",
               "topic": "maths" if i % 2 else "history", "rater_a": rater_a,
               "rater_b": str(min(5, max(1, rater_a + rng.choice([-1, 0, 1])))),
               "exact_ok": (i % 3 != 0) if i % 5 else (i % 3 == 0)}
        out.append(row)
    out[0]["response"] = "broken #fail"  # the judge fails: labelled but unscored
    out[1]["rater_a"], out[1]["rater_b"] = None, ""  # unlabelled
    out[2]["rater_b"] = "great"  # refused: counted, rater_a still used
    out[3]["exact_ok"] = [1]  # refused
    return out


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """One labelled run, shared by the tests that read it (a whole run costs seconds)."""
    tmp_path = tmp_path_factory.mktemp("labelled")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    out = tmp_path / "out"
    with JudgeServer() as server:
        config = {"name": "labelled", "run_id": "cal1",
                  "input": {"uri": str(data), "id_column": "id", "slice_columns": ["topic"],
                            "labels": {"fluency": ["rater_a", "rater_b"], "exact_match": "exact_ok"}},
                  "metrics": ["exact_match", {"name": "fluency", "threshold": 3}],
                  "judge": {"base_url": server.url, "max_attempts": 2, "timeout_seconds": 10},
                  "output": {"parquet": str(out)}}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        printed = evalbeam("run", path, env={"GOOGLE_API_KEY": KEY}).stdout
    return out, printed


def expected(results, instances, metric, threshold, labels):
    """metrics.statistics.calibration over the pairs the run wrote (metric_results: score, human_label)."""
    moments = CalibrationMoments()
    weights = bootstrap_weight_matrix([r["instance_id"] for r in results])
    for r, w in zip(results, weights):
        score = None if r["error"] is not None else r["score"]
        moments.add(score, labels[r["instance_id"]], threshold=threshold, weights=w)
    return moments.statistics(threshold)


@pytest.mark.slow
def test_the_calibration_table_holds_each_labelled_metric_per_slice(labelled_run):
    out, printed = labelled_run
    calibration = {(r["metric"], r["slice"]): r for r in table(out / "cal1", "calibration")}
    assert set(calibration) == {(m, s) for m in ("fluency", "exact_match")
                                for s in ("overall", "topic=maths", "topic=history")}
    results = table(out / "cal1", "metric_results")
    instances = {i["instance_id"]: i for i in table(out / "cal1", "instances")}
    source = {r["id"]: r for r in rows()}

    def label(v):
        try:
            return None if v in (None, "") else float(v)
        except (TypeError, ValueError):
            return None

    labels = {"fluency": {i: (label(r["rater_a"]), label(r["rater_b"])) for i, r in source.items()},
              "exact_match": {i: (label(r["exact_ok"]) if isinstance(r["exact_ok"], bool) else None,)
                              for i, r in source.items()}}
    for metric, threshold in (("fluency", 3.0), ("exact_match", None)):
        for slice_name in ("overall", "topic=maths", "topic=history"):
            mine = [r for r in results if r["metric"] == metric and (
                slice_name == "overall" or f"topic={instances[r['instance_id']]['topic']}" == slice_name)]
            want = expected(mine, instances, metric, threshold, labels[metric])
            got = calibration[(metric, slice_name)]
            for key, value in want.items():
                if key in ("invalid_label_count", "invalid_label_example"):
                    continue  # the expectation is built without the refused cells: checked below
                if isinstance(value, float):
                    assert got[key] == pytest.approx(value, abs=1e-12), (metric, slice_name, key)
                else:
                    assert got[key] == value, (metric, slice_name, key)
            # every instance of the slice is accounted for
            assert got["n"] + got["unlabelled_count"] + got["unscored_count"] == len(mine)

    fluency = calibration[("fluency", "overall")]
    assert (fluency["n"], fluency["unlabelled_count"], fluency["unscored_count"], fluency["invalid_label_count"]) == \
        (38, 1, 1, 1)
    assert fluency["invalid_label_example"].endswith(
        "d.jsonl:3: label column 'rater_b' of metric 'fluency': 'great' is not a number (nor true/false)")
    assert fluency["annotators"] == 2 and fluency["annotator_alpha"] is not None
    assert fluency["scale"] == "continuous"  # two raters' means: halves
    assert fluency["ci_low"] <= fluency["spearman"] <= fluency["ci_high"]
    exact = calibration[("exact_match", "overall")]
    assert exact["scale"] == "categorical" and exact["invalid_label_count"] == 1
    assert exact["accuracy"] is None  # exact_match has no threshold here
    assert json.loads(exact["confusion"])["categories"] == [0, 1]

    # metric_results carries the human value beside the score
    by_id = {r["instance_id"]: r for r in results if r["metric"] == "fluency"}
    assert by_id["r5"]["human_label"] == pytest.approx(sum(labels["fluency"]["r5"]) / 2)
    assert by_id["r1"]["human_label"] is None

    # `run` prints it after the summary; show and show --json too
    assert printed.index("agreement with human labels") > printed.index("pass rate")
    shown = evalbeam("show", "cal1", "--parquet", out).stdout
    assert "fluency: not compared: 1 unlabelled; 1 labelled but unscored; 1 label(s) refused" in shown
    as_json = json.loads(evalbeam("show", "cal1", "--parquet", out, "--json").stdout)
    overall = next(r for r in as_json["calibration"] if r["metric"] == "fluency" and r["slice"] == "overall")
    assert overall["spearman"] == pytest.approx(fluency["spearman"]) and overall["n"] == 38
    assert overall["confusion"] == json.loads(fluency["confusion"])  # JSON itself, not text holding JSON


def test_labels_must_name_a_metric_of_the_config():
    base = {"name": "x", "input": {"uri": "d.jsonl"}, "metrics": ["exact_match"], "output": {"parquet": "o"}}
    config = EvalConfig.model_validate({**base, "input": {"uri": "d.jsonl", "labels": {"exact_match": "ok"}}})
    assert config.input.labels == {"exact_match": ["ok"]}
    with pytest.raises(ValueError, match="input.labels: 'fluency' is not a metric of this config"):
        EvalConfig.model_validate({**base, "input": {"uri": "d.jsonl", "labels": {"fluency": "ok"}}})
    with pytest.raises(ValueError, match="label columns repeat"):
        EvalConfig.model_validate({**base, "input": {"uri": "d.jsonl", "labels": {"exact_match": ["a", "a"]}}})


@pytest.mark.slow
def test_compare_says_which_runs_judge_agrees_more_with_the_people(tmp_path, monkeypatch):
    """Two runs of one eval over the same labelled cases, the second's judge close to the labels:
    `evalbeam compare` gives each run's weighted kappa (equal to its own calibration table's, every
    instance being paired), the difference's paired-bootstrap CI above 0, and says so."""
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    rng = random.Random(9)
    labels = [rng.randint(1, 5) for _ in range(30)]
    out = tmp_path / "out"
    with JudgeServer() as server:
        for run_id, agree in (("guess", False), ("close", True)):
            data = tmp_path / f"{run_id}.jsonl"
            data.write_text("".join(json.dumps(
                {"id": f"c{i}", "prompt": f"q {i}", "response": f"r {i} #score={label if agree else rng.randint(1, 5)}",
                 "human": label})
                + "\n" for i, label in enumerate(labels)))
            config = {"name": "judge_choice", "run_id": run_id,
                      "input": {"uri": str(data), "id_column": "id", "labels": {"fluency": "human"}},
                      "metrics": ["fluency"], "judge": {"base_url": server.url, "timeout_seconds": 10},
                      "output": {"parquet": str(out)}}
            path = tmp_path / f"{run_id}.yaml"
            path.write_text(yaml.safe_dump(config))
            evalbeam("run", path)
    printed = evalbeam("compare", "guess", "close", "--parquet", out).stdout
    [row] = [r for r in table(out / "close", "comparisons") if r["slice"] == "overall"]
    guess = next(r for r in table(out / "guess", "calibration") if r["slice"] == "overall")
    close = next(r for r in table(out / "close", "calibration") if r["slice"] == "overall")
    assert row["labelled_paired"] == 30 and row["agreement_statistic"] == "weighted_kappa"
    assert row["base_agreement"] == pytest.approx(guess["weighted_kappa"], abs=1e-12)
    assert row["run_agreement"] == pytest.approx(close["weighted_kappa"], abs=1e-12) and close["weighted_kappa"] == 1.0
    assert row["agreement_difference"] == pytest.approx(close["weighted_kappa"] - guess["weighted_kappa"])
    assert 0 < row["agreement_ci_low"] <= row["agreement_difference"] <= row["agreement_ci_high"]
    assert row["agrees_more"] == "run"
    assert "agreement with human labels (input.labels), run against base:" in printed
    assert "close agrees more" in printed

    page = tmp_path / "cmp.html"
    evalbeam("report", "close", "--compare", "guess", "--parquet", out, "-o", page)
    import lxml.html

    dom = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    [cells] = [[" ".join(td.text_content().split()) for td in tr.xpath("td")]
               for tr in dom.xpath("//section[@id='comparison']//table[@class='agreement']//tr[td]")]
    assert cells[0] == "fluency" and cells[1] == "30" and cells[-1] == "this run agrees more"
    assert cells[5] == f"{row['agreement_difference']:.3f}"


@pytest.mark.slow
def test_the_report_shows_agreement_and_a_confusion_heat_map_per_metric(labelled_run, tmp_path):
    import lxml.html

    out, _ = labelled_run
    page = tmp_path / "r.html"
    evalbeam("report", "cal1", "--parquet", out, "-o", page)
    dom = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    calibration = {r["metric"]: r for r in table(out / "cal1", "calibration") if r["slice"] == "overall"}
    shown = {}
    for tr in dom.xpath("//section[@id='calibration']//tr[@class='calibration']"):
        cells = [" ".join(td.text_content().split()) for td in tr.xpath("td")]
        shown[cells[0]] = cells
    assert set(shown) == set(calibration)
    for metric, row in calibration.items():
        cells = shown[metric]
        assert cells[1] == str(row["n"])
        assert cells[7] == ("-" if row["weighted_kappa"] is None else f"{row['weighted_kappa']:.3f}")
        assert cells[8] == ("-" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
    figures = {f.get("data-metric"): f for f in dom.xpath("//section[@id='calibration']//figure[@class='confusion']")}
    assert set(figures) == set(calibration)
    for metric, figure in figures.items():
        confusion = json.loads(calibration[metric]["confusion"])
        for i, row in enumerate(confusion["counts"]):
            for j, count in enumerate(row):
                [cell] = figure.xpath(f".//*[@id='cell-{i}-{j}']")
                assert cell.xpath("string(.)").strip() == str(count), (metric, i, j)
        assert sum(map(sum, confusion["counts"])) == calibration[metric]["n"]
        # vector cells: an embedded raster (<image>, a data: URI) is blocked by the page's CSP
        assert not figure.xpath(".//*[local-name()='image']")


@pytest.mark.emulators
def test_calibration_and_agreement_comparison_in_bigquery(cloud, tmp_path):
    """The calibration table loaded into BigQuery (the emulator) from the one schema, equal to the
    Parquet the same run wrote; `show --json` reads it back from there; compare_with in a
    labelled run pairs the labels read back through the Storage Read API."""
    from tests.emulators.control import BUCKET, PROJECT
    from evalbeam.transforms.local_cloud import bigquery_client

    dataset = f"{PROJECT}.evals_calibration"
    rng = random.Random(4)
    truth = [rng.random() < 0.5 for _ in range(24)]
    for run_id, date, wrong_every, extra in (("bq_base", "2026-11-20", 2, {}),
                                             ("bq_next", "2026-11-21", 6, {"compare_with": "previous"})):
        data = tmp_path / f"{run_id}.jsonl"
        data.write_text("".join(json.dumps({
            "id": f"k{i}", "response": "yes" if (ok != (i % wrong_every == 0)) else "no", "reference": "yes",
            "ok": ok, "ds": "a" if i % 3 else "b"}) + "\n" for i, ok in enumerate(truth)))
        config = {"name": "bq_labelled", "run_id": run_id, "run_date": date, **extra,
                  "input": {"uri": str(data), "id_column": "id", "slice_columns": ["ds"],
                            "labels": {"exact_match": "ok"}},
                  "metrics": [{"name": "exact_match", "threshold": 1}],
                  "output": {"bigquery": dataset, "parquet": str(tmp_path / "out")}}
        path = tmp_path / f"{run_id}.yaml"
        path.write_text(yaml.safe_dump(config))
        evalbeam("run", path, f"--temp_location=gs://{BUCKET}/tmp")

    client = bigquery_client(PROJECT)
    loaded = [dict(r.items()) for r in client.query(
        f"SELECT * FROM `{dataset}.calibration` WHERE run_id = 'bq_next' ORDER BY slice").result()]
    written = sorted(table(tmp_path / "out" / "bq_next", "calibration"), key=lambda r: r["slice"])
    assert [r["slice"] for r in loaded] == ["ds=a", "ds=b", "overall"]
    for got, want in zip(loaded, written):
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-12), key
            elif key != "run_date":
                assert got[key] == value, key
    overall = next(r for r in loaded if r["slice"] == "overall")
    assert overall["n"] == 24 and overall["accuracy"] is not None and overall["kappa"] is not None

    latest = [dict(r.items()) for r in client.query(
        f"SELECT name, run_id, slice, n FROM `{dataset}.latest_calibration` ORDER BY slice").result()]
    assert latest == [{"name": "bq_labelled", "run_id": "bq_next", "slice": r["slice"], "n": r["n"]} for r in loaded]

    shown = json.loads(evalbeam("show", "bq_next", "--bigquery", dataset, "--json").stdout)
    assert {(r["metric"], r["slice"]) for r in shown["calibration"]} == {(r["metric"], r["slice"]) for r in loaded}

    [compared] = [dict(r.items()) for r in client.query(
        f"SELECT * FROM `{dataset}.comparisons` WHERE run_id = 'bq_next' AND slice = 'overall'").result()]
    base = next(r for r in table(tmp_path / "out" / "bq_base", "calibration") if r["slice"] == "overall")
    assert compared["labelled_paired"] == 24 and compared["agreement_statistic"] == "weighted_kappa"
    assert compared["base_agreement"] == pytest.approx(base["weighted_kappa"], abs=1e-12)
    assert compared["run_agreement"] == pytest.approx(overall["weighted_kappa"], abs=1e-12)
    assert compared["agrees_more"] in ("run", "neither")

    # a dataset an earlier evalbeam prepared has no calibration table: show reads none, not an error
    client.delete_table(f"{dataset}.calibration")
    shown = json.loads(evalbeam("show", "bq_next", "--bigquery", dataset, "--json").stdout)
    assert shown["calibration"] == [] and shown["counts"]["read_count"] == 24


def test_a_labelled_metric_compared_with_no_label_is_a_run_problem():
    """A misspelt label column (input.labels: {fluency: rator_a}) gives every row no label: the
    calibration table was all nulls with a note, and the run finished as fine. It is a problem
    (as a metric with no valid score is), naming the metric and the counts; a metric that
    failed on every labelled row is already one, and is not named twice."""
    from evalbeam.pipelines.reports.data import run_problems

    run = {"read_count": 4, "scored_count": 4, "dead_letter_count": 0}
    summary = [{"metric": m, "slice": "overall", "valid_count": 4, "error_count": 0} for m in ("f", "g")]
    row = {"slice": "overall", "n": 0, "unlabelled_count": 4, "unscored_count": 0, "invalid_label_count": 1}
    calibration = [{**row, "metric": "f"}, {**row, "metric": "f", "slice": "topic=a"},
                   {**row, "metric": "g", "n": 3, "unlabelled_count": 1}]
    assert run_problems({"runs": [run], "summary": summary, "calibration": calibration}) == [
        "metric f has no human label to compare with (input.labels): 4 row(s) unlabelled, 1 label(s) refused; "
        "is its label column misspelt?"]
    assert run_problems({"runs": [run], "summary": summary, "calibration": calibration[2:]}) == []
    assert run_problems({"runs": [run], "summary": summary}) == []  # a results folder from before the table
    failed = [{**row, "metric": "f", "unlabelled_count": 0, "unscored_count": 4}]
    assert run_problems({"runs": [run], "summary": summary, "calibration": failed}) == []


@pytest.mark.slow
def test_corrected_estimates_through_run_show_and_plan(tmp_path, monkeypatch):
    """Labels on a random half of a run whose judge is a point too kind: the calibration table's
    corrected estimate equals ppi-python's over the scores and labels the run wrote; show prints it
    beside the judge-only mean; `plan --labels-for-width --pilot` gives metrics.statistics.ppi's label count."""
    ppi_py = pytest.importorskip("ppi_py")
    import numpy as np

    from evalbeam.metrics.statistics.ppi import PilotVariances, labels_for_width

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    rng = random.Random(31)
    data = tmp_path / "d.jsonl"
    lines = []
    for i in range(80):
        human = rng.randint(1, 4)
        lines.append({"id": f"c{i}", "prompt": f"q {i}", "response": f"r {i} #score={min(5, human + rng.choice([0, 1, 1, 2]))}",
                      "human": human if rng.random() < 0.5 else None})
    data.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "out"
    with JudgeServer() as server:
        config = {"name": "corrected", "run_id": "pilot",
                  "input": {"uri": str(data), "id_column": "id", "labels": {"fluency": "human"}},
                  "metrics": ["fluency"], "judge": {"base_url": server.url, "timeout_seconds": 10},
                  "output": {"parquet": str(out)}}
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        evalbeam("run", path)
        planned = json.loads(evalbeam("plan", path, "--labels-for-width", "0.7", "--pilot", "pilot", "--json").stdout)
        refused = evalbeam("plan", path, "--labels-for-width", "0.4", "--pilot", "nosuchrun", check=False)
    results = [r for r in table(out / "pilot", "metric_results") if r["metric"] == "fluency"]
    scores = np.array([r["score"] for r in results if r["human_label"] is not None])
    labelled = np.array([r["human_label"] for r in results if r["human_label"] is not None])
    unlabelled = np.array([r["score"] for r in results if r["human_label"] is None])
    row = next(r for r in table(out / "pilot", "calibration") if r["slice"] == "overall")
    assert (row["n"], row["corrected_unlabelled"]) == (len(labelled), len(unlabelled)) and len(unlabelled) > 20
    assert row["corrected_mean"] == pytest.approx(
        float(ppi_py.ppi_mean_pointestimate(labelled, scores, unlabelled, lam=None)[0]), abs=1e-9)
    low, high = (float(v[0]) for v in ppi_py.ppi_mean_ci(labelled, scores, unlabelled, alpha=0.05, lam=None))
    assert (row["corrected_ci_low"], row["corrected_ci_high"]) == pytest.approx((low, high), abs=1e-9)
    # the judge is kind: its mean is above the people's, and the corrected estimate comes down to them
    assert row["judge_only_mean"] > row["corrected_ci_high"]

    shown = evalbeam("show", "pilot", "--parquet", out).stdout
    assert "corrected estimates of the mean (PPI++" in shown and f"{row['corrected_mean']:.4f}" in shown

    [metric] = planned["labels"]["metrics"]
    want = labels_for_width(PilotVariances(row["human_variance"], row["judge_variance"], row["covariance"]), 0.7, 80)
    assert metric["labels_needed"] == want["labels_needed"] and metric["labels_needed"] is not None
    assert metric["labels_only_needed"] == want["labels_only_needed"] > metric["labels_needed"]
    assert refused.returncode == 2 and "no run 'nosuchrun'" in refused.stderr
