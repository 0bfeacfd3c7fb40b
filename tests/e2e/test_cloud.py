"""Google Cloud end to end against the real emulators: the real `evalbeam`
command, Beam's Cloud Storage IO, the real BigQuery clients (REST and Storage
Read), started by the `cloud` session fixture."""
import csv
import io
import json

import pytest
import yaml

from tests.emulators.control import BUCKET, PROJECT
from evalbeam.metrics.rows import tables as schema
from tests.helpers import ROOT, evalbeam

pytestmark = pytest.mark.emulators

T = {"tool_name": "get", "tool_input": {"id": 1}}
U = {"tool_name": "set", "tool_input": {"id": 1, "on": True}}


def gcs():
    from evalbeam.transforms.local_cloud import storage_client

    return storage_client(PROJECT).bucket(BUCKET)


def bq():
    from evalbeam.transforms.local_cloud import bigquery_client

    return bigquery_client(PROJECT)


def rows(sql):
    return [dict(r.items()) for r in bq().query(sql).result()]


def write_config(tmp_path, input_block, output_block, metrics=None, name="cloud-eval", extra=""):
    """A config file from YAML fragments."""
    config = {
        "name": name,
        **(yaml.safe_load(extra) or {}),
        "input": yaml.safe_load(input_block),
        "metrics": [yaml.safe_load(m) for m in metrics or ["exact_match", "trajectory_exact_match", "trajectory_recall"]],
        "output": yaml.safe_load(output_block),
    }
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_rows(n, prefix="c", wrong_every=0):
    out = []
    for i in range(n):
        wrong = wrong_every and i % wrong_every == 0
        out.append({"case": f"{prefix}{i}", "ds": "x" if i % 2 else "y", "answer": "no" if wrong else "yes",
                    "reference": "yes", "predicted_trajectory": [T] if wrong else [T, U], "reference_trajectory": [T, U]})
    return out


def test_gcs_jsonl_in_and_gcs_parquet_out(cloud, tmp_path):
    data = agent_rows(6, wrong_every=3)
    gcs().blob("t1/in/part-0.jsonl").upload_from_string("\n".join(json.dumps(r) for r in data[:3]) + "\n")
    gcs().blob("t1/in/part-1.jsonl").upload_from_string("\n".join(json.dumps(r) for r in data[3:]) + "\n{broken\n")
    config = write_config(
        tmp_path,
        f"uri: gs://{BUCKET}/t1/in/*.jsonl\ncolumn_mapping: {{response: answer}}\nid_column: case\nslice_columns: [ds]",
        f"parquet: gs://{BUCKET}/t1/out",
        extra="run_id: r1",
    )
    out = evalbeam("run", config).stdout
    assert "read 7 = scored 6 + dead-lettered 1" in out
    assert f"gs://{BUCKET}/t1/in/part-1.jsonl:4: invalid JSON" in out
    names = sorted(b.name for b in gcs().list_blobs(prefix="t1/out/r1/"))
    assert {n.split("/")[3] for n in names} == set(schema.TABLES) | {"_evalbeam_run.json"}

    shown = evalbeam("show", "r1", "--parquet", f"gs://{BUCKET}/t1/out").stdout
    assert "run r1 (cloud-eval" in shown
    exact = next(line for line in shown.splitlines() if line.startswith("exact_match") and "overall" in line)
    assert exact.split()[2:5] == ["6", "0", "0.6667"]  # n, errors, mean: rows 0 and 3 are wrong
    listed = evalbeam("runs", "--parquet", f"gs://{BUCKET}/t1/out").stdout
    assert listed.splitlines()[2].split()[:2] == ["r1", "cloud-eval"]


def test_gcs_csv_in_bigquery_out_reruns_replace_and_views(cloud, tmp_path):
    def upload(data):
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(data[0]))
        w.writeheader()
        for r in data:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
        gcs().blob("t2/in/data.csv").upload_from_string(buf.getvalue())

    dataset = f"{PROJECT}.evals_csv"
    config = write_config(
        tmp_path,
        f"uri: gs://{BUCKET}/t2/in/*.csv\ncolumn_mapping: {{response: answer}}\nid_column: case\nslice_columns: [ds]",
        f"bigquery: {dataset}",
    )
    beam_flags = [f"--temp_location=gs://{BUCKET}/tmp"]

    upload(agent_rows(8, wrong_every=4))  # 2 wrong of 8
    evalbeam("run", config, "--set", "run_date=2026-11-19", *beam_flags)
    run1 = "cloud-eval-20261119"
    assert rows(f"SELECT COUNT(*) AS n FROM `{dataset}.instances` WHERE run_id = '{run1}'")[0]["n"] == 8
    assert rows(f"SELECT mean FROM `{dataset}.summary` WHERE metric = 'exact_match' AND slice = 'overall'")[0]["mean"] == 0.75

    table = bq().get_table(f"{dataset}.metric_results")
    assert table.time_partitioning.field == "run_date" and table.clustering_fields == ["metric", "run_id"]
    assert {f.name for f in bq().get_table(f"{dataset}.instances").schema} >= {"run_id", "run_date", "instance_id", "ds", "response"}

    # the same night again, on different data: its rows replace the first attempt's
    upload(agent_rows(4, prefix="d"))  # all right
    evalbeam("run", config, "--set", "run_date=2026-11-19", *beam_flags)
    assert rows(f"SELECT COUNT(*) AS n, MIN(instance_id) AS first FROM `{dataset}.instances`") == [{"n": 4, "first": "d0"}]
    assert rows(f"SELECT COUNT(*) AS n FROM `{dataset}.runs`")[0]["n"] == 1
    assert rows(f"SELECT COUNT(*) AS n FROM `{dataset}.metric_results`")[0]["n"] == 4 * 3
    assert rows(f"SELECT mean FROM `{dataset}.summary` WHERE metric = 'exact_match' AND slice = 'overall'")[0]["mean"] == 1.0

    # the next night
    upload(agent_rows(10, prefix="e", wrong_every=2))  # 5 wrong of 10
    evalbeam("run", config, "--set", "run_date=2026-11-20", *beam_flags)
    run2 = "cloud-eval-20261120"

    latest = rows(f"SELECT run_id, metric, slice, mean FROM `{dataset}.latest_summary` WHERE name = 'cloud-eval'")
    assert {r["run_id"] for r in latest} == {run2}
    trend = rows(f"SELECT run_date, mean FROM `{dataset}.metric_trend` WHERE metric = 'exact_match' ORDER BY run_date")
    assert [(str(r["run_date"]), r["mean"]) for r in trend] == [("2026-11-19", 1.0), ("2026-11-20", 0.5)]
    comparison = rows(f"SELECT previous_run_id, mean, previous_mean, mean_difference FROM `{dataset}.run_comparison` "
                      f"WHERE run_id = '{run2}' AND metric = 'exact_match' AND slice = 'overall'")
    assert comparison == [{"previous_run_id": run1, "mean": 0.5, "previous_mean": 1.0, "mean_difference": -0.5}]
    assert not [t.table_id for t in bq().list_tables(dataset) if t.table_id.startswith("_evalbeam_staging_")]
    assert not list(gcs().list_blobs(prefix="tmp/evalbeam-staging/"))

    listed = evalbeam("runs", "--bigquery", dataset, "--eval", "cloud-eval").stdout.splitlines()
    assert [line.split()[0] for line in listed[2:]] == [run2, run1]
    shown = evalbeam("show", run2, "--config", config).stdout
    assert "read 10 = scored 10 + dead-lettered 0" in shown and f"results: BigQuery {dataset}" in shown


def test_a_job_dying_half_way_leaves_the_previous_rows(cloud, tmp_path):
    dataset = f"{PROJECT}.evals_dying"
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in agent_rows(5)) + "\n")
    config = write_config(
        tmp_path,
        f"uri: {data}\ncolumn_mapping: {{response: answer}}\nid_column: case",
        f"bigquery: {dataset}",
        metrics=["exact_match", '{name: die_on_marker, function: "tests.custom_metrics:die_on_marker", inputs: [response]}'],
        extra="run_id: nightly",
    )
    evalbeam("run", config)
    before = rows(f"SELECT instance_id, metric, score FROM `{dataset}.metric_results` ORDER BY instance_id, metric")
    assert len(before) == 10

    dying = agent_rows(6, prefix="z")
    dying[3]["answer"] = "die now"
    data.write_text("\n".join(json.dumps(r) for r in dying) + "\n")
    died = evalbeam("run", config, check=False, process=True)  # the process dies
    assert died.returncode == 17
    assert rows(f"SELECT instance_id, metric, score FROM `{dataset}.metric_results` ORDER BY instance_id, metric") == before
    assert rows(f"SELECT COUNT(*) AS n FROM `{dataset}.runs`")[0]["n"] == 1

    dying[3]["answer"] = "yes"
    data.write_text("\n".join(json.dumps(r) for r in dying) + "\n")
    evalbeam("run", config)
    after = rows(f"SELECT DISTINCT instance_id FROM `{dataset}.instances` ORDER BY instance_id")
    assert [r["instance_id"] for r in after] == [f"z{i}" for i in range(6)]


@pytest.fixture(scope="module")
def source_table(cloud):
    from google.cloud import bigquery

    client = bq()
    client.create_dataset(f"{PROJECT}.src", exists_ok=True)
    call = [bigquery.SchemaField("tool_name", "STRING"), bigquery.SchemaField("tool_input", "JSON")]
    schema = [
        bigquery.SchemaField("case", "STRING"), bigquery.SchemaField("ds", "STRING"),
        bigquery.SchemaField("answer", "STRING"), bigquery.SchemaField("reference", "STRING"),
        bigquery.SchemaField("predicted_trajectory", "RECORD", "REPEATED", fields=call),
        bigquery.SchemaField("reference_trajectory", "RECORD", "REPEATED", fields=call),
        bigquery.SchemaField("latency_in_seconds", "FLOAT64"),
    ]
    client.create_table(bigquery.Table(f"{PROJECT}.src.agents", schema=schema), exists_ok=True)

    def traj(calls):
        return [{"tool_name": c["tool_name"], "tool_input": json.dumps(c["tool_input"])} for c in calls]

    data = [
        {"case": "b1", "ds": "x", "answer": "yes", "reference": "yes", "predicted_trajectory": traj([T, U]), "reference_trajectory": traj([T, U]), "latency_in_seconds": 1.0},
        {"case": "b2", "ds": "x", "answer": "no", "reference": "yes", "predicted_trajectory": traj([U, T]), "reference_trajectory": traj([T, U]), "latency_in_seconds": 3.0},
        {"case": "b3", "ds": "y", "answer": None, "reference": "yes", "predicted_trajectory": [], "reference_trajectory": []},
        {"case": "b4", "ds": "y", "answer": "yes", "reference": "yes", "predicted_trajectory": [{"tool_name": "get", "tool_input": "[1]"}], "reference_trajectory": traj([T])},
        {"case": "b5", "ds": "y", "answer": "yes", "reference": "yes", "predicted_trajectory": traj([T]), "reference_trajectory": traj([T])},
    ]
    assert client.insert_rows_json(f"{PROJECT}.src.agents", data) == []
    return f"{PROJECT}.src.agents"


def test_bigquery_table_input_with_repeated_records_and_json(source_table, tmp_path):
    config = write_config(
        tmp_path,
        f"uri: bq://{source_table}\ncolumn_mapping: {{response: answer}}\nid_column: case\nslice_columns: [ds]",
        f"parquet: {tmp_path / 'out'}",
        extra="run_id: from-table",
    )
    out = evalbeam("run", config).stdout
    # b3 (no answer) loses only the metric needing it; b4's malformed trajectory dead-letters it
    assert "read 5 = scored 4 + dead-lettered 1" in out
    assert "exact_match: 1 x missing input response" in out
    assert "'tool_input' must be an object, got list" in out
    from tests.helpers import table

    rows = table(tmp_path / "out" / "from-table", "metric_results")
    assert {r["error"] for r in rows if r["instance_id"] == "b3" and r["metric"] == "exact_match"} == {
        "missing input response"}
    results = {(r["instance_id"], r["metric"]): r["score"] for r in rows}
    assert results[("b1", "trajectory_exact_match")] == 1.0 and results[("b2", "trajectory_exact_match")] == 0.0
    assert results[("b2", "trajectory_recall")] == 1.0 and results[("b5", "exact_match")] == 1.0
    assert results[("b2", "latency_in_seconds")] == 3.0


def test_bigquery_query_input(source_table, tmp_path):
    config = write_config(
        tmp_path,
        f"query: \"SELECT * FROM `{source_table}` WHERE ds = 'x'\"\ncolumn_mapping: {{response: answer}}\nid_column: case",
        f"parquet: {tmp_path / 'out'}",
        extra="run_id: from-query",
    )
    out = evalbeam("run", config).stdout
    assert "read 2 = scored 2 + dead-lettered 0" in out
    assert "config ok: 3 metrics; input bq://query; columns checked on its schema" in evalbeam("validate", config).stdout


def test_empty_bigquery_input_is_an_empty_run(cloud, tmp_path):
    from google.cloud import bigquery

    bq().create_dataset(f"{PROJECT}.src_empty", exists_ok=True)
    bq().create_table(bigquery.Table(f"{PROJECT}.src_empty.t", schema=[bigquery.SchemaField("response", "STRING"),
                                                                         bigquery.SchemaField("reference", "STRING")]), exists_ok=True)
    config = write_config(tmp_path, f"uri: bq://{PROJECT}.src_empty.t", f"bigquery: {PROJECT}.evals_empty",
                          metrics=["exact_match"], extra="run_id: empty-night")
    # an empty input fails the run, naming it (a night that read nothing is no success) ...
    refused = evalbeam("run", config, check=False)
    assert refused.returncode == 1
    assert f"no record was read from input.uri bq://{PROJECT}.src_empty.t" in refused.stdout
    # ... unless the config says it is expected
    out = evalbeam("run", config, "--set", "input.allow_empty=true", "--set", "run_id=empty-expected").stdout
    assert "read 0 = scored 0 + dead-lettered 0" in out
    assert rows(f"SELECT run_id, read_count FROM `{PROJECT}.evals_empty.runs` ORDER BY run_id") == [
        {"run_id": "empty-expected", "read_count": 0}, {"run_id": "empty-night", "read_count": 0}]


@pytest.mark.parametrize(
    "input_block,output_block,message",
    [
        ("uri: gs://no-such-bucket/in/*.jsonl", "parquet: out/", "input.uri: cannot list 'gs://no-such-bucket/in/*.jsonl': the bucket or path does not exist or is not reachable"),
        (f"uri: gs://{BUCKET}/nothing-here/*.jsonl", "parquet: out/", f"input.uri: no file matches 'gs://{BUCKET}/nothing-here/*.jsonl'"),
        (f"uri: bq://{PROJECT}.src.missing_table", "parquet: out/", f"input.uri: BigQuery table {PROJECT}.src.missing_table does not exist"),
        ("query: SELEC response FROM t", "parquet: out/", "input.query: BigQuery refused the query: Syntax error"),
        (f"uri: bq://{PROJECT}.src.t;DROP", "parquet: out/", "is not a valid BigQuery table"),
        (f"uri: {ROOT}/configs/data/agents.jsonl\ncolumn_mapping: {{response: answer}}", "parquet: gs://no-such-bucket/out", "output.parquet: bucket 'no-such-bucket' does not exist"),
        (f"uri: {ROOT}/configs/data/agents.jsonl\ncolumn_mapping: {{response: answer}}", "bigquery: local-project.bad-name", "output.bigquery: String should match pattern"),
    ],
)
def test_bad_cloud_resources_fail_before_any_work(cloud, tmp_path, input_block, output_block, message):
    config = write_config(tmp_path, input_block, output_block, metrics=["exact_match"])
    result = evalbeam("run", config, check=False)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_dataflow_dry_run_builds_the_whole_job(cloud, monkeypatch):
    """The Dataflow submission path, offline: the job is built, every DoFn in it
    unpickles, and an API key in the environment appears nowhere in it."""
    from apache_beam.internal import pickler
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability import common_urns, python_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from evalbeam.configs import load_config
    from evalbeam.pipelines import evaluate
    from evalbeam.pipelines.commands.beam_flags import with_setup_file as _with_setup_file

    secret = "AIzaSy-not-a-real-key-but-secret-0123456789"
    monkeypatch.setenv("GOOGLE_API_KEY", secret)
    gcs().blob("dry/in/agents.jsonl").upload_from_filename("configs/data/agents.jsonl")
    config = load_config("configs/demo.yaml", [f"input.uri=gs://{BUCKET}/dry/in/*.jsonl",
                                               f"output.parquet=gs://{BUCKET}/dry/out", "run_id=dry"])
    options = PipelineOptions(_with_setup_file([
        "--runner=DataflowRunner", f"--project={PROJECT}", "--region=us-central1",
        f"--temp_location=gs://{BUCKET}/tmp", "--dry_run=True"]))
    _, result = evaluate.run(config, options)
    job = result.job
    proto = job.proto_pipeline
    # the pipeline is its named stages (pipelines.stages), each holding its steps
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert {"Read", "Scoring", "Summaries", "Write"} <= {n.split("/")[0] for n in names}
    assert {"Read/Validate", "Scoring/Score", "Summaries/Summarize", "Summaries/RunRecord", "Write/Write_instances",
            "Write/Write_metric_results", "Write/Write_summary", "Write/Write_runs", "Write/Write_dead_letter"} <= names
    dofns = set()
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            if payload.do_fn.urn == python_urns.PICKLED_DOFN_INFO:
                dofns.add(type(pickler.loads(payload.do_fn.payload)[0]).__name__)
    assert {"ParseFileFn", "ToInstanceFn", "ScoreFn"} <= dofns
    # the job holds the run_id: its last step, after the folder is put in place, gives the lock back
    by_name = {t.unique_name: t for t in proto.components.transforms.values()}
    [replaced] = by_name["Write/ReplaceRunFolder/Replace"].outputs.values()
    assert list(by_name["Write/ReleaseRunLock/Release"].inputs.values()) == [replaced]
    assert not gcs().blob("dry/out/_evalbeam_attempts/dry.lock").exists()  # a dry run submits no job: given back
    assert job.options.view_as(__import__("apache_beam").options.pipeline_options.SetupOptions).setup_file.endswith("setup.py")
    assert secret not in job.json()
    assert secret.encode() not in proto.SerializeToString()
    assert secret not in str(job.options.get_all_options())


def test_judge_cache_in_bigquery_is_reused(cloud, tmp_path, monkeypatch):
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", "AIzaSy-cloud-test-key")
    dataset = f"{PROJECT}.evals_judged"
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"j{i}", "response": f"answer {i} #score={1 + i % 5}"}) + "\n" for i in range(6)))
    with JudgeServer() as server:
        def config(run_id, cache=None):
            judge = {"base_url": server.url, "requests_per_minute": 6000}
            if cache:
                judge["cache"] = cache
            return write_config(tmp_path, f"uri: {data}\nid_column: id", f"bigquery: {dataset}", metrics=["evalbeam_fluency"],
                                extra=yaml.safe_dump({"run_id": run_id, "judge": judge}))
        evalbeam("run", config("judged-1"))
        calls = server.stats.requests
        assert rows(f"SELECT COUNT(*) AS n FROM `{dataset}.judge_cache` WHERE run_id = 'judged-1'") == [{"n": 6}]
        evalbeam("run", config("judged-2", cache=f"bq://{dataset}.judge_cache"))
        assert server.stats.requests == calls  # every judgment came from the BigQuery cache
    assert rows(f"SELECT judge_cache_hits, judge_calls FROM `{dataset}.runs` WHERE run_id = 'judged-2'") == [
        {"judge_cache_hits": 6, "judge_calls": 0}]
    scores = rows(f"SELECT run_id, instance_id, score FROM `{dataset}.metric_results` ORDER BY instance_id, run_id")
    assert [r["score"] for r in scores if r["run_id"] == "judged-1"] == [r["score"] for r in scores if r["run_id"] == "judged-2"]
    assert [r["score"] for r in scores if r["run_id"] == "judged-1"] == [1.0, 2.0, 3.0, 4.0, 5.0, 1.0]


def test_dataflow_dry_run_with_judge_metrics_keeps_the_key_out(cloud, monkeypatch, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions

    from evalbeam.configs import load_config
    from evalbeam.pipelines import evaluate

    secret = "AIzaSy-judge-key-must-not-leak-987654321"
    monkeypatch.setenv("GOOGLE_API_KEY", secret)
    gcs().blob("dryj/in/data.jsonl").upload_from_string(json.dumps({"response": "hi", "baseline_model_response": "hello"}) + "\n")
    config_path = write_config(tmp_path, f"uri: gs://{BUCKET}/dryj/in/*.jsonl", f"parquet: gs://{BUCKET}/dryj/out",
                               metrics=["evalbeam_fluency", "pairwise_evalbeam_fluency"],
                               extra="run_id: dryj\njudge: {base_url: 'http://127.0.0.1:9', cache: []}")
    options = PipelineOptions(["--runner=DataflowRunner", f"--project={PROJECT}", "--region=us-central1",
                               f"--temp_location=gs://{BUCKET}/tmp", "--dry_run=True"])
    _, result = evaluate.run(load_config(config_path), options)
    job = result.job
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert any(n.startswith("Judges/Judge/Answer/CallJudge") for n in names)
    assert any(n.startswith("Judges/Judge/Answer/JoinCache") for n in names)
    assert secret not in job.json()
    assert secret.encode() not in job.proto_pipeline.SerializeToString()
    assert secret not in str(job.options.get_all_options())


def test_compressed_input_on_gcs_keeps_line_numbers(cloud, tmp_path):
    import gzip

    rows = agent_rows(4)
    jsonl = "\n".join(json.dumps(r) for r in rows[:2]) + "\n{broken\n" + "\n".join(json.dumps(r) for r in rows[2:]) + "\n"
    gcs().blob("gz/in/a.jsonl.gz").upload_from_string(gzip.compress(jsonl.encode()))
    config = write_config(tmp_path, f"uri: gs://{BUCKET}/gz/in/*.jsonl.gz\ncolumn_mapping: {{response: answer}}\nid_column: case",
                          f"parquet: {tmp_path}/out", metrics=["exact_match"], extra="run_id: gz1")
    out = evalbeam("run", config).stdout
    assert "read 5 = scored 4 + dead-lettered 1" in out
    assert f"gs://{BUCKET}/gz/in/a.jsonl.gz:3: invalid JSON" in out
    assert "source lines 5 = 4 scored + 1 dead-lettered + 0 holding no record" in out
