"""Nightly runs over OpenTelemetry traces with `input.since: last_run`: each night evaluates
only what completed since the night before, exactly once, whatever arrives late, fails, or is
run out of order; two runs at once cannot read one window twice.

The spans are a real ADK 2.13 agent run's (tests/data/otel/adk_weather.jsonl), cloned with fresh
ids and moved in time around the night's boundary. Each night's clock is the time `evalbeam run`
starts (pipelines.evaluate.utc_now), set by the test so that the nights are hours apart."""
from __future__ import annotations

import copy
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evalbeam.pipelines import evaluate
from tests.helpers import ROOT, evalbeam, table

DATA = ROOT / "tests" / "data" / "otel"
HOUR = 3600 * 10**9
MINUTE = 60 * 10**9


def conversations() -> dict[str, list[list[tuple]]]:
    """The real run's conversations: id -> its traces (in order), each a list of (resource, scope, span)."""
    traces: dict[str, list] = {}
    for line in (DATA / "adk_weather.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    traces.setdefault(span["traceId"], []).append((rs["resource"], ss["scope"], span))
    out: dict[str, list] = {}
    for trace in sorted(traces.values(), key=lambda t: min(int(s["startTimeUnixNano"]) for _, _, s in t)):
        conversation = next(a["value"]["stringValue"] for _, _, s in trace for a in s["attributes"]
                            if a["key"] == "gen_ai.conversation.id")
        out.setdefault(conversation, []).append(trace)
    return out


class Traces:
    """Clones of the real conversations, each trace ending when the test says."""

    def __init__(self, seed: int = 1):
        self._rng = random.Random(seed)
        self._real = conversations()

    def conversation(self, name: str, like: str, ends: list[int]) -> list[list[tuple]]:
        """A clone of conversation `like` named `name`, its i-th trace's root ending at ends[i] (ns)."""
        traces = []
        for trace, end in zip(self._real[like], ends):
            trace_id = f"{self._rng.getrandbits(128):032x}"
            ids = {s["spanId"]: f"{self._rng.getrandbits(64):016x}" for _, _, s in trace}
            shift = end - max(int(s["endTimeUnixNano"]) for _, _, s in trace)
            clone = []
            for resource, scope, span in trace:
                span = copy.deepcopy(span)
                span["traceId"], span["spanId"] = trace_id, ids[span["spanId"]]
                if span.get("parentSpanId"):
                    span["parentSpanId"] = ids[span["parentSpanId"]]
                for key in ("startTimeUnixNano", "endTimeUnixNano"):
                    span[key] = str(int(span[key]) + shift)
                for event in span.get("events") or []:
                    event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift)
                for attribute in span["attributes"]:
                    if attribute["key"] in ("gen_ai.conversation.id", "gcp.vertex.agent.session_id"):
                        attribute["value"] = {"stringValue": name}
                clone.append((resource, scope, span))
            traces.append(clone)
        return traces


def write(path: Path, spans: list[tuple], arrived: dt.datetime | None = None) -> None:
    """OTLP JSON Lines: a request of (at most) three spans a line, as an exporter's batches; the
    file's modification time `arrived` (when the collector wrote it, on the nights' clock)."""
    lines = [json.dumps({"resourceSpans": [{"resource": r, "scopeSpans": [{"scope": sc, "spans": [s]}]}
                                           for r, sc, s in spans[i:i + 3]]}) for i in range(0, len(spans), 3)]
    path.write_text("\n".join(lines) + "\n")
    if arrived is not None:
        os.utime(path, (arrived.timestamp(), arrived.timestamp()))


def root_and_rest(trace: list[tuple]) -> tuple[tuple, list[tuple]]:
    root = next(item for item in trace if not item[2].get("parentSpanId"))
    return root, [item for item in trace if item is not root]


def night(tmp_path: Path, monkeypatch, run_id: str, clock: dt.datetime, metrics=None, check=True, **extra):
    """`evalbeam run` of the nightly config as run `run_id`, started at `clock`."""
    config = {"name": "nightly", "run_id": run_id,
              "input": {"uri": str(tmp_path / "traces" / "*.jsonl"), "format": "otel_traces",
                        "otel": {"group_by": "conversation"}, "since": "last_run", "allow_empty": True,
                        **extra},
              "metrics": metrics or ["failure", "latency_in_seconds", "tool_call_count_v1"],
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setattr(evaluate, "utc_now", lambda: clock)
    return evalbeam("run", str(path), "--direct_num_workers=1", check=check)


def evaluated(tmp_path: Path, run_id: str) -> dict[str, dict]:
    return {r["instance_id"]: r for r in table(tmp_path / "out" / run_id, "instances")}


def runs_row(tmp_path: Path, run_id: str) -> dict:
    [row] = table(tmp_path / "out" / run_id, "runs")
    assert row["lines_read"] == row["lines_skipped"] + row["lines_scored"] + row["lines_dead_lettered"]
    return row


def ns(moment: dt.datetime) -> int:
    return int(moment.timestamp()) * 10**9


@pytest.mark.slow
def test_nights_each_evaluate_what_completed_since_exactly_once(tmp_path, monkeypatch):
    """Night 1 evaluates what ended an hour (input.lateness) before it started; a conversation
    going on across that boundary, one whose last trace's root is late, and one that ended within
    the hour wait, whole, for the next night. A trace whose root never arrives is dead-lettered once.
    Night 2 fails half way: the watermark stays, and night 3 reads both nights. Night 2's
    retry, run after night 3, reads only what is newer than night 3's; night 1 run again replays its
    own window."""
    r = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    R = ns(r)
    make = Traces()
    folder = tmp_path / "traces"
    folder.mkdir()
    a = make.conversation("A", "s_none", [R - 5 * HOUR])
    b = make.conversation("B", "s_two", [R - 70 * MINUTE, R - 55 * MINUTE])  # straddles night 1's boundary
    c = make.conversation("C", "s_raise", [R - 20 * MINUTE])  # ended within the lateness
    e = make.conversation("E", "s_none", [R - 3 * HOUR])  # its root never arrives
    late_root, b_rest = root_and_rest(b[1])
    _, e_rest = root_and_rest(e[0])
    write(folder / "f1.jsonl", [*a[0], *b[0], *b_rest, *c[0], *e_rest], arrived=r - dt.timedelta(minutes=5))

    night(tmp_path, monkeypatch, "n1", r)
    assert set(evaluated(tmp_path, "n1")) == {"A"}
    dead = table(tmp_path / "out" / "n1", "dead_letter")
    assert [d["reason"] for d in dead] and all("trace" in d["reason"] and "no root span" in d["reason"] for d in dead)
    assert {d["source"] for d in dead} == {f"trace {e[0][0][2]['traceId']}"}
    n1 = runs_row(tmp_path, "n1")
    assert n1["window_start"] is None and n1["window_end"] == r - dt.timedelta(hours=1)
    spans_f1 = len(a[0]) + len(b[0]) + len(b_rest) + len(c[0]) + len(e_rest)
    assert n1["lines_read"] == spans_f1 and n1["lines_scored"] == len(a[0])
    assert n1["lines_skipped"] == len(b[0]) + len(b_rest) + len(c[0])  # waiting for a later night, not lost

    # after night 1: B's root (late, within the hour), and D
    d = make.conversation("D", "s_none", [R + 30 * MINUTE])
    write(folder / "f2.jsonl", [late_root, *d[0]], arrived=r + dt.timedelta(minutes=50))
    # night 2 fails while scoring: no runs row, so the watermark stays at night 1's
    marker = tmp_path / "break"
    marker.write_text("")
    monkeypatch.setenv("EVALBEAM_TEST_BREAK", str(marker))
    result = night(tmp_path, monkeypatch, "n2", r + dt.timedelta(hours=2), check=False,
                   metrics=["failure", {"name": "breaks_the_run_once", "function": "tests.custom_metrics:breaks_the_run_once"}])
    assert result.returncode == 1 and "KeyboardInterrupt" in result.stderr
    assert not (tmp_path / "out" / "n2").exists()
    monkeypatch.delenv("EVALBEAM_TEST_BREAK")

    night(tmp_path, monkeypatch, "n3", r + dt.timedelta(hours=4))
    got = evaluated(tmp_path, "n3")
    assert set(got) == {"B", "C", "D"}
    assert len(json.loads(got["B"]["invocations"])) == 2  # whole: both turns, the late root's included
    assert not table(tmp_path / "out" / "n3", "dead_letter")  # E is night 1's: not dead-lettered again
    n3 = runs_row(tmp_path, "n3")
    assert n3["window_start"] == n1["window_end"] and n3["window_end"] == r + dt.timedelta(hours=3)

    # night 2's retry, after night 3: only what is newer than night 3's window (of the files, only those
    # written since an hour before its start: what ended earlier was read, and counted, by night 3)
    f = make.conversation("F", "s_raise", [R + 3 * HOUR + 30 * MINUTE])
    write(folder / "f3.jsonl", f[0], arrived=r + dt.timedelta(hours=4, minutes=30))
    night(tmp_path, monkeypatch, "n2", r + dt.timedelta(hours=5))
    assert set(evaluated(tmp_path, "n2")) == {"F"}
    n2 = runs_row(tmp_path, "n2")
    assert n2["window_start"] == n3["window_end"]
    # night 1 run again: its own window, its own cases
    night(tmp_path, monkeypatch, "n1", r + dt.timedelta(hours=6))
    assert set(evaluated(tmp_path, "n1")) == {"A"}
    again = runs_row(tmp_path, "n1")
    assert (again["window_start"], again["window_end"]) == (None, n1["window_end"])
    # every case evaluated once over the nights
    seen = [case for run in ("n1", "n3", "n2") for case in evaluated(tmp_path, run)]
    assert sorted(seen) == ["A", "B", "C", "D", "F"]


@pytest.mark.slow
def test_lateness_zero_evaluates_what_ended_before_the_run(tmp_path, monkeypatch):
    """input.lateness: 0: a night evaluates every conversation that ended before it started."""
    r = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    R = ns(r)
    make = Traces(seed=2)
    folder = tmp_path / "traces"
    folder.mkdir()
    write(folder / "f1.jsonl", [*make.conversation("A", "s_none", [R - MINUTE])[0],
                                *make.conversation("C", "s_raise", [R + MINUTE])[0]])
    night(tmp_path, monkeypatch, "n1", r, lateness=0)
    assert set(evaluated(tmp_path, "n1")) == {"A"}
    assert runs_row(tmp_path, "n1")["window_end"] == r
    night(tmp_path, monkeypatch, "n2", r + dt.timedelta(minutes=5), lateness="0s")
    assert set(evaluated(tmp_path, "n2")) == {"C"}


@pytest.mark.slow
def test_two_runs_at_once_on_one_eval_cannot_read_one_window_twice(tmp_path):
    """A second run of the eval while the first is reading its window is refused, naming the first
    (status 2, nothing read); once the first has finished, the next run reads only what is newer."""
    now = dt.datetime.now(dt.timezone.utc)
    make = Traces(seed=3)
    folder = tmp_path / "traces"
    folder.mkdir()
    cases = [make.conversation(f"X{i}", "s_two", [ns(now) - 3 * HOUR + i * MINUTE, ns(now) - 2 * HOUR])
             for i in range(4)]
    write(folder / "f1.jsonl", [s for case in cases for trace in case for s in trace])
    scoring, release = tmp_path / "scoring", tmp_path / "release"
    scoring.mkdir()
    config = {"name": "nightly", "input": {"uri": str(folder / "*.jsonl"), "format": "otel_traces",
                                           "otel": {"group_by": "conversation"}, "since": "last_run",
                                           "allow_empty": True},
              "metrics": [{"name": "held", "function": "tests.custom_metrics:held_until_released"}],
              "output": {"parquet": str(tmp_path / "out")}}
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump({**config, "run_id": "first"}))
    held = {"EVALBEAM_TEST_SCORING": str(scoring), "EVALBEAM_TEST_RELEASE": str(release)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), **held}
    evalbeam_bin = str(Path(sys.executable).with_name("evalbeam"))
    process = subprocess.Popen([evalbeam_bin, "run", str(first), "--direct_num_workers=1"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while not any(scoring.iterdir()):  # the first run is scoring its window, held there
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        second = tmp_path / "second.yaml"
        second.write_text(yaml.safe_dump({**config, "run_id": "second"}))
        refused = evalbeam("run", str(second), "--direct_num_workers=1", check=False, env=held)
        assert refused.returncode == 2
        assert "the window of eval 'nightly' (input.since: last_run) is being read by run 'first'" in refused.stderr
        assert f"pid {process.pid}" in refused.stderr
        assert not (tmp_path / "out" / "second").exists()
    finally:
        release.write_text("")
        out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert len(table(tmp_path / "out" / "first", "instances")) == 4
    # now the next run may read: nothing new has ended since the first's window
    evalbeam("run", str(second), "--direct_num_workers=1", env=held)
    [row] = table(tmp_path / "out" / "second", "runs")
    assert row["read_count"] == 0 and row["window_start"] == table(tmp_path / "out" / "first", "runs")[0]["window_end"]
