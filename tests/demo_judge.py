"""`make demo-judge`: a judge config run against the local Gemini-protocol stand-in the
tests use (tests/servers/judge_server.py), to see the judge metrics work without a key. The
stand-in's scores are derived from a hash of each prompt: they say nothing about the
responses. Run from the repository:

    python -m tests.demo_judge [CONFIG] [evalbeam run arguments ...]

(default CONFIG: configs/demo_judge.yaml). The stand-in stays in the test tree: the
command only points the config's judge.base_url at it, with a placeholder key, and names
the eval <name>-stand-in, so that its runs are never compared with real ones."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from evalbeam.configs import ConfigError, load_config
from tests.servers.judge_server import JudgeServer

NOTICE = """\
*** DEMO ONLY: the judge here is a local stand-in (tests/servers/judge_server.py), not Gemini. ***
*** Its scores are drawn from a hash of each prompt: they mean NOTHING about the responses. ***"""
REAL = ("To judge for real: export GOOGLE_API_KEY=... (or set judge.backend: vertex_ai) and run\n"
        "  evalbeam run {config}")


def main(argv: list[str]) -> int:
    config = argv[0] if argv and not argv[0].startswith("-") else "configs/demo_judge.yaml"
    rest = argv[1:] if argv and not argv[0].startswith("-") else argv
    evalbeam = Path(sys.executable).with_name("evalbeam")
    print(NOTICE, flush=True)
    try:  # its runs under another eval name: never listed or compared with the config's real runs
        name = load_config(config).name + "-stand-in"
    except ConfigError:
        name = None  # evalbeam run says what is wrong with the config
    with JudgeServer() as server:
        # a placeholder key: a real one in the environment is never sent to the stand-in
        env = {**os.environ, "GOOGLE_API_KEY": "demo-stand-in-key"}
        command = [str(evalbeam), "run", config, "--set", f"judge.base_url={server.url}", "--set", "judge.backend=gemini_api",
                   "--set", "judge.api_key_env=GOOGLE_API_KEY", *(["--set", f"name={name}"] if name else []), *rest]
        child = subprocess.Popen(command, env=env)
        try:
            status = child.wait()
        except KeyboardInterrupt:
            # Ctrl-C: the run it started is ended, not left running, and no traceback is printed
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            status = end(child)
            print("demo-judge: interrupted; the run it started has ended", file=sys.stderr, flush=True)
            return INTERRUPTED
    print(f"\n{NOTICE}\n{REAL.format(config=config)}", flush=True)
    return status


INTERRUPTED = 130  # as a shell reports a command Ctrl-C ended


def end(child: subprocess.Popen) -> int:
    """The child evalbeam run ended: a terminal's Ctrl-C reached it too, and it ends on its own
    (saying how to resume); else a Ctrl-C of its own, then a kill. Its exit status."""
    for signum, wait in ((None, 15), (signal.SIGINT, 15), (signal.SIGKILL, 15)):
        if signum is not None:
            child.send_signal(signum)
        try:
            return child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
