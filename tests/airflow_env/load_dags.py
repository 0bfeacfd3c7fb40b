"""Run with the .airflow venv's Python: load a DAGs folder with Airflow's own
DagBag (as the DAG processor does) and write, as JSON to a file (Airflow logs
to stdout), its import errors, the warnings raised while parsing, and each
DAG's tasks (operator, upstream tasks, retries).

    python load_dags.py DAGS_FOLDER OUT.json
"""
import json
import sys
from pathlib import Path

from airflow.dag_processing.dagbag import BundleDagBag

folder = Path(sys.argv[1])
bag = BundleDagBag(dag_folder=folder, bundle_path=folder)
Path(sys.argv[2]).write_text(json.dumps({
    "import_errors": bag.import_errors,
    "warnings": bag.captured_warnings,
    "dags": {
        dag_id: {
            task.task_id: {"operator": type(task).__name__, "upstream": sorted(task.upstream_task_ids),
                           "retries": task.retries}
            for task in dag.tasks
        }
        for dag_id, dag in bag.dags.items()
    },
}))
