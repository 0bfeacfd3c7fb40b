"""Install, start and stop the local Cloud Storage and BigQuery emulators.

    python -m tests.emulators install DIR      # a venv per emulator under DIR, offline DuckDB extensions
    python -m tests.emulators start DIR        # start both on loopback, print the environment to use
    python -m tests.emulators stop DIR

The test suite uses the same functions (tests/emulators/control.py) with random free ports.
"""
import argparse
import sys
from pathlib import Path

from tests.emulators.control import DEFAULT_PORTS, install, start, stop

parser = argparse.ArgumentParser(prog="python -m tests.emulators")
parser.add_argument("command", choices=["install", "start", "stop"])
parser.add_argument("dir", type=Path)
args = parser.parse_args()
if args.command == "install":
    install(args.dir)
elif args.command == "start":
    running = start(args.dir, args.dir / "state", DEFAULT_PORTS, detach=True)
    print("# the emulators are running; to use them:")
    for key, value in running.env.items():
        print(f"export {key}={value}")
else:
    sys.exit(0 if stop(args.dir / "state") else 1)
