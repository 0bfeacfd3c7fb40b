"""A local stand-in for the Dataflow service's jobs API (v1b3), for tests only (these machines cannot
reach Dataflow). It speaks the REST protocol as Beam's Dataflow client sends it (apache-beam's
runners/dataflow/internal/apiclient.py, google-cloud-dataflow-client's JobsV1Beta3 REST transport,
which Beam uses when --dataflow_endpoint names localhost):

    POST /v1b3/projects/<p>/locations/<l>/jobs         a Job (JSON)  -> the Job with its new id, queued
    GET  /v1b3/projects/<p>/locations/<l>/jobs/<id>                  -> the Job with its current state

Submitted jobs run nowhere: a test moves one to another state (`state(job_id, "JOB_STATE_FAILED")`),
as the service would when the job ends. `jobs` holds what was submitted, by id, as sent."""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler

from tests.servers.local import LocalHTTPServer

JOBS = re.compile(r"^/v1b3/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/jobs(?:/(?P<job_id>[^/?:]+))?(?:\?.*)?$")


class DataflowServer(LocalHTTPServer):
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                match = JOBS.match(self.path)
                if not match or match["job_id"]:
                    return self._answer(404, {"error": {"code": 404, "message": f"no route {self.path}"}})
                job = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with server._lock:
                    job_id = f"2026-12-07_00_00_00-{len(server.jobs) + 1}"
                    job.update(id=job_id, projectId=match["project"], location=match["location"],
                               currentState="JOB_STATE_QUEUED")
                    server.jobs[job_id] = job
                self._answer(200, job)

            def do_GET(self):
                match = JOBS.match(self.path)
                job = server.jobs.get(match["job_id"]) if match and match["job_id"] else None
                if job is None or (job["projectId"], job["location"]) != (match["project"], match["location"]):
                    return self._answer(404, {"error": {"code": 404, "status": "NOT_FOUND",
                                                        "message": f"no job {self.path}"}})
                self._answer(200, {k: v for k, v in job.items() if k in (
                    "id", "name", "projectId", "location", "currentState", "clientRequestId")})

        self._listen(Handler)

    @property
    def endpoint(self) -> str:
        """--dataflow_endpoint: Beam's client speaks REST (not gRPC) to an endpoint naming localhost."""
        return self.url.replace("127.0.0.1", "localhost")

    def state(self, job_id: str, state: str) -> None:
        with self._lock:
            self.jobs[job_id]["currentState"] = state
