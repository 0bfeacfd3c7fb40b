"""transforms.write_failure recognises a failed write of the output in the forms Beam
reports it: the OSError itself (the launching process) or its text inside a RuntimeError
(a worker process), named by the step it happened in, as the staged pipeline names it."""
import errno
import logging

from evalbeam.transforms.write_failure import QuietWriteFailures, write_failure


def worker_error(code: int, step: str) -> RuntimeError:
    """What a worker process's failure looks like to the launching process."""
    return RuntimeError(f"Traceback (most recent call last):\n  ...\nOSError: [Errno {code}] "
                        f"{errno.errorcode[code]} text: '/out/_evalbeam_attempts/r1/a/instances/x.parquet' "
                        f"[while running '{step}']")


def test_any_os_error_in_the_writer_stage_is_a_failed_write():
    # an I/O error is a failed write only where the output is written: the Write and ADK history stages
    for step in ("Write/Write_instances/WriteFiles", "Write/ReplaceRunFolder/Replace", "AdkEvalHistory/WriteEvalHistory"):
        code, _, path, where = write_failure(worker_error(errno.EIO, step))
        assert (code, path, where) == (errno.EIO, "/out/_evalbeam_attempts/r1/a/instances/x.parquet", step)
    assert write_failure(worker_error(errno.EIO, "Scoring/Score/ScoreFn")) is None
    assert write_failure(ValueError("no errno here")) is None


def test_a_full_disk_is_a_failed_write_in_any_step():
    assert write_failure(worker_error(errno.ENOSPC, "Scoring/Score/ScoreFn"))[0] == errno.ENOSPC
    error = OSError(errno.ENOSPC, "No space left on device", "/out/x")
    assert write_failure(RuntimeError("wrapped")) is None
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = error
    assert write_failure(wrapped)[:3] == (errno.ENOSPC, "No space left on device", "/out/x")


def test_beams_log_of_a_failed_write_is_dropped_and_other_errors_are_kept():
    def record(message):
        return logging.LogRecord("apache_beam.runners.common", logging.ERROR, __file__, 1, message, None, None)

    quiet = QuietWriteFailures()
    assert not quiet.filter(record(str(worker_error(errno.EIO, "Write/Write_summary/WriteFiles"))))
    assert quiet.filter(record(str(worker_error(errno.EIO, "Read/Read/ParseFileFn"))))
    assert quiet.filter(record("a metric raised ValueError"))
