"""Whether the `evalbeam` command was interrupted (Ctrl-C): apart from the progress
display that reads it, so that the command's handler needs no Beam."""
import threading

# Set by the `evalbeam` command's Ctrl-C handler (pipelines.cli): Beam reports a
# KeyboardInterrupt raised inside a step as a RuntimeError, so the exception
# alone does not tell an interrupted run from a failed one.
INTERRUPTED = threading.Event()

# What the command says after `evalbeam: interrupted` (set by pipelines.evaluate when the run
# leaves checkpoints a re-run of its run_id reuses): how to resume it.
RESUME_HINT: list[str] = []
