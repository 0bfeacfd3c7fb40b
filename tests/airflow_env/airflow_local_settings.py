"""Airflow local settings for tests/pipelines/test_nightly_dag.py (copied into the test's
AIRFLOW_HOME/config; never deployed): point BigQueryHook's DB-API connection at
the BigQuery emulator.

BigQueryCheckOperator submits its query with the google-cloud-bigquery client,
which already follows BIGQUERY_EMULATOR_HOST, and reads the result rows through
a googleapiclient discovery client, which has no emulator setting and no
endpoint field in the Airflow connection. This gives that one client the
emulator's address; the rest (query, result typing, the check's rule) is the
provider's own code.
"""
import os


def _point_bigquery_at_the_emulator() -> None:
    host = os.environ.get("BIGQUERY_EMULATOR_HOST")
    if not host:
        return
    from google.api_core.client_options import ClientOptions
    from googleapiclient.discovery import build

    from airflow.providers.google.cloud.hooks.bigquery import BigQueryConnection, BigQueryHook

    def get_conn(self):  # BigQueryHook.get_conn with the emulator as the endpoint
        service = build("bigquery", "v2", http=self._authorize(), cache_discovery=False,
                        client_options=ClientOptions(api_endpoint=f"{host}/bigquery/v2/"))
        return BigQueryConnection(service=service, project_id=self.project_id, use_legacy_sql=self.use_legacy_sql,
                                  location=self.location, num_retries=self.num_retries, hook=self)

    BigQueryHook.get_conn = get_conn


_point_bigquery_at_the_emulator()
