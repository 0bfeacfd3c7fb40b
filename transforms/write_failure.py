"""A run that cannot write its output: recognised, said in one line, cleaned up.

A full disk, an I/O error or a permission lost while a run writes its tables
reaches the command as whatever Beam made of the OSError (the error itself in
the launching process; its text inside a RuntimeError from a worker process),
after Beam logged it with a traceback. `write_failure` finds it in either form,
and `QuietWriteFailures` keeps Beam's log of it off the terminal: the command
says it once (status 120, as for an output it cannot print), and the run's
attempt, which it owns, is removed (pipelines.evaluate.run), so the previous
output of its run_id stays as it was and the disk is left as it was found.
"""
from __future__ import annotations

import errno
import logging
import re

# Errors only a write meets (a full disk or quota, a file too large, a read-only
# filesystem): whatever step meets one.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
# Any OSError in the stages that write the output (an I/O error, a permission lost mid-run):
# the one writer (pipelines.stages.write) and ADK's history files (pipelines.stages.adk_history),
# by their stage names in pipelines.evaluate.stages.
WRITE_STAGES = ("Write/", "AdkEvalHistory/")

_STEP = re.compile(r"\[while running '([^']+)'\]")
_ERRNO = re.compile(r"\[Errno (\d+)\] ([^\[\]\n]+?)(?::\s*'([^']*)')?\s*(?:\[while running|$|\n)")


class OutputWriteError(RuntimeError):
    """The run could not write its output; the message is the one line to say."""


def _a_write_failure(code: int, step: str | None) -> bool:
    return code in STORAGE_ERRNOS or bool(step and step.startswith(WRITE_STAGES))


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def write_failure(error: BaseException) -> tuple[int, str, str | None, str | None] | None:
    """(errno, its text, the path when known, the step) when `error` is a failed write
    of the output, else None."""
    for e in _chain(error):
        text = str(e)
        step = _STEP.search(text)
        step = step.group(1) if step else None
        if isinstance(e, OSError) and e.errno is not None:
            code, reason, path = e.errno, e.strerror or str(e), e.filename
        else:
            found = _ERRNO.search(text)
            if not found:
                continue
            code, reason, path = int(found.group(1)), found.group(2).strip(), found.group(3)
        if _a_write_failure(code, step):
            return code, reason, path, step
    return None


def describe(failure, output: str, run_id: str) -> str:
    code, reason, path, step = failure
    where = path or output
    return (f"could not write the output under {where}: [Errno {code}] {reason}"
            + (f" (in step {step})" if step else "")
            + f"; this run's partial files were removed and the previous output of run_id {run_id}, if any, is as it was")


class QuietWriteFailures(logging.Filter):
    """Drops Beam's log records (a traceback each) of a failed output write: the
    command says it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is left alone
            return True
        found = _ERRNO.search(message)
        if not found:
            return True
        step = _STEP.search(message)
        return not _a_write_failure(int(found.group(1)), step.group(1) if step else None)


BEAM_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                "apache_beam.runners.portability.fn_api_runner.fn_runner",
                # worker processes' logs, relayed by the launching process
                "apache_beam.runners.portability.local_job_service")


def quiet_write_failures() -> None:
    """Install QuietWriteFailures on the loggers through which Beam reports a failed step."""
    quiet = QuietWriteFailures()
    for name in BEAM_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietWriteFailures) for f in logger.filters):
            logger.addFilter(quiet)
