"""Airflow (Cloud Composer) DAG: run an evalbeam config every night on Dataflow,
through the same Flex Template and launch request as the Cloud Scheduler job.

Set the Airflow variables `evalbeam_project`, `evalbeam_region`,
`evalbeam_template` (gs:// path of the built template), `evalbeam_config`
(gs:// path of the YAML) and `evalbeam_temp_location`; they are read when the
task runs (Jinja), not when the DAG file is parsed. Each run
evaluates for its logical date ({{ ds }}), so backfills and re-runs of a night
replace that night's results.
"""
from __future__ import annotations

import datetime as dt

from airflow import DAG
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

from pipelines.nightly import launch_body

with DAG(
    dag_id="evalbeam_nightly",
    schedule="0 2 * * *",
    start_date=dt.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["evalbeam"],
) as dag:
    DataflowStartFlexTemplateOperator(
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
