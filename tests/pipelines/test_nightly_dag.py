"""pipelines/nightly_dag.py as Airflow runs it: loaded by Airflow's DagBag, its
launch request rendered by `airflow tasks render` for a logical date, and its
regression check run by `airflow dags test` against the BigQuery emulator, on
the real `regressions` view of runs evalbeam wrote there.

Airflow 3 with the Google provider lives in its own venv, .airflow (`make
airflow`, from tests/airflow_env/requirements.lock); every Airflow step is a
subprocess of that venv's Python or `airflow` command, with its own
AIRFLOW_HOME (a SQLite metadata database) and a DAGs folder holding only the
files the README says to deploy."""
import ast
import json
import os
import re
import shutil
import subprocess

import pytest

from evalbeam.pipelines.nightly import launch_body
from tests.helpers import ROOT, evalbeam
from tests.e2e.test_compare import cases, write_run

AIRFLOW = ROOT / ".airflow"
# as in the README: the repository's pipelines/ files, deployed as DAGS_FOLDER/evalbeam/pipelines/
DEPLOYED = ("pipelines/__init__.py", "pipelines/nightly.py", "pipelines/nightly_dag.py")
METADATA = json.loads((ROOT / "pipelines/flex_template/metadata.json").read_text())
PARAMS = {p["name"]: p for p in METADATA["parameters"]}
DATASET = "local-project.evals_nightly"  # the emulator's project (tests/emulators/control.py)
VARIABLES = {
    "evalbeam_project": "my-project",
    "evalbeam_region": "europe-west1",
    "evalbeam_template": "gs://my-bucket/templates/evalbeam.json",
    "evalbeam_config": "gs://my-bucket/evals/nightly.yaml",
    "evalbeam_temp_location": "gs://my-bucket/tmp",
    "evalbeam_dataset": DATASET,
    "evalbeam_eval_name": "cmp-eval",  # tests/metrics/statistics/test_compare.write_run's config name
}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """Run the .airflow venv's `airflow` (or `python`) with an Airflow home whose
    DAGs folder is a Composer-style deployment, Variables and the Google Cloud
    connection from the environment (Airflow's environment secrets backend),
    and the emulators' variables when the `cloud` fixture has set them."""
    if not (AIRFLOW / ".installed").exists():
        pytest.fail("Airflow is not installed: run `make airflow` (or `make test`)")
    root = tmp_path_factory.mktemp("airflow")
    dags = root / "dags"
    for path in DEPLOYED:
        (dags / "evalbeam" / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, dags / "evalbeam" / path)
    (root / "home" / "config").mkdir(parents=True)
    shutil.copy(ROOT / "tests/airflow_env/airflow_local_settings.py", root / "home" / "config")

    def run(*args, program="airflow", check=True):
        # Nothing of the test's own Python (its venv, PYTHONPATH, the repository) leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
        env.update({f"AIRFLOW_VAR_{k.upper()}": v for k, v in VARIABLES.items()})
        env.update(
            AIRFLOW_HOME=str(root / "home"), AIRFLOW__CORE__DAGS_FOLDER=str(dags), AIRFLOW__CORE__LOAD_EXAMPLES="False",
            # the emulator takes any caller: the provider's anonymous credentials, billed to its project
            AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT=json.dumps({"conn_type": "google_cloud_platform", "extra": {
                "is_anonymous": True, "project": DATASET.split(".")[0]}}),
        )
        result = subprocess.run(["timeout", "600", str(AIRFLOW / "bin" / program), *map(str, args)],
                                capture_output=True, text=True, cwd=root, env=env)
        if check and result.returncode != 0:
            raise AssertionError(f"{program} {args} failed ({result.returncode}):\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}")
        return result

    run.dags = dags
    run("db", "migrate")
    run("dags", "reserialize")  # parse the folder into the database, as the DAG processor does
    return run


def load_dags(airflow, out):
    airflow(ROOT / "tests/airflow_env/load_dags.py", airflow.dags, out, program="python")
    return json.loads(out.read_text())


@pytest.mark.airflow
def test_the_dag_loads_in_airflow_with_no_import_errors(airflow, tmp_path):
    loaded = load_dags(airflow, tmp_path / "bag.json")
    assert loaded["import_errors"] == {} and loaded["warnings"] == {}  # deprecations included
    assert loaded["dags"] == {"evalbeam_nightly": {
        "evaluate": {"operator": "DataflowStartFlexTemplateOperator", "upstream": [], "retries": 0},
        "check_regressions": {"operator": "BigQueryCheckOperator", "upstream": ["evaluate"], "retries": 0},
    }}
    # the same DagBag reports a deployment that misses a file, so the assertion above can fail
    (airflow.dags / "evalbeam/pipelines/nightly.py").rename(airflow.dags / "nightly.py.away")
    try:
        loaded = load_dags(airflow, tmp_path / "bag.json")
    finally:
        (airflow.dags / "nightly.py.away").rename(airflow.dags / "evalbeam/pipelines/nightly.py")
    assert "No module named 'evalbeam.pipelines.nightly'" in loaded["import_errors"]["evalbeam/pipelines/nightly_dag.py"]
    assert loaded["dags"] == {}


def rendered_fields(stdout: str) -> dict[str, str]:
    """`airflow tasks render` prints each template field under a '# property: NAME' banner."""
    parts = re.split(r"^# -+\n# property: (\w+)\n# -+\n", stdout, flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


@pytest.mark.airflow
def test_the_launch_task_renders_the_flex_template_request_for_its_logical_date(airflow):
    fields = rendered_fields(airflow("tasks", "render", "evalbeam_nightly", "evaluate", "2026-11-21").stdout)
    assert (fields["project_id"], fields["location"]) == ("my-project", "europe-west1")
    body = ast.literal_eval(fields["body"])
    # what Cloud Scheduler would send for that night, built from the Variables' values
    assert body == launch_body(template="gs://my-bucket/templates/evalbeam.json", config="gs://my-bucket/evals/nightly.yaml",
                               job_name="evalbeam-20261121", run_date="2026-11-21", temp_location="gs://my-bucket/tmp")
    parameters = body["launchParameter"]["parameters"]
    assert parameters == {"config": "gs://my-bucket/evals/nightly.yaml", "run_date": "2026-11-21"}
    assert set(parameters) <= set(PARAMS)
    assert re.match(PARAMS["run_date"]["regexes"][0], parameters["run_date"])
    assert re.match(PARAMS["config"]["regexes"][0], parameters["config"])


def night(airflow, date: str) -> tuple[str, str]:
    """`airflow dags test` of one night, the Dataflow launch marked done (there is no
    Dataflow here), the check run for real; the DAG run's state and the log."""
    result = airflow("dags", "test", "evalbeam_nightly", date, "--mark-success-pattern", "^evaluate$", check=False)
    log = result.stdout + result.stderr
    state = re.search(r"DagRun Finished: dag_id=evalbeam_nightly, logical_date=(\S+) .*?, state=(\w+)", log)
    assert state and state.group(1) == date, log[-5000:]
    return state.group(2), log


@pytest.mark.airflow
@pytest.mark.emulators
def test_the_check_fails_a_night_that_regressed_and_keeps_its_results(airflow, cloud, tmp_path):
    from tests.emulators.control import BUCKET, PROJECT
    from evalbeam.transforms.local_cloud import bigquery_client

    def count(sql):
        return list(bigquery_client(PROJECT).query(sql).result())[0][0]

    flags = [f"--temp_location=gs://{BUCKET}/tmp"]

    def run(date, rows):  # what the night's Dataflow job does, on the DirectRunner
        config = write_run(tmp_path, date, rows, None, {"output": {"bigquery": DATASET}, "compare_with": "previous"})
        evalbeam("run", config, "--set", f"run_date={date}", *flags)

    run("2026-11-20", cases(False))  # the first night: nothing to compare with
    run("2026-11-21", cases(True))  # group b regressed (tests/metrics/statistics/test_compare.cases)
    state, log = night(airflow, "2026-11-21")
    assert state == "failed", log[-5000:]
    assert f"FROM `{DATASET}.regressions`" in log and "run_date = DATE '2026-11-21'" in log  # rendered by Airflow
    failure = re.search(r"Test failed\.(.|\n)*?Results:\n\[(.*)\]", log)
    assert failure, log[-5000:]
    flagged = failure.group(2)
    for metric in ("exact_match", "rouge_1", "latency_in_seconds"):  # the regressed metrics, named in the log
        assert f"{metric} / grp=b" in flagged and f"{metric} / overall" in flagged
    assert "grp=a" not in flagged
    # the night's results are kept: its comparison rows and the flagged view rows are still there
    assert count(f"SELECT COUNT(*) FROM `{DATASET}.comparisons` WHERE run_date = '2026-11-21'") == 9
    assert count(f"SELECT COUNT(*) FROM `{DATASET}.regressions` WHERE run_date = '2026-11-21'") == 6
    assert count(f"SELECT COUNT(*) FROM `{DATASET}.metric_results` WHERE run_id = 'cmp-eval-20261121'") > 0

    run("2026-11-22", cases(True))  # the same answers again: no regression
    state, log = night(airflow, "2026-11-22")
    assert state == "success", log[-5000:]
    assert "Record: [True, 'none']" in log
    assert count(f"SELECT COUNT(*) FROM `{DATASET}.comparisons` WHERE run_date = '2026-11-22'") == 9
