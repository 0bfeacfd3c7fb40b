"""A real ADK agent served over A2A by ADK's own `to_a2a` (google-adk 2.13.0 with its a2a extra, the .agent
venv), its model the local Gemini-protocol server (tests/servers/judge_server.py): for tests/metrics/agents/test_a2a.py
and bench/agent_throughput.py. The server runs as a subprocess on a free port; `A2AServer` starts it and waits
for its agent card. `AdkAppServer`: the same agent as a real ADK app behind the Agent Engine stand-in
(tests/agent_env/adk_app.py)."""
from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request

from tests.helpers import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class A2AServer:
    """`with A2AServer(model_url) as url:` an ADK agent ('package.module:agent', default
    tests.inference_agent:root_agent) served by to_a2a at `url`."""

    SCRIPT = "serve_a2a.py"
    READY = "/.well-known/agent-card.json"

    def __init__(self, model_url: str, agent: str = "tests.inference_agent:root_agent", env: dict | None = None):
        venv = ROOT / ".agent"
        if not (venv / ".installed").exists():
            raise RuntimeError("the agent environment is missing: run `make agent-env`")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._command = [str(venv / "bin" / "python"), str(ROOT / "tests" / "agent_env" / self.SCRIPT), agent,
                         str(self.port)]
        self._env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": "local-test-key",
                     "EVALBEAM_TEST_MODEL_URL": model_url, "PYTHONWARNINGS": "ignore", **(env or {})}
        self._process = None

    def __enter__(self) -> str:
        self._process = subprocess.Popen(self._command, env=self._env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.SCRIPT} exited: {self._process.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + self.READY, timeout=2).read()
                return self.url
            except urllib.error.HTTPError:
                return self.url  # it answers
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"{self.SCRIPT} did not answer within 120 s")

    def __exit__(self, *exc):
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()



class AdkAppServer(A2AServer):
    """`with AdkAppServer(model_url) as url:` the agent run by ADK's Runner behind a small HTTP
    interface (create_session, stream_query), for the Agent Engine stand-in's `backend`."""

    SCRIPT = "adk_app.py"
    READY = "/"
