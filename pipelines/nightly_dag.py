"""Airflow (Cloud Composer) DAG: run an evalbeam config every night on Dataflow,
through the same Flex Template and launch request as the Cloud Scheduler job,
then fail the night in Airflow if evalbeam flagged a regression.

Tasks:
- `evaluate` launches the template for the run's logical date ({{ ds }}) and
  waits for the Dataflow job, so backfills and re-runs of a night replace that
  night's results.
- `check_regressions` (after `evaluate`) queries the `regressions` BigQuery view
  for that eval and night with Airflow's BigQueryCheckOperator: it fails when
  the night has flagged rows, naming them in its log; the results stay where
  the run wrote them (the check only reads). The config needs
  `compare_with: previous` (or a fixed baseline) and `output.bigquery` for the
  comparison rows to exist; a night with no comparison passes, and so does a
  re-run of a night older than the eval's latest compared one (the view holds
  only that latest night).

Airflow variables, read when a task runs (Jinja), not when this file is parsed:
  evalbeam_project        Google Cloud project of the Dataflow job
  evalbeam_region         Dataflow region
  evalbeam_template       gs:// path of the built Flex Template file
  evalbeam_config         gs:// path of the evalbeam YAML config
  evalbeam_temp_location  gs:// folder for Dataflow's temporary files
  evalbeam_dataset        PROJECT.DATASET the config writes to (output.bigquery)
  evalbeam_eval_name      the config's `name`

Deploy with pipelines/__init__.py and pipelines/nightly.py beside it, as
DAGS_FOLDER/evalbeam/pipelines/ (see docs/cloud.md): the module it imports is
evalbeam.pipelines.nightly, and `evalbeam` needs no __init__.py (a namespace package).
"""
from __future__ import annotations

import datetime as dt

from airflow import DAG
from airflow.providers.google.cloud.operators.bigquery import BigQueryCheckOperator
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

from evalbeam.pipelines.nightly import launch_body

# One row; every value must be true for the check to pass (SQLCheckOperator's rule).
# `regressed` is never empty, so only `no_regressions` decides; it names the flagged
# metric/slice pairs in the task's log when the check fails.
REGRESSIONS_CHECK = """\
SELECT COUNT(*) = 0 AS no_regressions,
       IFNULL(STRING_AGG(CONCAT(metric, ' / ', slice), ', ' ORDER BY metric, slice), 'none') AS regressed
FROM `{{ var.value.evalbeam_dataset }}.regressions`
WHERE name = '{{ var.value.evalbeam_eval_name }}' AND run_date = DATE '{{ ds }}'
"""

with DAG(
    dag_id="evalbeam_nightly",
    schedule="0 2 * * *",
    start_date=dt.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["evalbeam"],
    doc_md=__doc__,
) as dag:
    evaluate = DataflowStartFlexTemplateOperator(
        task_id="evaluate",
        project_id="{{ var.value.evalbeam_project }}",
        location="{{ var.value.evalbeam_region }}",
        body=launch_body(
            template="{{ var.value.evalbeam_template }}",
            config="{{ var.value.evalbeam_config }}",
            job_name="evalbeam-{{ ds_nodash }}",
            run_date="{{ ds }}",
            temp_location="{{ var.value.evalbeam_temp_location }}",
        ),
        wait_until_finished=True,
    )
    check_regressions = BigQueryCheckOperator(
        task_id="check_regressions",
        sql=REGRESSIONS_CHECK,
        use_legacy_sql=False,
        retries=0,  # a regression is a result, not a transient failure
    )
    evaluate >> check_regressions
