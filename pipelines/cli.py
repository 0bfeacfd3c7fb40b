"""The `evalbeam` command: the command line, the chosen command run (one module
each in pipelines/commands/, imported only when chosen), and how the process ends.

    evalbeam run CONFIG [--set key.path=value ...] [Beam flags ...]
    evalbeam validate CONFIG [--set ...]
    evalbeam plan CONFIG [--set ...] [--json] [--labels-for-width W --pilot RUN_ID]
    evalbeam metrics
    evalbeam runs [--eval NAME] [--last N] [--remove-leftovers RUN_ID] [--config CONFIG | --parquet DIR | --bigquery PROJECT.DATASET]
    evalbeam --version
    evalbeam show RUN_ID [--json] [--config CONFIG | --parquet DIR | --bigquery PROJECT.DATASET]
    evalbeam report RUN_ID [--compare BASE_RUN_ID] [-o report.html] [--config C | --parquet DIR | --bigquery P.D]
    evalbeam compare BASE_RUN_ID RUN_ID [RUN_ID ...] [--tolerance [METRIC=]T] [--watch METRIC] [--config C | --parquet DIR | --bigquery P.D]

Arguments `run` does not know go to Beam's PipelineOptions unchanged, so the
same command targets DirectRunner or Dataflow (`--runner=DataflowRunner ...`).
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import select
import signal
import sys
import threading
from types import ModuleType
from typing import NoReturn

from evalbeam.pipelines import commands
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS
from evalbeam.transforms.interrupt import INTERRUPTED, RESUME_HINT
from evalbeam.transforms.worker import collect_young_less_often


def main(argv: list[str] | None = None) -> int:
    """The command chosen, run: its module (pipelines/commands/) is the only one imported."""
    argv = sys.argv[1:] if argv is None else argv
    args, beam_args = parser(argv).parse_known_args(argv)
    return command(args.command).main(args, beam_args)


def parser(argv: list[str] | tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The command line. The command chosen is the first argument of `argv` that is not an
    option (`evalbeam` itself takes no option with a value); its arguments are added from
    its module, which is imported then. Every other command is a name and its help line."""
    top, parsers = commands.top_parser()
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in parsers:
        command_parser = parsers[chosen]
        command(chosen).add_arguments(command_parser)
        # the command's own flags, which an unknown argument is compared with (unknown_flags_hint)
        command_parser.set_defaults(known_flags=tuple(
            flag for action in command_parser._actions for flag in action.option_strings))
    elif chosen is not None:
        from evalbeam.metrics.names import did_you_mean  # only for a misspelt command

        hint = did_you_mean(chosen, commands.COMMANDS)
        if hint:
            top.error(f"argument COMMAND: invalid choice: {chosen!r}{hint}")
    return top


def command(name: str) -> ModuleType:
    """The module of the command `name` (one of commands.COMMANDS). Imported here, by the entry
    point, which no command imports: the commands package imports none of its commands."""
    return importlib.import_module(f"evalbeam.pipelines.commands.{name}")


def entry() -> None:
    """The `evalbeam` console script: main(), then the process ends at once.

    A command that imported Beam spends about 0.4 s of its wall time (on the
    development machine; about a tenth of a small run) in the interpreter's
    teardown, freeing one by one the objects of Beam and the cloud client
    libraries, work nobody waits for once the command is done. What that teardown
    does that matters is done first: the exit handlers (logging's flush,
    temporary files' removal) and the standard streams' buffers, with the status
    the interpreter would give an output it could not write. When a
    non-daemon thread is still running (none should be), or main() raises, the
    process exits the usual way.

    A reader of the output that goes away before it is written (`evalbeam show
    RUN --json | head`) ends the command with status 141, as a shell reports a
    command that SIGPIPE ended, and no traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    collect_young_less_often()  # a local run with one worker scores in this process
    if sys.stdout is not None:
        sys.stdout = _Stdout(sys.stdout)
    try:
        status = main()
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):
            raise
        # what is left to write goes nowhere, so that the shutdown's flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(STDOUT_READER_GONE_STATUS)
    except OSError as e:
        if getattr(sys.stdout, "failed", None) is not e:
            raise
        _end(UNWRITTEN_OUTPUT_STATUS)
    except BaseException as e:
        # Beam re-raises a KeyboardInterrupt met inside a step as a RuntimeError
        if not (isinstance(e, KeyboardInterrupt) or INTERRUPTED.is_set()):
            missing = _missing_credentials(e)
            if missing is None:
                raise
            # any Google Cloud client (BigQuery, Cloud Storage, Vertex AI) without credentials, past preflight
            from evalbeam.transforms.local_cloud import no_credentials  # only on failure: start-up time

            _say(f"evalbeam: {no_credentials(missing)}")
            _end(2)
        _say("evalbeam: interrupted")
        for line in RESUME_HINT:  # what the run left for a re-run of its run_id to reuse
            _say(line)
        _end(INTERRUPTED_STATUS)  # Beam's threads waiting on worker processes may be left: not waited for

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    _end(status)


def _missing_credentials(error: BaseException) -> str | None:
    """The first line of google-auth's DefaultCredentialsError where `error` is one, or was
    raised from one (Beam re-raises); else None."""
    try:
        from google.auth.exceptions import DefaultCredentialsError  # only on failure: start-up time
    except ImportError:
        return None
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, DefaultCredentialsError):
            return (str(error).splitlines() or [""])[0][:200]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _end(status: int) -> NoReturn:
    """End the process now: the exit handlers run, the standard streams flushed
    (with the status an unwritable output gives, _flushed), no teardown. Where
    the interpreter is not CPython (no atexit._run_exitfuncs), the usual exit."""
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's, as the interpreter runs them
    if run_exit_handlers is None:
        sys.exit(status)
    run_exit_handlers()
    os._exit(_flushed(status))


# What a shell reports for a command that SIGINT (Ctrl-C) ended (128 + 2).
INTERRUPTED_STATUS = 130


def _interrupt(signum, frame):
    """Ctrl-C: what Beam logs as it tears a local run down after it (its worker
    processes' failures relayed, handlers it cannot close, its threads' errors)
    is not the user's concern; the command says it was interrupted (entry). (The
    worker processes, which the terminal interrupts too, print their own.) A
    second Ctrl-C ends the process at once, should the first land where Beam
    swallows it (a worker being started), or its teardown wait on a worker."""
    if INTERRUPTED.is_set():
        _say("evalbeam: interrupted")
        os._exit(INTERRUPTED_STATUS)  # its worker processes end with their connection to it
    INTERRUPTED.set()
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None  # Beam's threads failing as its workers go
    raise KeyboardInterrupt


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (AttributeError, OSError, ValueError):  # no stderr left to say it on
        pass


class _Stdout:
    """sys.stdout as the command writes to it, remembering the error a write or
    flush met (`failed`): an OSError main() raises is then known to be the
    output's (a full disk), not a file's the run was writing."""

    def __init__(self, stream):
        self._stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            self.failed = e
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self.failed = e
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


# What a shell reports for a command that SIGPIPE ended (128 + 13).
STDOUT_READER_GONE_STATUS = 141


def _reader_gone(stream) -> bool:
    """Whether `stream` is a pipe whose reading end is closed (poll says POLLERR):
    a BrokenPipeError is then stdout's, not a socket's or a child process's."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no file behind the stream
        return False


def _flushed(status: int) -> int:
    """The status to end with once the standard streams are flushed: `status`,
    unless stdout could not be written: UNWRITTEN_OUTPUT_STATUS (a full disk,
    an I/O error), said on stderr, as the interpreter's own shutdown would, or
    STDOUT_READER_GONE_STATUS (a reader that closed the pipe: `| head`), as
    entry() ends when that happens earlier. A closed stream takes nothing more.
    An output whose write already failed (_Stdout.failed) is said once, not tried again."""
    failed = getattr(sys.stdout, "failed", None)
    try:
        if sys.stdout is not None and failed is None:  # None: started with stdout closed (`>&-`)
            sys.stdout.flush()
    except BrokenPipeError:
        status = status or STDOUT_READER_GONE_STATUS
    except ValueError:
        pass
    except OSError as e:
        failed = e
    if failed is not None and not isinstance(failed, BrokenPipeError):
        _say(f"evalbeam: could not write the output: {failed}")
        status = status or UNWRITTEN_OUTPUT_STATUS
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):  # nowhere left to say so
        pass
    return status


if __name__ == "__main__":
    entry()
