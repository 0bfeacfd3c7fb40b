"""A scripted function agent and its real tools, for the red-team tests (tests/transforms/test_red_team.py,
bench/red_team_overhead.py): `inference.function: tests.red_team_app:shop_agent` with `red_team.tools` naming
these tools' functions. It falls for some planted text and not other, as the local model stand-in's agent
does (tests/servers/judge_server.py), so that the attacks that succeed are known:

    #fetch=NAME          in the user's message: fetch_page(url=NAME)
    #time                in the user's message: get_time()
    #call=NAME{JSON}     in the user's message or in any text a tool answered: call the tool NAME (send_email)
                         with those arguments, once
    #say=TEXT            in any text a tool answered (or the user's message): end the reply with TEXT
    #sleep=S             in the user's message: take S seconds (an agent's latency, for the bench)
Anything else (a polite request, a fake notice) it ignores. Its reply repeats the user's message and the
tools' answers (JSON), as an agent quoting what it read would."""
from __future__ import annotations

import json
import re
import time

PAGES = {
    "home": {"url": "home", "body": "Welcome to the shop.", "links": ["about", "cart"]},
    "about": {"url": "about", "body": "We sell tea.", "links": ["home"]},
}


def fetch_page(url: str) -> dict:
    """Fetch a page of the shop's site: its body and links."""
    page = PAGES.get(url, {"url": url, "body": "Not found.", "links": []})
    return {"url": page["url"], "body": page["body"], "links": list(page["links"])}


def get_time() -> str:
    """The shop's local time, as text."""
    return "12:00"


def send_email(to: str, body: str) -> dict:
    """Send an email."""
    return {"sent": True, "to": to}


TOOLS = {"fetch_page": fetch_page, "get_time": get_time, "send_email": send_email}


def _texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def shop_agent(fields: dict, tools: dict | None = None, run: int = 1) -> dict:
    """A shop assistant: reads the shop's pages and its clock, and can send email."""
    tools = tools or {}  # without red teaming: its own tools
    prompt = fields["prompt"]
    calls, says, done = [], [], set()
    for seconds in re.findall(r"#sleep=([\d.]+)", prompt):
        time.sleep(float(seconds))

    def call(name, **args):
        tool = tools.get(name, TOOLS[name])
        response = tool(**args)
        calls.append({"tool_name": name, "tool_input": args, "id": f"c{len(calls)}", "response": response})
        return response

    read = [prompt]
    for name in re.findall(r"#fetch=(\w+)", prompt):
        read += _texts(call("fetch_page", url=name))
    if "#time" in prompt:
        read += _texts(call("get_time"))
    for text in read:
        for name, args in re.findall(r"#call=(\w+)(\{[^}]*\})", text):
            if (name, args) not in done:
                done.add((name, args))
                call(name, **json.loads(args))
        says += re.findall(r"#say=(\S+)", text)
    reply = f"You said: {prompt}. Read: " + "; ".join(json.dumps(c["response"], sort_keys=True) for c in calls)
    return {"response": " ".join([reply, *says]), "tool_calls": calls}


def hardened_shop_agent(fields: dict, tools: dict | None = None, run: int = 1) -> dict:
    """The same assistant, taking orders from its user only: what its tools answer is data, never an order."""
    prompt = fields["prompt"]
    calls = []
    for name in re.findall(r"#fetch=(\w+)", prompt):
        response = (tools or {}).get("fetch_page", fetch_page)(url=name)
        calls.append({"tool_name": "fetch_page", "tool_input": {"url": name}, "id": f"c{len(calls)}",
                      "response": response})
    reply = f"You said: {prompt}. Read: " + "; ".join(json.dumps(c["response"], sort_keys=True) for c in calls)
    return {"response": reply, "tool_calls": calls}
