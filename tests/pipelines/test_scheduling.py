"""The Flex Template entry point, its metadata, and the nightly launch request
that Cloud Scheduler sends (the Airflow DAG's, rendered by Airflow itself:
tests/pipelines/test_nightly_dag.py)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalbeam.pipelines import flex_main
from evalbeam.pipelines.nightly import launch_body
from tests.helpers import ROOT, table

METADATA = json.loads((ROOT / "pipelines/flex_template/metadata.json").read_text())
PARAMS = {p["name"]: p for p in METADATA["parameters"]}


@pytest.mark.slow
def test_template_entry_point_runs_a_config_for_a_run_date(tmp_path):
    code = flex_main.main([
        "--config=configs/demo.yaml", "--run_date=2026-11-20",
        f"--set=output.parquet={tmp_path};input.slice_columns=[]",
    ])
    assert code == 0
    runs = table(tmp_path / "demo-agents-20261120", "runs")
    assert [(r["run_id"], str(r["run_date"]), r["scored_count"]) for r in runs] == [("demo-agents-20261120", "2026-11-20", 15)]
    assert {r["slice"] for r in table(tmp_path / "demo-agents-20261120", "summary")} == {"overall"}


def test_template_entry_point_reports_config_errors(tmp_path):
    assert flex_main.main(["--config=configs/demo.yaml", "--set=metrics.0.params.nope=1"]) == 2
    assert flex_main.main([]) == 2


def test_template_options_do_not_break_other_pipelines():
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    # flex_main is imported: an ordinary pipeline's options still parse without --config
    assert PipelineOptions([]).view_as(StandardOptions).runner is None


def test_metadata_declares_exactly_the_entry_points_options():
    parser_options = set()
    flex_main.TemplateOptions._add_argparse_args(type("P", (), {"add_argument": lambda self, name, **kw: parser_options.add(name.lstrip("-"))})())
    assert set(PARAMS) == parser_options
    assert [n for n, p in PARAMS.items() if not p.get("isOptional")] == ["config"]
    config_re, date_re = PARAMS["config"]["regexes"][0], PARAMS["run_date"]["regexes"][0]
    assert re.match(config_re, "gs://bucket/evals/agents.yaml") and not re.match(config_re, "configs/demo.yaml")
    assert re.match(date_re, "2026-11-20") and not re.match(date_re, "20261120")


def test_launch_body_for_cloud_scheduler():
    out = subprocess.run([sys.executable, "-m", "evalbeam.pipelines.nightly", "--template=gs://b/templates/evalbeam.json",
                          "--config=gs://b/evals/agents.yaml", "--temp-location=gs://b/tmp"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    body = json.loads(out)["launchParameter"]
    assert body["containerSpecGcsPath"] == "gs://b/templates/evalbeam.json"
    assert body["parameters"] == {"config": "gs://b/evals/agents.yaml"}  # no run_date: the launch day (UTC)
    assert set(body["parameters"]) <= set(PARAMS) and body["environment"] == {"tempLocation": "gs://b/tmp"}
    with pytest.raises(ValueError, match="not a valid Dataflow job name"):
        launch_body("gs://b/t.json", "gs://b/c.yaml", job_name="Nightly_Job")
    with pytest.raises(ValueError, match="gs:// path"):
        launch_body("templates/evalbeam.json", "gs://b/c.yaml")


def test_every_image_the_flex_template_builds_from_is_pinned_by_version():
    """No base image or build step image moves under a rebuild: each names a version (a tag that is not
    `latest`, or a digest), in the Dockerfile's FROM and COPY --from lines and in Cloud Build's steps."""
    dockerfile = (ROOT / "pipelines/flex_template/Dockerfile").read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, re.M | re.I))
    images = re.findall(r"^FROM (\S+)", dockerfile, re.M | re.I)
    images += [i for i in re.findall(r"--from=(\S+)", dockerfile) if i not in stages]
    build = yaml.safe_load((ROOT / "pipelines/flex_template/cloudbuild.yaml").read_text())
    images += [step["name"] for step in build["steps"]]
    assert len(images) >= 3, images
    for image in images:
        if "@sha256:" in image:
            continue
        name, _, tag = image.rpartition(":")
        assert name and tag and "/" not in tag and tag != "latest", f"{image} is not pinned by version"


def test_dockerfile_matches_the_project():
    dockerfile = (ROOT / "pipelines/flex_template/Dockerfile").read_text()
    env = dict(re.findall(r"^ENV (\w+)=(\S+)$", dockerfile, re.M))
    for key in ("FLEX_TEMPLATE_PYTHON_PY_FILE", "FLEX_TEMPLATE_PYTHON_SETUP_FILE"):
        assert (ROOT / Path(env[key]).relative_to("/template")).exists(), key
    beam = re.search(r'"apache-beam\[gcp\]==([\d.]+)"', (ROOT / "setup.py").read_text()).group(1)
    assert f"apache/beam_python3.11_sdk:{beam}" in dockerfile
    # the image installs the lock named by its LOCK argument (default: Cloud Build's _LOCK, the default lock)
    lock = re.search(r"^ARG LOCK=(\S+)$", dockerfile, re.M).group(1)
    assert "-r ${LOCK}" in dockerfile and lock == "requirements.lock"
    build = yaml.safe_load((ROOT / "pipelines/flex_template/cloudbuild.yaml").read_text())
    assert "LOCK=${_LOCK}" in build["steps"][0]["args"] and build["substitutions"]["_LOCK"] == lock
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK \?= requirements\.lock$", makefile, re.M) and "_LOCK=$(LOCK)" in makefile
    for name in (lock, "requirements-agent.lock"):  # what a user may pass as LOCK
        assert (ROOT / name).is_file(), name
