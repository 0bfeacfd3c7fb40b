"""A faulty HTTP proxy in front of an A2A server (for tests only): it fails scripted messages with an error
status and counts what it forwarded, so that a test can tell which messages reached the agent, and how
often."""
from __future__ import annotations

import json

from tests.servers.local import LocalHTTPServer


class FaultyProxy(LocalHTTPServer):
    """An HTTP proxy in front of the A2A server that answers scripted POSTs (1-based, in arrival
    order) with an error status instead of forwarding them; the agent card it serves names the
    proxy. Counts the POSTs it forwarded per message text and per message id."""

    def __init__(self, upstream: str, fail: dict):
        import collections
        from http.server import BaseHTTPRequestHandler

        self.upstream, self.fail, self.posts, self.forwarded = upstream, fail, 0, collections.Counter()
        self.forwarded_ids = collections.Counter()  # per message id (a retry keeps its message's id)
        self.order: list[str] = []  # the forwarded messages' texts, in the order they were forwarded
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self, method, body=None):
                import urllib.error
                import urllib.request

                request = urllib.request.Request(proxy.upstream + self.path, data=body, method=method,
                                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        status, headers, data = response.status, response.headers, response.read()
                except urllib.error.HTTPError as e:
                    status, headers, data = e.code, e.headers, e.read()
                if method == "GET":
                    data = data.replace(proxy.upstream.encode(), proxy.url.encode())
                self.send_response(status)
                self.send_header("Content-Type", headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._relay("GET")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.posts += 1
                failure = proxy.fail.get(proxy.posts)
                if failure:
                    status, retry_after = failure
                    data = b'{"error": "scripted"}'
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if retry_after:
                        self.send_header("Retry-After", str(retry_after))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                message = json.loads(body)["params"]["message"]
                proxy.forwarded[message["parts"][0]["text"]] += 1
                proxy.order.append(message["parts"][0]["text"])
                proxy.forwarded_ids[message["messageId"]] += 1
                self._relay("POST", body)

        self._listen(Handler)
        self.start()
