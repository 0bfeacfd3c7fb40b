"""A real ADK app behind the Agent Engine stand-in (tests/servers/agent_engine_server.py), in the agent venv (.agent/):
python adk_app.py AGENT PORT. It does what Vertex AI's ADK app template (AdkApp) does for the two class
methods evalbeam calls, with ADK's Runner and InMemorySessionService:
    POST /create_session {"user_id", "state"} -> the Session (model_dump, JSON)
    POST /stream_query {"message", "user_id", "session_id"} -> [every event of the turn (model_dump(exclude_none))]
    (an agent that raises: 500 with the error)
Prints nothing; serves until killed."""
import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from evalbeam.metrics.agents.inference import load_target

agent = load_target(sys.argv[1], "agent")
port = int(sys.argv[2])
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()
sessions = InMemorySessionService()
runner = Runner(app_name=agent.name, agent=agent, session_service=sessions)


async def create_session(user_id, state):
    session = await sessions.create_session(app_name=agent.name, user_id=user_id, state=state or {})
    return session.model_dump(mode="json", exclude_none=True)


async def stream_query(message, user_id, session_id):
    content = types.Content(role="user", parts=[types.Part(text=message)])
    return [event.model_dump(mode="json", exclude_none=True)
            async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=content)]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/create_session":
            work = create_session(body.get("user_id"), body.get("state"))
        else:
            work = stream_query(body["message"], body["user_id"], body["session_id"])
        try:
            status, data = 200, json.dumps(asyncio.run_coroutine_threadsafe(work, loop).result()).encode()
        except Exception as e:  # noqa: BLE001 - the agent raised: the query fails with 500, as on Agent Engine
            status = 500
            data = json.dumps({"error": {"code": 500, "message": f"{type(e).__name__}: {e}", "status": "INTERNAL"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
