"""Google Cloud clients, routed to local emulators when their variables are set.

This is the one place that knows about emulators. It acts only when
`BIGQUERY_EMULATOR_HOST` (BigQuery REST, e.g. http://127.0.0.1:9050),
`BIGQUERY_STORAGE_EMULATOR_HOST` (BigQuery Storage Read gRPC, e.g.
127.0.0.1:9060) or `STORAGE_EMULATOR_HOST` (Cloud Storage) is set; on Google
Cloud it builds the ordinary clients with Application Default Credentials.
Beam's own Cloud Storage filesystem honours `STORAGE_EMULATOR_HOST` by itself.
Environment variables reach every worker process of DirectRunner, so the
routing holds wherever pipeline code runs.
"""
from __future__ import annotations

import os


def no_credentials(what: str) -> str:
    """The one message for a Google Cloud client that found no Application Default
    Credentials (google-auth's own is a paragraph): `what` says which resources asked."""
    return (f"no Google Cloud credentials ({what}): run `gcloud auth application-default login`, "
            "or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file")


def emulated() -> bool:
    return any(os.environ.get(v) for v in ("STORAGE_EMULATOR_HOST", "BIGQUERY_EMULATOR_HOST", "BIGQUERY_STORAGE_EMULATOR_HOST"))


def route_beam_to_emulators() -> None:
    """With emulators, Beam's own Google Cloud IO connects anonymously at once,
    instead of looking for Application Default Credentials with retries and
    backoff. Runs on import of `transforms`, so in every process that
    unpickles pipeline code.

    Private to Beam, for want of a public way: Beam's Cloud Storage and BigQuery
    IO take their credentials from `auth.get_service_credentials`, which caches
    what google.auth.default() gives in `auth._Credentials` (`--no_auth` reaches
    only the Dataflow client). Recorded here as answered, with no credentials,
    that cache is what an anonymous client is built from. A Beam that renames it
    fails tests/transforms/test_local_cloud.py, and here it stops with a line
    saying so rather than waiting on retries."""
    if not emulated():
        return
    from apache_beam.internal.gcp import auth  # start-up time: Beam's GCP auth only where used

    cache = getattr(auth, "_Credentials", None)
    if not all(hasattr(cache, name) for name in ("_credentials_lock", "_credentials", "_credentials_init")):
        raise RuntimeError("this apache-beam no longer caches its credentials in "
                           "apache_beam.internal.gcp.auth._Credentials: transforms/local_cloud.py's emulator "
                           "routing must be revised for it")
    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True


def bigquery_emulator() -> str | None:
    return os.environ.get("BIGQUERY_EMULATOR_HOST") or None


def bigquery_client(project: str | None = None, location: str | None = None):
    from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

    host = bigquery_emulator()
    if host:
        from google.auth.credentials import AnonymousCredentials  # start-up time: Google Cloud clients only where used

        return bigquery.Client(
            project=project or "local-project",
            location=location,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": host},
        )
    return bigquery.Client(project=project, location=location)


def bigquery_read_client():
    # start-up time: Google Cloud clients only where used
    from google.cloud.bigquery_storage_v1 import BigQueryReadClient

    host = os.environ.get("BIGQUERY_STORAGE_EMULATOR_HOST")
    if host:
        import grpc  # start-up time: gRPC only for the emulator
        # start-up time: Google Cloud clients only where used
        from google.cloud.bigquery_storage_v1.services.big_query_read.transports import BigQueryReadGrpcTransport

        return BigQueryReadClient(transport=BigQueryReadGrpcTransport(channel=grpc.insecure_channel(host)))
    return BigQueryReadClient()


def storage_client(project: str | None = None):
    from google.cloud import storage  # start-up time: Google Cloud clients only where used

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials  # start-up time: Google Cloud clients only where used

        return storage.Client(project=project or "local-project", credentials=AnonymousCredentials())
    return storage.Client(project=project)


def dataflow_jobs_client(endpoint: str | None = None):
    """Dataflow's jobs client (google-cloud-dataflow-client, as Beam's Dataflow runner builds it): at
    `endpoint` (--dataflow_endpoint) when given, over REST for one on localhost (a local stand-in), as
    Beam does; anonymous where the emulators are in use, as Beam's own clients are there."""
    import re

    from google.cloud import dataflow_v1beta3  # start-up time: Google Cloud clients only where used

    kwargs = {}
    endpoint = (endpoint or "").strip().rstrip("/")
    if endpoint:
        local = "localhost" in endpoint
        kwargs["client_options"] = {"api_endpoint": endpoint if local else re.sub("^https?://", "", endpoint)}
        if local:
            kwargs["transport"] = "rest"
    if emulated():
        from google.auth.credentials import AnonymousCredentials  # start-up time: Google Cloud clients only where used

        kwargs["credentials"] = AnonymousCredentials()
    return dataflow_v1beta3.JobsV1Beta3Client(**kwargs)
