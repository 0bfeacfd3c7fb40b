"""What a run says and keeps when its input is partly unusable, its comparison
pairs nothing, or its output cannot be written (issue 21, items 2, 3 and 5),
through the real `evalbeam` command."""
import json
from pathlib import Path

import yaml

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
