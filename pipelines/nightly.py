"""The Flex Template launch request that nightly schedulers send.

One definition for both ways of scheduling: `make schedule-nightly` (Cloud
Scheduler posting to the Dataflow flexTemplates:launch API) writes it with
`python -m evalbeam.pipelines.nightly`, and the Airflow DAG (pipelines/nightly_dag.py)
passes it to DataflowStartFlexTemplateOperator.
"""
from __future__ import annotations

import argparse
import json
import re
from typing import Any


def launch_body(template: str, config: str, job_name: str = "evalbeam-nightly", run_date: str | None = None,
                temp_location: str | None = None, service_account: str | None = None,
                image: str | None = None) -> dict[str, Any]:
    """The body of projects.locations.flexTemplates.launch. Without run_date the
    job evaluates for the UTC date on which it launches."""
    # Values may be Airflow templates ("{{ ... }}"), rendered when the task runs.
    if "{{" not in template and not template.startswith("gs://"):
        raise ValueError("template must be the gs:// path of the built template file")
    if "{{" not in job_name and not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job_name):
        raise ValueError(f"{job_name!r} is not a valid Dataflow job name")
    parameters = {"config": config}
    if run_date:
        parameters["run_date"] = run_date
    environment: dict[str, Any] = {}
    if temp_location:
        environment["tempLocation"] = temp_location
    if service_account:
        environment["serviceAccountEmail"] = service_account
    if image:
        environment["sdkContainerImage"] = image
    body: dict[str, Any] = {"launchParameter": {"jobName": job_name, "containerSpecGcsPath": template, "parameters": parameters}}
    if environment:
        body["launchParameter"]["environment"] = environment
    return body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the Flex Template launch body as JSON.")
    parser.add_argument("--template", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--job-name", default="evalbeam-nightly")
    parser.add_argument("--run-date")
    parser.add_argument("--temp-location")
    parser.add_argument("--service-account")
    parser.add_argument("--image")
    a = parser.parse_args(argv)
    print(json.dumps(launch_body(a.template, a.config, a.job_name, a.run_date, a.temp_location,
                                 a.service_account, a.image), indent=2))


if __name__ == "__main__":
    main()
