import datetime as dt
import json
import os
import textwrap

import pydantic
import pytest

from evalbeam.configs import ConfigError, EvalConfig, load_config
from evalbeam.pipelines.preflight import check_imports

BASE = """
name: t
input:
  uri: data.jsonl
metrics:
  - exact_match
output:
  parquet: out/
"""


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def error_of(tmp_path, text, overrides=None):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text), overrides)
    return str(e.value)


def test_minimal_config_and_defaults(tmp_path):
    config = load_config(write(tmp_path, BASE))
    assert config.input.inferred_format() == "jsonl"
    assert config.metrics[0].output_name == "exact_match"
    assert config.resolved_run_id().startswith("t-")


@pytest.mark.parametrize(
    "change,expected",
    [
        ("  - {name: rouge, params: {rouge_type: rouge10}}", "metrics.1: Value error, params: rouge_type"),
        ("  - {name: rouge}", "params: rouge_type: Field required"),
        ("  - {name: bleu, params: {use_effective_ordr: true}}", "use_effective_ordr: Extra inputs are not permitted"),
        ("  - nonexistent_metric", "unknown metric 'nonexistent_metric'"),
        ("  - {name: trajectory_single_tool_use}", "tool_name: Field required"),
        ("  - {name: x, function: 'metrics.examples'}", "not of the form 'package.module:function'"),
        ("  - {name: exact_match, as: exact_match}", "two metrics are named 'exact_match'"),
        ("  - {name: bleu, as: 'bad name'}", "metrics.1.as: String should match pattern"),
    ],
)
def test_bad_metric_fields_are_named(tmp_path, change, expected):
    text = BASE.replace("  - exact_match\n", "  - exact_match\n" + change + "\n")
    message = error_of(tmp_path, text).replace("Value error, ", "")
    assert expected.replace("Value error, ", "") in message


@pytest.mark.parametrize(
    "change,expected",
    [
        ("  - {name: x, function: 'no_such_module:f'}", "function: cannot import module 'no_such_module'"),
        ("  - {name: x, function: 'evalbeam.metrics.examples:nope'}", "has no attribute 'nope'"),
    ],
)
def test_a_custom_metric_that_does_not_import_is_named(tmp_path, change, expected):
    """Whether a custom metric's function imports is a fact of the environment, not of the config:
    the config loads, and the check made before any work (preflight) names the field."""
    text = BASE.replace("  - exact_match\n", "  - exact_match\n" + change + "\n")
    config = load_config(write(tmp_path, text))
    with pytest.raises(ConfigError) as e:
        check_imports(config)
    assert expected in str(e.value) and "metrics.1: function: " in str(e.value)


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("uri: data.jsonl", "uri: data.txt", "input: Value error, cannot infer the format"),
        ("uri: data.jsonl", "uri: data.jsonl\n  format: xml", "input.format: Input should be 'jsonl', 'csv', 'adk_eval_result', 'adk_eval_set', 'adk_agent_events' or 'otel_traces'"),
        ("uri: data.jsonl", "uri: data.jsonl\n  column_mapping: {answer: resp}", "input.column_mapping: Value error, 'answer' is not a canonical field"),
        ("uri: data.jsonl", "uri: data.jsonl\n  slice_columns: [response]", "clashes with an output column"),
        ("uri: data.jsonl", "uri: data.jsonl\n  slice_columns: [run_date]", "clashes with an output column"),
        ("uri: data.jsonl", "uri: data.jsonl\n  slice_columns: [a-b]", "not a valid column name"),
        ("uri: data.jsonl", 'uri: data.jsonl\n  slice_columns: ["dataset\\n"]', "not a valid column name"),  # a full match
        ("name: t", 'name: "t\\n"', "name: String should match pattern"),
        ("uri: data.jsonl", 'uri: "bq://my-project.ds.t\\n"', "not a valid BigQuery table"),
        ("name: t", "name: 'a b'", "name: String should match pattern"),
        ("output:\n  parquet: out/", "output: {}", "output: Value error, set output.parquet, output.bigquery or both"),
        ("output:\n  parquet: out/", "output: {bigquery: my-project}", "output.bigquery: String should match pattern"),
        ("uri: data.jsonl", "uri: bq://proj.ds.t", "not a valid BigQuery table"),
        ("uri: data.jsonl", "uri: bq://my-project.ds;DROP.t", "not a valid BigQuery table"),
        ("uri: data.jsonl", "uri: data.jsonl\n  query: SELECT 1", "set exactly one of input.uri and input.query"),
        ("uri: data.jsonl", "uri: data.jsonl\n  encoding: base64", "input.encoding: Value error, 'base64' is not a text encoding"),
        ("uri: data.jsonl", "uri: a.evalset.json\n  encoding: latin-1", "input.encoding applies to jsonl and csv files"),
        ("uri: data.jsonl", "format: csv", "set exactly one of input.uri and input.query"),
        ("name: t", "name: t\nextra_key: 1", "extra_key: Extra inputs are not permitted"),
    ],
)
def test_bad_fields_are_named(tmp_path, old, new, expected):
    message = error_of(tmp_path, BASE.replace(old, new))
    assert expected.replace("Value error, ", "") in message


def test_overrides(tmp_path):
    config = load_config(write(tmp_path, BASE), ["input.uri=other/*.csv", "run_id=r1", "metrics.0.as=em",
                                                 "input.slice_columns=[a, b]"])
    assert config.input.uri == "other/*.csv" and config.input.inferred_format() == "csv"
    assert config.run_id == "r1"
    assert config.metrics[0].output_name == "em"
    assert config.input.slice_columns == ["a", "b"]
    assert "metrics.5" in error_of(tmp_path, BASE, ["metrics.5.as=x"])
    assert "expected KEY.PATH=VALUE" in error_of(tmp_path, BASE, ["novalue"])


def test_the_comparison_gate_of_a_config(tmp_path):
    """compare_tolerance(s) and compare_watch (issue 32, item 1): per metric, absolute or
    relative; the automatic latency_in_seconds and failure watched only when named; a metric
    the config does not have is refused by name, as a typo would leave it ungated."""
    from evalbeam.metrics.statistics.compare import Tolerance

    gate = load_config(write(tmp_path, BASE)).gate()
    assert gate.watches("exact_match") and not gate.watches("latency_in_seconds") and not gate.watches("failure")
    assert gate.tolerance_for("exact_match") == Tolerance(0.0)
    config = load_config(write(tmp_path, BASE), ["compare_tolerance=0.01", "compare_tolerances.latency_in_seconds=10%",
                                                 "compare_watch=[exact_match, latency_in_seconds]"])
    gate = config.gate()
    assert gate.watches("latency_in_seconds") and not gate.watches("failure")
    assert gate.tolerance_for("latency_in_seconds") == Tolerance(0.1, relative=True)
    assert gate.tolerance_for("exact_match") == Tolerance(0.01)
    # a latency the config names as a metric is watched by default
    assert load_config(write(tmp_path, BASE.replace("- exact_match", "- latency_in_seconds"))).gate().watches(
        "latency_in_seconds")
    assert "compare_tolerances.rouge_x: 'rouge_x' is not a metric of this config; its metrics: exact_match, " \
           "latency_in_seconds, failure" in error_of(tmp_path, BASE, ["compare_tolerances.rouge_x=0.1"])
    assert "compare_watch.1: 'rouge_x' is not a metric" in error_of(tmp_path, BASE, ["compare_watch=[exact_match, rouge_x]"])
    assert "compare_tolerances: exact_match: 'ten%' is not a tolerance" in error_of(
        tmp_path, BASE, ["compare_tolerances.exact_match=ten%"])
    assert "compare_tolerance: Value error, -1" not in error_of(tmp_path, BASE, ["compare_tolerance=-1"])
    assert "compare_tolerance: -1.0 is not a tolerance" in error_of(tmp_path, BASE, ["compare_tolerance=-1"])


def test_null_resets_a_field_that_cannot_be_null_to_its_default(tmp_path):
    """Issue 32, item 7: `--set input.labels=null` failed ('Input should be a valid dictionary')
    and needed `{}`. Where null is a value of its own (judge.max_output_tokens: no limit) it stays."""
    labelled = BASE.replace("uri: data.jsonl", "uri: data.jsonl\n  labels: {exact_match: human}\n  slice_columns: [a]")
    config = load_config(write(tmp_path, labelled), ["input.labels=null", "input.slice_columns=null",
                                                     "judge.max_output_tokens=null", "compare_with=null"])
    assert config.input.labels == {} and config.input.slice_columns == []
    assert config.judge.max_output_tokens is None and config.compare_with is None
    # a YAML key left empty reads the same
    assert load_config(write(tmp_path, BASE.replace("uri: data.jsonl", "uri: data.jsonl\n  labels:"))).input.labels == {}
    assert "output: Input should be a valid dictionary" in error_of(tmp_path, BASE, ["output=null"])  # no default


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1,"))


def test_demo_configs_are_valid():
    for path in ("configs/demo.yaml", "configs/demo_qa.yaml"):
        assert load_config(path).metrics


def test_dates_are_read_by_their_field_and_a_string_keeps_its_text(tmp_path):
    """A date-like value is text to the YAML reader: run_date parses it and names
    an impossible date; run_id (a string) keeps what was typed, even where it
    looks like a date, from the file or from --set."""
    import datetime as dt

    config = load_config(write(tmp_path, BASE + "run_date: 2026-11-22\n"))
    assert config.run_date == dt.date(2026, 11, 22) and config.resolved_run_id() == "t-20261122"
    for text, overrides in ((BASE + "run_date: 2026-02-30\n", None), (BASE, ["run_date=2026-13-45"])):
        message = error_of(tmp_path, text, overrides)
        assert "run_date: Input should be a valid date" in message, message
    assert load_config(write(tmp_path, BASE + "run_id: 2026-11-22\n")).run_id == "2026-11-22"
    assert load_config(write(tmp_path, BASE), ["run_id=2026-13-45"]).run_id == "2026-13-45"
    assert load_config(write(tmp_path, BASE), ["run_date=2026-11-23"]).run_date == dt.date(2026, 11, 23)


def test_relative_paths_in_a_config_file_are_relative_to_its_folder(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    text = BASE.replace("  parquet: out/", "  parquet: ../out/\n  adk_eval_history: history") + textwrap.dedent(f"""
        judge:
          cache: [cache/j1, {tmp_path}/abs/j2, gs://bucket/j3, bq://my-project.d.judge_cache]
          rubrics_from: rubrics/*.parquet
        """)
    path = folder / "c.yaml"
    path.write_text(textwrap.dedent(text))
    config = load_config(path)
    assert config.input.uri == f"{folder}/data.jsonl"
    assert (config.output.parquet, config.output.adk_eval_history) == (f"{tmp_path}/out/", f"{folder}/history")
    assert config.judge.cache == [f"{folder}/cache/j1", f"{tmp_path}/abs/j2", "gs://bucket/j3", "bq://my-project.d.judge_cache"]
    assert config.judge.rubrics_from == [f"{folder}/rubrics/*.parquet"]
    assert config.path_note("input.uri") == (f" ('data.jsonl' in the config file: a relative path there is relative "
                                             f"to the config file's folder, '{folder}')")
    # --set takes a path as typed on the command line: relative to the current folder
    overridden = load_config(path, ["input.uri=here/*.jsonl", "output.parquet=out2/"])
    assert (overridden.input.uri, overridden.output.parquet) == ("here/*.jsonl", "out2/")
    assert overridden.path_note("input.uri") == "" and overridden.judge.cache[0] == f"{folder}/cache/j1"
    # a config named relative to the current folder gives paths relative to it as well
    relative = load_config(os.path.relpath(path))
    assert relative.input.uri == os.path.join(os.path.relpath(folder), "data.jsonl")
    # a config in Cloud Storage: its relative paths are in the same bucket
    from evalbeam.configs import relative_to as _relative_to

    assert _relative_to("gs://bucket/evals", "data/*.jsonl") == "gs://bucket/evals/data/*.jsonl"
    assert _relative_to("gs://bucket/evals", "../out/") == "gs://bucket/out/"


@pytest.mark.parametrize("source", [{"uri": "data/*.evalset.json"}, {"uri": "data/*.evalset_result.json"},
                                    {"uri": "bq://my-project.logs.agent_events", "format": "adk_agent_events"}])
def test_labels_on_an_adk_input_are_refused_as_it_has_no_label_column(source):
    """input.labels names columns of the dataset's rows; an ADK file's cases (and the plugin's
    event rows, grouped into sessions) carry none, so the calibration table was always empty."""
    with pytest.raises(pydantic.ValidationError, match="input.labels: .*ADK"):
        EvalConfig.model_validate({"name": "n", "input": {**source, "labels": {"tool_call_count_v1": "human"}},
                                   "metrics": ["tool_call_count_v1"], "output": {"parquet": "out/"}})


def test_importing_the_config_model_loads_no_beam_transform_or_metric():
    """The config model checks shape only: importing it loads neither Beam nor the transforms nor a
    metric's implementation (issue 28); metrics.catalog imports the built-in metrics, where a metric is looked up."""
    import subprocess
    import sys

    metric_modules = ("evalbeam.metrics.catalog", "evalbeam.metrics.adk", "evalbeam.metrics.passthrough",
                      "evalbeam.metrics.text", "evalbeam.metrics.tool_call", "evalbeam.metrics.trajectory",
                      "evalbeam.metrics.judge.adk_judges", "evalbeam.metrics.judge.library",
                      "evalbeam.metrics.judge.rubric_library")
    code = ("import json, sys\n"
            "import evalbeam.configs\n"
            "loaded = [m for m in sys.modules if m.split('.')[0] == 'apache_beam'\n"
            "          or m.startswith(('evalbeam.transforms', 'evalbeam.pipelines')) or m in %r]\n"
            "from evalbeam.metrics.catalog import get_metric\n"
            "get_metric('exact_match')\n"
            "print(json.dumps([loaded, all(m in sys.modules for m in %r)]))\n" % (metric_modules, metric_modules))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, metrics_after_lookup = json.loads(result.stdout)
    assert loaded == [] and metrics_after_lookup


@pytest.mark.parametrize("where", ["judge", "metric", "juror"])
def test_an_api_key_pasted_as_api_key_env_is_refused_without_quoting_it(where):
    """A key made of letters, digits and underscores passes as a variable's name; it would be recorded with the
    config (runs table) and named in credential errors. Refused, as the A2A auth's variable names are guarded."""
    from evalbeam.configs.schema import format_errors

    key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    own = {"provider": "openai_compatible", "model": "gpt", "api_key_env": key}
    metric = {"judge": {"name": "evalbeam_fluency"}, "metric": {"name": "evalbeam_fluency", "judge": own},
              "juror": {"name": "evalbeam_fluency", "judges": [{"model": "a"}, {**own, "name": "b"}]}}[where]
    data = {"name": "j", "input": {"uri": "x.jsonl"}, "output": {"parquet": "o"}, "metrics": [metric],
            "judge": {"api_key_env": key} if where == "judge" else {}}
    with pytest.raises(pydantic.ValidationError) as e:
        EvalConfig.model_validate(data)
    shown = format_errors(e.value)
    assert "api_key_env must name the environment variable holding the API key" in shown
    assert "32 characters look like a key" in shown and key not in shown
    # conventional names, the defaults and long upper-case ones, are taken
    for name in ("OPENAI_API_KEY", "MIXED_ANTHROPIC_KEY", "EVALBEAM_TEST_PROVIDER_KEY", "my_judge_key",
                 "OPENAI_API_KEY_PROD2", "GOOGLE_API_KEY_2026", "JudgeKey_2"):  # words between underscores
        EvalConfig.model_validate({**data, "metrics": ["evalbeam_fluency"], "judge": {"api_key_env": name}})


@pytest.mark.parametrize("extra", ["", "  since: last_run\n  format: otel_traces\n",
                                   "  since: last_run\n  format: otel_traces\n  lateness: 0\n",
                                   "  sample: {rate: 0.25, seed: 3}\n"])
def test_a_configs_json_as_the_runs_table_keeps_it_validates_again(tmp_path, extra):
    """`show` and `run` read the runs row's config back (EvalConfig.to_json): an input without since must
    not come back with a lateness, which only applies with since; lateness 0 stays 0."""
    config = load_config(write(tmp_path, BASE.replace("  uri: data.jsonl\n", "  uri: data.jsonl\n" + extra)))
    again = EvalConfig.model_validate(json.loads(config.to_json()))
    assert again.to_json() == config.to_json()
    assert again.input.lateness == (dt.timedelta(0) if "lateness" in extra else None)
