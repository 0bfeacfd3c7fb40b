"""pipelines/run_index.py: where runs were written, recorded by two runs at once, read past a
damaged file, pruned of folders that are gone, kept out of the user's home by the tests."""
import json
import multiprocessing
import os
import tempfile

from evalbeam.pipelines import run_index


def test_the_tests_record_runs_in_a_folder_of_their_own_never_the_users():
    # tests/conftest.py sets EVALBEAM_STATE_DIR for the session: no test writes the home's state folder
    assert run_index.state_dir() == os.environ["EVALBEAM_STATE_DIR"]
    assert run_index.state_dir().startswith(tempfile.gettempdir())
    assert not run_index.state_dir().startswith(os.path.expanduser("~") + os.sep)


def test_the_state_folder_is_the_variables_then_xdgs_then_the_homes(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALBEAM_STATE_DIR", str(tmp_path / "mine"))
    assert run_index.state_dir() == str(tmp_path / "mine")
    monkeypatch.delenv("EVALBEAM_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert run_index.state_dir() == str(tmp_path / "xdg" / "evalbeam")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")  # the spec: a relative path is ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert run_index.state_dir() == str(tmp_path / "home" / ".local" / "state" / "evalbeam")


def _record_many(state: str, folder: str, worker: int, count: int) -> None:
    os.environ["EVALBEAM_STATE_DIR"] = state
    for i in range(count):
        run_index.record(f"w{worker}-r{i}", "e", folder, None, None)


def test_runs_recording_at_once_lose_no_line(monkeypatch, tmp_path):
    """Eight processes each recording 25 runs at the same time: every run is found, and every line
    of the file is whole (the rewrite is under a flock, and renamed into place)."""
    monkeypatch.setenv("EVALBEAM_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "out"
    folder.mkdir()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record_many, args=(str(tmp_path / "state"), str(folder), w, 25))
               for w in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    lines = (tmp_path / "state" / "runs.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["run_id"] for line in lines) == sorted(f"w{w}-r{i}" for w in range(8) for i in range(25))
    assert all(run_index.places(f"w{w}-r{i}")[0]["parquet"] == str(folder) for w in range(8) for i in range(25))
    assert [p.name for p in (tmp_path / "state").iterdir() if p.name.startswith(".runs-")] == []  # no temporary left


def test_a_damaged_or_missing_index_is_read_past_and_a_rewrite_prunes_what_is_gone(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALBEAM_STATE_DIR", str(tmp_path / "state"))
    assert run_index.places("r1") == [] and run_index.all_places() == []  # no file yet
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir()
    gone.mkdir()
    run_index.record("r1", "e", str(gone), None, None)
    run_index.record("r1", "e", str(kept), None, "c.yaml")
    run_index.record("r1", "e", str(kept), None, "c.yaml")  # the same place again: one line
    run_index.record("r2", "e", None, "proj-1.ds", None)
    index = tmp_path / "state" / "runs.jsonl"
    index.write_bytes(index.read_bytes() + b'{"run_id": "r3", "parq\n\xff\xfe garbage\n[1, 2]\n{"run_id": 5}\n')
    assert [p["parquet"] for p in run_index.places("r1")] == [str(kept), str(gone)]  # the newest first
    assert run_index.places("r1")[0]["config"] == os.path.abspath("c.yaml")  # a local path, made absolute
    assert run_index.places("r2")[0]["bigquery"] == "proj-1.ds"
    gone.rmdir()
    assert [p["parquet"] for p in run_index.places("r1")] == [str(kept)]  # a folder gone is not offered
    run_index.record("r4", "e", str(kept), None, None)
    lines = [json.loads(line) for line in index.read_text().splitlines()]  # rewritten: every line whole
    assert [(e["run_id"], e["parquet"], e["bigquery"]) for e in lines] == [
        ("r1", str(kept), None), ("r2", None, "proj-1.ds"), ("r4", str(kept), None)]


def test_a_state_folder_that_cannot_be_written_is_said_and_the_run_goes_on(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EVALBEAM_STATE_DIR", str(blocker / "state"))
    run_index.record("r1", "e", str(tmp_path), None, None)
    err = capsys.readouterr().err
    assert err.startswith(f"evalbeam: could not record where run r1 is written in {blocker / 'state' / 'runs.jsonl'}")
    assert run_index.places("r1") == []
