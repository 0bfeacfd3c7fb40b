"""BLEU's slow path is never silent (issue 47): where a worker has no C extension (metrics/_bleu13a.c, built
at install where a C compiler is found), the runs row, a Beam counter, `show` and the report say so (and
the worker's log, on Dataflow: a local run's workers' warnings are not relayed), and `require_native_bleu: true` refuses the run before any work.

A worker without the extension is made as an install without a compiler is: `evalbeam.metrics._bleu13a`
does not import (a sitecustomize on the run's PYTHONPATH, which its DirectRunner workers inherit, refuses it)."""
import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import evalbeam, table

NO_EXTENSION = '''
import sys


class NoBleuExtension:
    """evalbeam.metrics._bleu13a cannot be imported: an install where no C compiler was found."""

    def find_spec(self, name, path=None, target=None):
        if name == "evalbeam.metrics._bleu13a":
            raise ImportError("no module named evalbeam.metrics._bleu13a (built without a C compiler)")
        return None


sys.meta_path.insert(0, NoBleuExtension())
'''


def no_extension(tmp_path: Path) -> Path:
    folder = tmp_path / "no_c_compiler"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(NO_EXTENSION)
    return folder


def config(tmp_path: Path, require: bool | None = None, metrics=("bleu", "exact_match")) -> Path:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "response": f"the cat sat on mat {i}",
                                        "reference": f"the cat sat on the mat {i}"}) + "\n" for i in range(30)))
    raw = {"name": "bleu", "run_id": "x", "input": {"uri": str(data), "id_column": "id"}, "metrics": list(metrics),
           "output": {"parquet": str(tmp_path / "out")}}
    if require is not None:
        raw["require_native_bleu"] = require
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


NOTE = ("BLEU ran on its Python path on every worker (bleu_path python): its C extension (metrics/_bleu13a.c) was "
        "not built there, so BLEU took about 6x as long, with the same scores; require_native_bleu: true refuses "
        "such a run")


@pytest.mark.slow
def test_a_run_whose_workers_lack_the_c_extension_says_so_and_scores_the_same(tmp_path):
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    fast.mkdir(), slow.mkdir()
    ran = evalbeam("run", config(fast), "--direct_num_workers=2", "--direct_running_mode=multi_processing")
    assert "notes:" not in ran.stdout and "Python path" not in ran.stderr
    [row] = table(fast / "out" / "x", "runs")
    assert row["bleu_path"] == "c"
    ran = evalbeam("run", config(slow), "--direct_num_workers=2", "--direct_running_mode=multi_processing",
                   path_first=[no_extension(tmp_path)])
    [row] = table(slow / "out" / "x", "runs")
    assert row["bleu_path"] == "python"
    assert f"notes:\n  {NOTE}" in ran.stdout
    # the same scores either way
    scores = lambda out: sorted((r["instance_id"], r["score"]) for r in table(out / "out" / "x", "metric_results"))  # noqa: E731
    assert scores(fast) == scores(slow)
    shown = json.loads(evalbeam("show", "x", "--parquet", str(slow / "out"), "--json").stdout)
    assert shown["notes"] == [NOTE] and shown["problems"] == []
    assert NOTE in evalbeam("show", "x", "--parquet", str(slow / "out")).stdout
    assert json.loads(evalbeam("show", "x", "--parquet", str(fast / "out"), "--json").stdout)["notes"] == []
    report = tmp_path / "report.html"
    evalbeam("report", "x", "--parquet", str(slow / "out"), "--output", str(report))
    assert "<strong>Notes</strong>" in report.read_text() and "BLEU ran on its Python path" in report.read_text()
    # without BLEU, no path: null
    plain = tmp_path / "plain"
    plain.mkdir()
    evalbeam("run", config(plain, metrics=("exact_match",)), path_first=[no_extension(tmp_path)])
    assert table(plain / "out" / "x", "runs")[0]["bleu_path"] is None


@pytest.mark.slow
def test_require_native_bleu_refuses_a_run_before_any_work_where_the_extension_is_missing(tmp_path):
    refused = evalbeam("run", config(tmp_path, require=True), check=False, path_first=[no_extension(tmp_path)])
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "evalbeam: require_native_bleu: BLEU's C extension (metrics/_bleu13a.c) is not built in this install of "
        "evalbeam (no C compiler was found when it was installed), so BLEU would run its Python path, about 6x "
        "slower: reinstall evalbeam where a C compiler is found, or set require_native_bleu: false"]
    assert not (tmp_path / "out").exists()
    evalbeam("run", config(tmp_path, require=True))  # where it is built, the same config runs
    assert table(tmp_path / "out" / "x", "runs")[0]["bleu_path"] == "c"


def test_each_worker_counts_the_bleu_path_it_ran_and_a_required_fast_path_fails_the_worker(monkeypatch):
    """In a real pipeline: the evalbeam/bleu_c_path and bleu_python_path counters count the instances BLEU
    scored on each path; with require_native_bleu, a worker without the extension fails as it starts."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.testing.test_pipeline import TestPipeline

    from evalbeam.configs import MetricSpec
    from evalbeam.metrics import sentence_bleu
    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.rows.tables import RunKey
    from evalbeam.transforms.score import ScoreInstances, SlowBleuRefused

    import datetime as dt

    instances = [Instance(f"i{n}", {"response": "a b c d", "reference": "a b c e"}, {}, "test") for n in range(7)]
    specs = [MetricSpec(name="bleu"), MetricSpec(name="exact_match")]
    run = RunKey("x", dt.date(2026, 12, 7))

    def counters():
        p = TestPipeline(runner="DirectRunner")
        _ = p | beam.Create(instances) | ScoreInstances(run, specs)
        result = p.run()
        result.wait_until_finish()
        found = result.metrics().query(MetricsFilter().with_namespace("evalbeam"))["counters"]
        return {c.key.metric.name: c.committed for c in found if c.key.metric.name.startswith("bleu_")}

    assert counters() == {"bleu_c_path": 7}
    monkeypatch.setattr(sentence_bleu, "_native", None)
    assert counters() == {"bleu_python_path": 7}
    with pytest.raises(Exception, match="require_native_bleu: BLEU runs on its Python path on this worker"):
        with TestPipeline(runner="DirectRunner") as p:
            _ = p | beam.Create(instances) | ScoreInstances(run, specs, require_native_bleu=True)
    assert issubclass(SlowBleuRefused, RuntimeError)
