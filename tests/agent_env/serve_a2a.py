"""Serve an ADK agent over A2A with ADK's own `to_a2a` (google-adk 2.13.0 with its a2a extra), in the
agent venv (.agent/): python serve_a2a.py AGENT PORT. AGENT is 'package.module:agent' (its model: the local
Gemini-protocol server at $EVALBEAM_TEST_MODEL_URL, tests/inference_agent.py). Prints 'ready' once the
agent card is served; stops on SIGTERM."""
import sys

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a

from evalbeam.metrics.agents.inference import load_target

agent_path, port = sys.argv[1], int(sys.argv[2])
app = to_a2a(load_target(agent_path, "agent"), host="127.0.0.1", port=port)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
