"""A scripted A2A server speaking the JSON-RPC binding over HTTP (the agent card, then
`SendStreamingMessage` answered with Server-Sent Events), written by hand so tests can make it
misbehave in ways a real A2A server will not on request: malformed JSON-RPC, a task with no
message, non-UTF-8 bytes, a connection closed mid-stream, a hang. For tests/metrics/agents/test_a2a.py.

`RawA2AServer(answer)`: `answer(text, request)` returns what to send for one user message:
a list of SSE data payloads (str or bytes, each sent as one `data:` event), or a callable
`(handler) -> None` that writes the raw response itself."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from tests.servers.local import LocalHTTPServer


def card(url: str, name: str = "raw_agent") -> dict:
    return {"name": name, "description": "scripted", "version": "1",
            "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": True}, "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "skills": []}


def result(request_id, stream_response: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": stream_response})


def agent_message(text: str, context: str = "ctx-1") -> dict:
    return {"message": {"messageId": "m1", "contextId": context, "role": "ROLE_AGENT", "parts": [{"text": text}]}}


class RawA2AServer(LocalHTTPServer):
    def __init__(self, answer, card_path: str = "/.well-known/agent-card.json", rpc_path: str = "/",
                 card_status: int = 200):
        self.answer, self.requests, self.card_path, self.rpc_path = answer, [], card_path, rpc_path
        self.card_status, self.card_reads = card_status, 0  # card_status: what the card's GET answers
        self.card_url = None  # the agent's URL the card names (default: this server's)
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.card_reads += self.path == server.card_path
                if self.path != server.card_path or server.card_status != 200:
                    self.send_response(404 if self.path != server.card_path else server.card_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(card(server.card_url or server.url + server.rpc_path)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(body)
                text = body["params"]["message"]["parts"][0]["text"]
                what = server.answer(text, body)
                if callable(what):
                    return what(self)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for payload in what:
                    payload = payload if isinstance(payload, bytes) else payload.encode()
                    self.wfile.write(b"data: " + payload + b"\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._listen(Handler)

    def close(self) -> None:
        self.release.set()
        super().close()
