"""Custom metrics used by the tests, importable by path like a user's own."""


def fragile_length(instance):
    """Raises on responses containing 'boom', to show one metric's failure stays on its row."""
    if "boom" in instance["response"]:
        raise ValueError("cannot score an explosion")
    return {"fragile_length": len(instance["response"]), "upper": instance["response"].upper()}


def die_on_marker(instance):
    """Kills the whole process on a marked row: a job dying half way."""
    import os

    if instance["response"] == "die now":
        os._exit(17)
    return {"die_on_marker": 1.0}


def scoring_process(instance):
    """Records the process that scored the instance and its ancestors (Linux
    /proc), so a test can tell in which process the runner ran pipeline code, and
    the objects frozen there (gc.get_freeze_count)."""
    import os

    pid, ancestors = os.getpid(), []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:  # "pid (comm) state ppid ..."
            pid = int(stat.read().rpartition(")")[2].split()[1])
        ancestors.append(pid)
    import gc

    # and how many objects that process keeps out of the collector's sight (transforms.worker)
    return {"scoring_process": 1.0, "pid": os.getpid(), "ancestors": ancestors, "frozen": gc.get_freeze_count()}


def exit_marker(instance):
    """Registers once per process an exit handler that appends a line to the file
    EVALBEAM_TEST_AT_EXIT names (code a run imports may count on its exit handlers),
    then fails: a metric with no valid score, which makes `evalbeam run` end with status 1."""
    import atexit
    import os

    global _exit_marker_registered
    if not globals().get("_exit_marker_registered"):
        path = os.environ["EVALBEAM_TEST_AT_EXIT"]
        atexit.register(lambda: open(path, "a").write(f"exit handler of {os.getpid()}\n"))
        _exit_marker_registered = True
    raise ValueError("exit_marker never scores")


def slow_scoring(instance):
    """Announces each scoring process once (a file named by its pid in the folder
    EVALBEAM_TEST_SCORING names), then takes 50 ms a row: a run long enough to
    interrupt while every worker is scoring."""
    import os
    import time

    marker = os.path.join(os.environ["EVALBEAM_TEST_SCORING"], str(os.getpid()))
    if not os.path.exists(marker):
        open(marker, "w").close()
    time.sleep(0.05)
    return {"slow_scoring": 1.0}


def swallows_interrupts(instance):
    """slow_scoring that catches the KeyboardInterrupt a Ctrl-C raises in it, as
    code the run calls may (Beam itself does at some moments): the run goes on."""
    try:
        return {"swallows_interrupts": slow_scoring(instance)["slow_scoring"]}
    except KeyboardInterrupt:
        return {"swallows_interrupts": 0.0}


def _chosen(instance, name):
    """The score a test chose for metric `name`: the value of that key in the response (a JSON
    object); none there, an error on the row (no score: left out of the distributions)."""
    import json

    value = json.loads(instance["response"]).get(name)
    if value is None:
        raise ValueError(f"no {name} on this row")
    return {name: value}


# distributions the report must draw (tests/pipelines/test_report.py)
def near_equal(instance):
    return _chosen(instance, "near_equal")


def one_score(instance):
    return _chosen(instance, "one_score")


def far_and_near(instance):
    return _chosen(instance, "far_and_near")


def verbosity(instance):
    return _chosen(instance, "verbosity")


def continuous(instance):
    return _chosen(instance, "continuous")


def huge_range(instance):
    return _chosen(instance, "huge_range")



def breaks_the_run_once(instance):
    """Ends the run scoring it when the file EVALBEAM_TEST_BREAK names exists, removing it first:
    a SIGINT to its own process, whose KeyboardInterrupt no metric's error handling catches (run in
    the test's process, whose Ctrl-C handler is not evalbeam's: the run fails). A night that fails
    half way."""
    import os
    import signal
    import time

    marker = os.environ.get("EVALBEAM_TEST_BREAK")
    if marker and os.path.exists(marker):
        os.remove(marker)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the interrupt arrives meanwhile
    return {"breaks_the_run_once": 1.0}


def held_until_released(instance):
    """Announces each scoring process (a file named by its pid in the folder EVALBEAM_TEST_SCORING
    names), then waits, up to 5 minutes, for the file EVALBEAM_TEST_RELEASE names: a run held in the
    middle of its work for as long as a test needs."""
    import os
    import time

    open(os.path.join(os.environ["EVALBEAM_TEST_SCORING"], str(os.getpid())), "w").close()
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["EVALBEAM_TEST_RELEASE"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"held_until_released": 1.0}
