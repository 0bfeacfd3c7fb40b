"""`make demo-judge [CONFIG=...]`: a judge config run against the local stand-ins the tests use
(tests/servers/judge_server.py for Gemini; provider_servers.py, the same decisions behind the
OpenAI and Anthropic protocols), to try judge features without a key: judge metrics, a metric's
own judge and juries, failure modes, rubrics, human labels. The stand-in's scores are derived
from a hash of each prompt: they say nothing about the responses. Run from the repository:

    python -m tests.demo_judge [CONFIG] [evalbeam run arguments ...]

(default CONFIG: configs/demo_judge.yaml; a relative CONFIG is relative to the current folder,
and the paths in it to its own folder, as for `evalbeam run`). The stand-in stays in the test
tree: the command only points every judge of the config (the run's `judge:`, each metric's own
and each juror) at it, with placeholder keys, and names the eval <name>-stand-in, so that its
runs are never compared with real ones."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from evalbeam.configs import ConfigError, load_config
from tests.servers.provider_servers import ProviderServer

NOTICE = """\
*** DEMO ONLY: the judge here is a local stand-in (tests/servers/judge_server.py), not a real model. ***
*** Its scores are drawn from a hash of each prompt: they mean NOTHING about the responses. ***"""
REAL = ("To judge for real: export GOOGLE_API_KEY=... (or set judge.backend: vertex_ai) and run\n"
        "  evalbeam run {config}")
DEFAULT_CONFIG = "configs/demo_judge.yaml"
# placeholder keys: a real one in the environment is never sent to the stand-in
KEYS = {"GOOGLE_API_KEY": "demo-stand-in-key", "OPENAI_API_KEY": "demo-stand-in-key",
        "ANTHROPIC_API_KEY": "demo-stand-in-key"}


def stand_in_settings(provider: str, url: str) -> dict[str, str]:
    """What points a judge of `provider` at the stand-in (which answers all three protocols)."""
    return {"gemini": {"base_url": url, "backend": "gemini_api", "api_key_env": "GOOGLE_API_KEY"},
            "openai_compatible": {"base_url": url + "/v1", "backend": "openai_api", "api_key_env": "OPENAI_API_KEY"},
            "anthropic": {"base_url": url, "backend": "anthropic_api", "api_key_env": "ANTHROPIC_API_KEY"}}[provider]


def overrides(config, url: str) -> list[str]:
    """The --set arguments pointing every judge of a config at the stand-in at `url`: the run's
    `judge:` (which rubric metrics, failure modes, inference.model and the simulator use too),
    each metric's own `judge:` and each juror of its `judges:`, by the provider each calls."""
    sets = [f"judge.{k}={v}" for k, v in stand_in_settings(config.judge.provider, url).items()]
    for i, metric in enumerate(config.metrics):
        for path, entry in metric.judge_partials():
            provider = entry.get("provider", config.judge.provider)
            sets += [f"metrics.{i}.{path}.{k}={v}" for k, v in stand_in_settings(provider, url).items()]
    return [a for s in sets for a in ("--set", s)]


def user_sets(rest: list[str]) -> list[str]:
    """The --set overrides among `evalbeam run` arguments, so that the config is read as the run reads it."""
    found = []
    for i, arg in enumerate(rest):
        if arg == "--set" and i + 1 < len(rest):
            found.append(rest[i + 1])
        elif arg.startswith("--set="):
            found.append(arg[len("--set="):])
    return found


def main(argv: list[str]) -> int:
    config = argv[0] if argv and not argv[0].startswith("-") else DEFAULT_CONFIG
    rest = argv[1:] if argv and not argv[0].startswith("-") else argv
    evalbeam = Path(sys.executable).with_name("evalbeam")
    print(NOTICE, flush=True)
    try:
        loaded = load_config(config, user_sets(rest))
    except ConfigError:
        loaded = None  # evalbeam run says what is wrong with the config
    with ProviderServer() as server:
        # its runs under another eval name: never listed or compared with the config's real runs
        # (a config that does not load: the run's judge still pointed at the stand-in, for safety;
        # evalbeam run stops at what is wrong with it before calling anything)
        sets = overrides(loaded, server.url) + ["--set", f"name={loaded.name}-stand-in"] if loaded else [
            a for k, v in stand_in_settings("gemini", server.url).items() for a in ("--set", f"judge.{k}={v}")]
        command = [str(evalbeam), "run", config, *sets, *rest]
        child = subprocess.Popen(command, env={**os.environ, **KEYS})
        try:
            status = child.wait()
        except KeyboardInterrupt:
            # Ctrl-C: the run it started is ended, not left running, and no traceback is printed
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            status = end(child)
            print("demo-judge: interrupted; the run it started has ended", file=sys.stderr, flush=True)
            return INTERRUPTED
    if status != 2:  # 2: the config or an argument refused, nothing run (the error is the last word)
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
