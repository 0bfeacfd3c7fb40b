"""transforms.read_otel: a real ADK 2.13 agent's OTLP JSON spans (tests/data/otel), their
spans scattered over several files (gzipped, pretty-printed, JSON Lines) in any order,
grouped into cases in Beam; awkward traces dead-lettered with their reason; the counts
reconcile in spans; and a whole run over them scores the cases."""
from __future__ import annotations

import copy
import gzip
import json
import random
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from evalbeam.configs import load_config
from evalbeam.pipelines.evaluate import run
from evalbeam.transforms.read import ReadRecords
from evalbeam.transforms.read_otel import GroupSpans
from tests.helpers import evalbeam, table

DATA = Path(__file__).resolve().parents[1] / "data" / "otel"


def _spans(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                out += [(resource["resource"], scope["scope"], s) for s in scope["spans"]]
    return out


def _request(spans) -> dict:
    return {"resourceSpans": [{"resource": r, "scopeSpans": [{"scope": sc, "spans": [s]}]} for r, sc, s in spans]}


def awkward_files(folder: Path, seed: int) -> dict:
    """The real spans, spread at random over three files (one gzipped, one a pretty-printed
    single request), with the awkward cases mixed in. Returns what must come out."""
    rng = random.Random(seed)
    spans = _spans(DATA / "adk_weather.jsonl")
    by_trace: dict[str, list] = {}
    for item in spans:
        by_trace.setdefault(item[2]["traceId"], []).append(item)
    expected = {"spans": len(spans)}
    # a trace from a second copy of the run, its root dropped: no root
    rootless = [copy.deepcopy(i) for i in _spans(DATA / "adk_weather_no_content.jsonl")]
    for _, _, span in rootless:  # conversations of their own (the run reused the session ids)
        for attribute in span["attributes"]:
            if attribute["key"] == "gen_ai.conversation.id":
                attribute["value"]["stringValue"] = "other-" + span["traceId"]
    traces = {}
    for item in rootless:
        traces.setdefault(item[2]["traceId"], []).append(item)
    [rootless_id, orphan_id, *_] = sorted(traces, key=lambda t: -len(traces[t]))
    no_root = [i for i in traces[rootless_id] if i[2].get("parentSpanId")]
    # another: a middle span (invoke_agent) dropped: its children's parent never arrives
    middle = next(i for i in traces[orphan_id] if i[2]["name"].startswith("invoke_agent"))
    orphaned = [i for i in traces[orphan_id] if i is not middle]
    # a span exported twice (a retried export): the identical copy is dropped and counted
    twice = copy.deepcopy(rng.choice(spans))
    # a trace of more spans than the limit (max_trace_spans = 40): made of a real trace's spans, renumbered
    base = by_trace[max(by_trace, key=lambda t: len(by_trace[t]))]
    big = []
    for n in range(45):
        r, sc, s = copy.deepcopy(rng.choice(base))
        s.update(traceId="ab" * 16, spanId=f"{n + 1:016x}", parentSpanId=f"{1:016x}" if n else "")
        s["attributes"] = [a for a in s["attributes"] if a["key"] != "gen_ai.conversation.id"]
        big.append((r, sc, s))
    everything = spans + no_root + orphaned + [twice] + big
    expected.update(read=len(everything), no_root=len(no_root), orphaned=len(orphaned), big=len(big))
    rng.shuffle(everything)
    thirds = [everything[i::3] for i in range(3)]
    lines = [json.dumps(_request(thirds[0][i:i + 4])) for i in range(0, len(thirds[0]), 4)]
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n\n")
    (folder / "b.json.gz").write_bytes(gzip.compress("\n".join(
        json.dumps(_request(thirds[1][i:i + 5])) for i in range(0, len(thirds[1]), 5)).encode()))
    (folder / "c.json").write_text(json.dumps(_request(thirds[2]), indent=2))
    (folder / "d.jsonl").write_text('{"resourceSpans": [\n{"not": "otlp"}\n')  # damaged
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("grouping", ["shuffle", "spill"])
@pytest.mark.parametrize("group_by", ["trace", "conversation"])
def test_spans_in_any_order_and_file_group_into_cases_and_reconcile(tmp_path, group_by, grouping):
    """Grouped by the runner's shuffle (a distributed runner) or on local disk (a local run): the same."""
    data = tmp_path / "data"
    data.mkdir()
    expected = awkward_files(data, seed=3)
    spill = None
    if grouping == "spill":
        spill = tmp_path / "scratch"
        spill.mkdir()
    with TestPipeline() as p:
        records, unparseable, _ = p | ReadRecords("otel_traces", uri=str(data / "*"))
        cases, dead, lines = records | GroupSpans(group_by, max_spans=40, spill=spill and str(spill))

        def check(results):
            cases, dead, lines, unparseable = results
            reasons = Counter()
            for d in dead:
                for what in ("has no root span", "which never arrived", "more than 40 spans"):
                    if what in d.reason:
                        reasons[what] += d.line_count
            assert reasons == {"has no root span": expected["no_root"], "which never arrived": expected["orphaned"],
                               "more than 40 spans": expected["big"]}, reasons
            assert sum(d.line_count for d in dead) == sum(reasons.values())  # no other dead letter
            # the span exported twice: its copy dropped and counted, not a dead letter
            assert sum(s.duplicates for s in lines) == 1 == sum(s.skipped for s in lines)
            # the damaged file: its lines are dead-lettered, as any unreadable line is
            assert unparseable and all(u.origin.endswith("d.jsonl") for u in unparseable)
            spans_read = sum(s.lines for s in lines)
            assert spans_read == expected["read"]
            used = sum(c.line_count for c in cases)
            assert used == expected["spans"]  # every span of the real run, once
            assert spans_read == used + sum(d.line_count for d in dead) + 1
            if group_by == "conversation":
                by_id = {c.data["instance_id"]: c.data for c in cases}
                assert sorted(by_id) == ["s_none", "s_raise", "s_two"]
                assert [t["prompt"][:6] for t in by_id["s_two"]["invocations"]] == ["Paris?", "Keep O"]
                assert len(by_id["s_two"]["trace_ids"]) == 2
            else:
                assert len(cases) == 4 and all(len(c.data["invocations"]) == 1 for c in cases)

        tagged = [pc | f"Tag{name}" >> beam.Map(lambda x, name=name: (name, x))
                  for name, pc in (("cases", cases), ("dead", dead), ("lines", lines), ("unparseable", unparseable))]
        assert_that(tuple(tagged) | beam.Flatten() | beam.combiners.ToList(), lambda got: check(_by_tag(got[0])))


def test_a_conversation_that_lost_a_turn_is_dead_lettered_whole():
    """One of a conversation's two traces dead-lettered (its root never arrived): the other is not
    scored as a one-turn conversation; its spans are dead-lettered with the reason."""
    from evalbeam.metrics.rows.otlp import spans_of_request
    from evalbeam.transforms.read_otel import CheckTraceFn, case_of

    traces: dict[str, list] = {}
    for line in (DATA / "adk_weather.jsonl").read_text().splitlines():
        for span in spans_of_request(json.loads(line))[0]:
            span["origin"], span["line"] = "f", 1
            traces.setdefault(span["trace_id"], []).append(span)
    two = [t for t in traces.values() if any(s["attributes"].get("gen_ai.conversation.id") == "s_two" for s in t)]
    broken = [s for s in two[0] if s["parent_id"] is not None]
    check = CheckTraceFn(100, 10**9, "conversation")
    out = list(check.process((two[0][0]["trace_id"], broken))) + list(check.process((two[1][0]["trace_id"], two[1])))
    grouped = [item for item in out if isinstance(item, tuple)]
    assert {k for k, _ in grouped} == {"s_two"} and len(grouped) == 2  # the mark and the good trace
    [dead] = [d.value for d in case_of(("s_two", [v for _, v in grouped]), 100)]
    assert "conversation s_two is incomplete: 1 of its 2 turn traces were dead-lettered" in dead.reason
    assert "has no root span" in dead.reason and dead.line_count == len(two[1])


@pytest.mark.slow
def test_a_pretty_printed_file_that_is_not_a_request_counts_as_one_span_and_reconciles(tmp_path):
    """A pretty-printed JSON file that parses but is no OTLP request is one unreadable line: one
    span read, one dead-lettered (not its file's line count); spans read = used + dead-lettered."""
    spans = _spans(DATA / "adk_weather.jsonl")
    (tmp_path / "good.jsonl").write_text(json.dumps(_request(spans)) + "\n")
    (tmp_path / "other.json").write_text(json.dumps({"not": "otlp", "items": list(range(20))}, indent=2))

    def check(results):
        cases, dead, lines, unparseable = results
        assert not unparseable
        [bad] = [d for d in dead if d.origin.endswith("other.json")]
        assert "no resourceSpans" in bad.reason and bad.line_count == 1
        spans_read = sum(s.lines for s in lines)
        assert spans_read == len(spans) + 1
        assert spans_read == sum(c.line_count for c in cases) + sum(d.line_count for d in dead)

    with TestPipeline() as p:
        records, unparseable, _ = p | ReadRecords("otel_traces", uri=str(tmp_path / "*"))
        cases, dead, lines = records | GroupSpans()
        tagged = [pc | f"Tag{name}" >> beam.Map(lambda x, name=name: (name, x))
                  for name, pc in (("cases", cases), ("dead", dead), ("lines", lines), ("unparseable", unparseable))]
        assert_that(tuple(tagged) | beam.Flatten() | beam.combiners.ToList(), lambda got: check(_by_tag(got[0])))


def _weather_traces() -> dict[str, list[dict]]:
    from evalbeam.metrics.rows.otlp import spans_of_request

    traces: dict[str, list] = {}
    for line in (DATA / "adk_weather.jsonl").read_text().splitlines():
        for span in spans_of_request(json.loads(line))[0]:
            span["origin"], span["line"] = "f", 1
            traces.setdefault(span["trace_id"], []).append(span)
    return traces


def test_a_large_trace_whose_first_spans_name_no_conversation_still_marks_its_conversation():
    """A trace over max_trace_spans whose conversation id is only on a span after the first few:
    its conversation is still dead-lettered whole, not scored as a shorter conversation."""
    from evalbeam.transforms.read_otel import CheckTraceFn, case_of

    two = sorted((t for t in _weather_traces().values()
                  if any(s["attributes"].get("gen_ai.conversation.id") == "s_two" for s in t)), key=len, reverse=True)
    big = copy.deepcopy(two[0])
    for span in big:
        for key in ("gen_ai.conversation.id", "gcp.vertex.agent.session_id"):
            span["attributes"].pop(key, None)
    big[-1]["attributes"]["gen_ai.conversation.id"] = "s_two"  # only the last span handed over names it
    check = CheckTraceFn(len(two[1]), 10**9, "conversation")
    assert len(big) > len(two[1])
    out = list(check.process((big[0]["trace_id"], iter(big)))) + list(check.process((two[1][0]["trace_id"], two[1])))
    grouped = [item for item in out if isinstance(item, tuple)]
    assert sorted(k for k, _ in grouped) == ["s_two", "s_two"]  # the mark and the good trace
    [dead] = [d.value for d in case_of(("s_two", [v for _, v in grouped]), 100)]
    assert "conversation s_two is incomplete: 1 of its 2 turn traces" in dead.reason
    assert "too large to evaluate" in dead.reason and dead.line_count == len(two[1])


class _Trace(list):
    """A trace's spans that a weak reference can watch (to see it is not held)."""


def test_a_conversation_over_the_limits_is_counted_not_held():
    """A conversation's traces are counted as the runner hands them over: past max_trace_spans or
    max_trace_bytes, none is held, and the conversation is dead-lettered with all its spans counted."""
    import weakref

    from evalbeam.metrics.rows.otlp import span_size
    from evalbeam.transforms.read_otel import case_of

    traces = list(_weather_traces().values())
    one = max(traces, key=len)
    copies = 30
    total = len(one) * copies
    trace_bytes = sum(span_size(s) for s in one)
    for limits, what in (((len(one) * 3, 10**9), "max_trace_spans"), ((10**6, trace_bytes * 3), "max_trace_bytes")):
        watched = []

        def handed_over():
            for n in range(copies):
                trace = _Trace(copy.deepcopy(one))
                watched.append(weakref.ref(trace))
                yield trace
                del trace
                if n >= 5:  # past the limit (3 traces' worth): the traces handed over earlier are let go
                    assert watched[n - 1]() is None, f"trace {n - 1} is still held"

        [dead] = [d.value for d in case_of(("conv", handed_over()), *limits)]
        assert what in dead.reason and f"has {total:,} spans" in dead.reason, dead.reason
        assert dead.line_count == total and dead.field == "conversation"
        assert len(dead.raw_record.splitlines()) <= 5


def _by_tag(items):
    out = {"cases": [], "dead": [], "lines": [], "unparseable": []}
    for tag, item in items:
        out[tag].append(item)
    return out["cases"], out["dead"], out["lines"], out["unparseable"]


@pytest.mark.slow
def test_a_whole_run_scores_the_cases_and_counts_spans(tmp_path):
    """`input.format: otel_traces` end to end: the ADK run's traces as conversations, scored with
    trajectory-free and content metrics; the runs row's lines are spans and reconcile."""
    folder = tmp_path / "traces"
    folder.mkdir()
    spans = _spans(DATA / "adk_weather.jsonl")
    random.Random(5).shuffle(spans)
    (folder / "part1.jsonl").write_text(json.dumps(_request(spans[:9])) + "\n")
    (folder / "part2.jsonl.gz").write_bytes(gzip.compress((json.dumps(_request(spans[9:])) + "\n").encode()))
    config = {"name": "otel", "run_id": "otel1",
              "input": {"uri": str(folder / "*"), "format": "otel_traces", "otel": {"group_by": "conversation"}},
              "metrics": [{"name": "failure"}, {"name": "latency_in_seconds"},
                          {"name": "tool_trajectory_avg_score"}],
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / "otel.yaml"
    path.write_text(yaml.safe_dump(config))
    run(load_config(path), PipelineOptions([]))
    out = tmp_path / "out" / "otel1"
    [runs] = [r for r in table(out, "runs")]
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (3, 3, 0)
    assert runs["lines_read"] == len(spans) == runs["lines_scored"]
    results = {(r["instance_id"], r["metric"]): r for r in table(out, "metric_results")}
    assert results[("s_raise", "failure")]["score"] == 1 and results[("s_two", "failure")]["score"] == 0
    assert results[("s_two", "latency_in_seconds")]["score"] > 0
    # no expected trajectory in a trace: the metric says so rather than scoring
    assert results[("s_two", "tool_trajectory_avg_score")]["error"]


def agent_env() -> Path:
    """The venv of evalbeam with its `agent` extra (make agent-env): google-adk 2.13.0."""
    venv = Path(__file__).resolve().parents[2] / ".agent"
    if not (venv / ".installed").exists():
        pytest.fail("the agent environment is missing: run `make agent-env` (or `make test`): evalbeam[agent] in .agent/")
    return venv


@pytest.mark.agent
def test_scores_from_an_adk_runs_traces_equal_adks_own_evaluators_on_its_session(tmp_path):
    """A real ADK 2.13 agent run (tests/inference_agent.py, its model the local generateContent
    server) traced with OpenTelemetry's SDK, content on the spans (SPAN_ONLY). ADK's own
    TrajectoryEvaluator and RougeEvaluator score the run's session (EvaluationGenerator's
    invocations); evalbeam reads the exported OTLP JSON through the pipeline, groups the spans
    into conversations and scores the same expected turns: the scores are equal."""
    import subprocess

    from evalbeam.metrics.catalog import get_metric
    from evalbeam.metrics.rows.instance import RowSpec, build_instance
    from tests.servers.judge_server import JudgeServer

    root = Path(__file__).resolve().parents[2]
    cases = DATA / "adk_scored_cases.json"
    with JudgeServer() as server:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "GOOGLE_API_KEY": "test-key",
               "EVALBEAM_TEST_MODEL_URL": server.url, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}
        result = subprocess.run([str(agent_env() / "bin" / "python"), str(root / "tests" / "agent_env" / "otel_traces.py"),
                                 str(cases), str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    adk = json.loads((tmp_path / "adk_scores.json").read_text())
    assert set(adk) == {"s_two", "s_none", "s_wrong"}
    expected = {sid: turns for sid, turns in json.loads(cases.read_text())}
    spec = RowSpec({}, "instance_id", (), ())
    scored = {}

    def score(records):
        for record in records:
            fields = dict(record.data)
            turns = expected[fields["instance_id"]]
            if any(isinstance(t, str) for t in turns):
                continue
            assert len(fields["invocations"]) == len(turns)
            for turn, (_, response, calls) in zip(fields["invocations"], turns):
                turn["expected"] = {"response": response,
                                    "tool_calls": [{"tool_name": n, "tool_input": a} for n, a in calls]}
            instance = build_instance(fields, spec, record.source)
            out = {}
            for name in adk["s_two"]:
                d = get_metric(name)
                out[name] = d.factory(d.params.model_validate({}))(instance.fields).score
            scored[fields["instance_id"]] = out
        assert scored == adk
        assert adk["s_two"]["tool_trajectory_avg_score"] == 0.5 and 0 < adk["s_two"]["response_match_score"] < 1

    with TestPipeline() as p:
        records, _, _ = p | ReadRecords("otel_traces", uri=str(tmp_path / "traces.jsonl"))
        cases_out, dead, _ = records | GroupSpans("conversation")
        assert_that(cases_out, score)
        assert_that(dead, lambda d: not d or pytest.fail(f"dead letters: {[x.reason for x in d]}"), label="NoDead")


@pytest.mark.agent
def test_a_second_instrumentation_live_google_genai(tmp_path):
    """OpenTelemetry's google-genai instrumentation (opentelemetry-instrumentation-google-genai, the
    otel_test extra, in .agent/) on plain google-genai with automatic function calling against the
    local generateContent server: the spans it exports, read through the pipeline, give the calls
    and answers the app got."""
    import subprocess

    from tests.servers.judge_server import JudgeServer
    from tests.metrics.rows.test_otel import genai_turns_match_what_the_app_saw

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "genai.jsonl"
    with JudgeServer() as server:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "GOOGLE_API_KEY": "test-key",
               "EVALBEAM_TEST_MODEL_URL": server.url}
        result = subprocess.run([str(agent_env() / "bin" / "python"), str(root / "tests" / "agent_env" / "otel_genai.py"),
                                 str(DATA / "genai_weather_prompts.json"), str(out)],
                                capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    genai_turns_match_what_the_app_saw(out, Path(str(out) + ".calls.json"))
    with TestPipeline() as p:
        records, _, _ = p | ReadRecords("otel_traces", uri=str(out))
        cases, dead, _ = records | GroupSpans()
        assert_that(cases | beam.Map(lambda c: (c.data["invocations"][0]["prompt"][:5],
                                                len(c.data["invocations"][0]["tool_calls"]))),
                    lambda got: sorted(got) == [("Both ", 2), ("Hello", 0), ("Paris", 1)] or pytest.fail(str(got)))


def test_a_request_line_longer_than_the_first_read_is_json_lines(tmp_path):
    """A first request line longer than the bytes read to tell JSON Lines from one pretty-printed
    request (as an exporter's batches are) is still read line by line."""
    from evalbeam.transforms.parsers import CHUNK
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import Record

    spans = _spans(DATA / "adk_weather.jsonl") * 30
    line = json.dumps(_request(spans))
    assert len(line) > CHUNK
    path = tmp_path / "long.jsonl.gz"
    path.write_bytes(gzip.compress((line + "\n" + line + "\n").encode()))
    records = [r for r in parse_file(str(path), "otel_traces") if isinstance(r, Record)]
    assert len(records) == 2 and records[1].line == 2


def test_a_gzipped_file_cut_short_at_its_start_is_a_dead_letter_not_a_crash(tmp_path):
    """A .gz cut before its first decompressed bytes came out: the first read raised (EOFError) and took
    preflight, or the job, down with a traceback. Now the file is one dead letter holding no span, and the
    next file is read as before."""
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import DeadLetter, Record, SourceLines

    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress((DATA / "adk_weather.jsonl").read_bytes())[:200])
    got = list(parse_file(str(cut), "otel_traces"))
    assert [type(g) for g in got] == [DeadLetter, SourceLines]
    assert "cannot be read from its start (EOFError" in got[0].reason and got[0].line_count == 0
    assert (got[1].lines, got[1].skipped) == (0, 0)  # no span read, none dead-lettered: counts reconcile
    whole = tmp_path / "whole.jsonl.gz"
    whole.write_bytes(gzip.compress((DATA / "adk_weather.jsonl").read_bytes()))
    assert any(isinstance(r, Record) for r in parse_file(str(whole), "otel_traces"))


def test_a_large_otlp_json_lines_file_is_read_in_parts_and_a_pretty_printed_one_whole(tmp_path):
    """An OTLP JSON Lines file larger than a part is read in line-aligned parts, as JSONL rows are
    (each part on whichever worker gets it): the parts give the requests, line numbers and counts
    the whole file gives. A pretty-printed request as large stays one part: its lines are no records."""
    from evalbeam.transforms.file_parts import FilePart, file_parts
    from evalbeam.transforms.read import parse_file, parse_part
    from evalbeam.transforms.records import DeadLetter, Record, SourceLines

    spans = _spans(DATA / "adk_weather.jsonl")
    rng = random.Random(7)
    lines = []
    for n in range(120):
        lines.append(json.dumps(_request(rng.sample(spans, rng.randint(1, 6)))))
        if n % 40 == 7:
            lines.append("{broken")  # a line that is no JSON: dead-lettered where it is, in any part
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n")
    part_bytes = path.stat().st_size // 5
    parts = file_parts(str(path), "otel_traces", path.stat().st_size, part_bytes)
    assert len(parts) >= 4

    def summary(items):
        return (sorted((r.line, json.dumps(r.data, sort_keys=True)) for r in items if isinstance(r, Record)),
                sorted((d.line, d.reason) for d in items if isinstance(d, DeadLetter)),
                sum(s.lines for s in items if isinstance(s, SourceLines)))

    whole = summary(list(parse_file(str(path), "otel_traces")))
    split = summary([item for part in parts for item in parse_part(part, "otel_traces")])
    assert split == whole and len(whole[0]) == 120 and len(whole[1]) == 3
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(_request(spans * 3), indent=2))
    assert pretty.stat().st_size > part_bytes
    assert file_parts(str(pretty), "otel_traces", pretty.stat().st_size, part_bytes) == [FilePart(str(pretty))]
    [request] = [r for r in parse_file(str(pretty), "otel_traces") if isinstance(r, Record)]
    assert len(request.data["resourceSpans"]) == 3 * len(spans)


@pytest.mark.slow
def test_a_run_with_two_workers_reads_a_large_otlp_file_in_parts_and_scores_as_one_worker(tmp_path):
    """`evalbeam run` over one large OTLP JSON Lines file, read in parts by two worker processes,
    writes the cases and scores a run in one process reading it whole writes."""
    folder = tmp_path / "traces"
    folder.mkdir()
    spans = _spans(DATA / "adk_weather.jsonl")
    random.Random(11).shuffle(spans)
    (folder / "spans.jsonl").write_text("\n".join(json.dumps(_request(spans[i:i + 2]))
                                                  for i in range(0, len(spans), 2)) + "\n")
    size = (folder / "spans.jsonl").stat().st_size
    out = {}
    for name, flags, env in (("whole", ["--direct_num_workers=1"], {}),
                             ("parts", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                              {"EVALBEAM_PART_BYTES": str(size // 4)})):
        config = {"name": "otel", "run_id": name,
                  "input": {"uri": str(folder / "*"), "format": "otel_traces", "otel": {"group_by": "conversation"}},
                  "metrics": ["failure", "latency_in_seconds", "tool_call_count_v1"],
                  "output": {"parquet": str(tmp_path / "out")}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        evalbeam("run", str(path), *flags, env=env or None)
        run_folder = tmp_path / "out" / name
        [runs] = table(run_folder, "runs")
        out[name] = (sorted((r["instance_id"], r["metric"], r["score"]) for r in table(run_folder, "metric_results")),
                     runs["read_count"], runs["scored_count"], runs["lines_read"], runs["lines_scored"])
    assert out["parts"] == out["whole"]
    assert out["whole"][1:] == (3, 3, len(spans), len(spans))


# Cloud Trace's span storage schema, as its "Storage schema for trace data" page names the fields
# (the _AllSpans view of a linked dataset); the types past `name` are OTLP's, not verified on a live view
ALL_SPANS_SCHEMA = [
    {"name": "trace_id", "type": "STRING"}, {"name": "span_id", "type": "STRING"},
    {"name": "trace_state", "type": "STRING"}, {"name": "parent_span_id", "type": "STRING"},
    {"name": "name", "type": "STRING"}, {"name": "kind", "type": "INT64"},
    {"name": "start_time", "type": "TIMESTAMP"}, {"name": "end_time", "type": "TIMESTAMP"},
    {"name": "attributes", "type": "JSON"},
    {"name": "resource", "type": "RECORD", "fields": [{"name": "attributes", "type": "JSON"}]},
    {"name": "instrumentation_scope", "type": "RECORD", "fields": [{"name": "name", "type": "STRING"},
                                                                   {"name": "version", "type": "STRING"}]},
    {"name": "status", "type": "RECORD", "fields": [{"name": "code", "type": "INT64"},
                                                    {"name": "message", "type": "STRING"}]},
    {"name": "events", "type": "RECORD", "mode": "REPEATED", "fields": [
        {"name": "time", "type": "TIMESTAMP"}, {"name": "name", "type": "STRING"}, {"name": "attributes", "type": "JSON"}]},
]


def _row(resource, scope, span, shift_ns: int = 0) -> dict:
    """An OTLP JSON span as a row of the span table."""
    import datetime as dt

    from evalbeam.metrics.rows.otlp import attribute_map

    def ts(nanos):
        moment = dt.datetime.fromtimestamp((int(nanos) + shift_ns) // 1000 / 1e6, dt.timezone.utc)
        return moment.isoformat()

    return {"trace_id": span["traceId"], "span_id": span["spanId"], "parent_span_id": span.get("parentSpanId") or None,
            "name": span["name"], "kind": span.get("kind", 0), "start_time": ts(span["startTimeUnixNano"]),
            "end_time": ts(span["endTimeUnixNano"]), "attributes": json.dumps(attribute_map(span["attributes"])),
            "resource": {"attributes": json.dumps(attribute_map(resource.get("attributes")))},
            "instrumentation_scope": {"name": scope.get("name"), "version": scope.get("version")},
            "status": {"code": span["status"].get("code", 0), "message": span["status"].get("message")},
            "events": [{"time": ts(e["timeUnixNano"]), "name": e["name"], "attributes": json.dumps(attribute_map(e["attributes"]))}
                       for e in span.get("events", [])]}


@pytest.mark.emulators
@pytest.mark.parametrize("source", ["table", "view"])
def test_a_cloud_trace_span_table_read_for_one_day(cloud, tmp_path, source):
    """input.uri bq://... of a table with Cloud Trace's span schema (in the BigQuery emulator), read
    through the Storage Read API with input.otel.start/end: only the day's spans, grouped into
    conversations as the OTLP files are; the rows read are the spans of that day. A view over it (as
    Cloud Trace's _AllSpans is a view) is read through a query of it, in the window: the Storage
    Read API cannot read views (the emulator's can, so the test checks which table was read)."""
    import datetime as dt

    from google.cloud import bigquery

    from evalbeam.metrics.rows.otel import conversation_of
    from evalbeam.metrics.rows.otlp import spans_of_request
    from evalbeam.transforms.local_cloud import bigquery_client
    from tests.emulators.control import PROJECT

    spans = _spans(DATA / "adk_weather.jsonl")
    conversations = {}
    for line in (DATA / "adk_weather.jsonl").read_text().splitlines():
        parsed, _ = spans_of_request(json.loads(line))
        for s in parsed:
            conversations[s["span_id"]] = conversation_of(parsed)
    day = 86_400 * 10**9
    # s_none's spans a day earlier: outside the window
    rows = [_row(r, sc, s, -day if conversations[s["spanId"]] == "s_none" else 0) for r, sc, s in spans]
    dataset = f"{PROJECT}.otel_traces_{source}"
    table_id = f"{dataset}._AllSpans" if source == "table" else f"{dataset}.spans"
    client = bigquery_client(PROJECT)
    client.create_dataset(dataset, exists_ok=True)
    client.create_table(bigquery.Table(table_id, schema=[bigquery.SchemaField.from_api_repr(f) for f in ALL_SPANS_SCHEMA]),
                        exists_ok=True)
    assert client.insert_rows_json(table_id, rows) == []
    if source == "view":
        client.query(f"CREATE VIEW `{dataset}._AllSpans` AS SELECT * FROM `{table_id}`").result()
        table_id = f"{dataset}._AllSpans"
    first = min(int(s["startTimeUnixNano"]) for _, _, s in spans if conversations[s["spanId"]] != "s_none")
    start = dt.datetime.fromtimestamp(first / 1e9, dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    config = {"name": "otel-bq", "run_id": "otelbq1",
              "input": {"uri": f"bq://{table_id}", "format": "otel_traces", "project": PROJECT,
                        "otel": {"group_by": "conversation", "start": start.isoformat(),
                                 "end": (start + dt.timedelta(days=1)).isoformat()}},
              "metrics": [{"name": "failure"}, {"name": "tool_call_count_v1"}],
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / "otel.yaml"
    path.write_text(yaml.safe_dump(config))
    from google.cloud.bigquery_storage_v1 import types

    from evalbeam.transforms.bigquery import plan_read

    session = types.ReadSession.deserialize(plan_read(load_config(path).input, PROJECT).session)
    if source == "view":  # the rows of a query of the view, staged as a table
        assert "/datasets/evalbeam_temp/tables/query_" in session.table, session.table
    else:
        assert session.table.endswith("/datasets/otel_traces_table/tables/_AllSpans"), session.table
    run(load_config(path), PipelineOptions([]))
    out = tmp_path / "out" / "otelbq1"
    [runs] = table(out, "runs")
    in_window = sum(1 for _, _, s in spans if conversations[s["spanId"]] != "s_none")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (2, 2, 0)
    assert runs["lines_read"] == in_window == runs["lines_scored"]
    calls = {r["instance_id"]: r["score"] for r in table(out, "metric_results") if r["metric"] == "tool_call_count_v1"}
    assert calls == {"s_two": 1.5, "s_raise": 1.0}


@pytest.mark.emulators
def test_otlp_files_on_cloud_storage_gzipped(cloud):
    """gs:// OTLP JSON files (one gzipped), through Beam's GCS filesystem against the storage
    emulator: the same cases as from local files."""
    from evalbeam.transforms.local_cloud import storage_client
    from tests.emulators.control import BUCKET, PROJECT

    spans = _spans(DATA / "adk_weather.jsonl")
    bucket = storage_client(PROJECT).bucket(BUCKET)
    bucket.blob("otel/in/a.jsonl").upload_from_string(json.dumps(_request(spans[:10])) + "\n")
    bucket.blob("otel/in/b.jsonl.gz").upload_from_string(gzip.compress((json.dumps(_request(spans[10:])) + "\n").encode()))
    with TestPipeline() as p:
        records, _, _ = p | ReadRecords("otel_traces", uri=f"gs://{BUCKET}/otel/in/*")
        cases, dead, lines = records | GroupSpans("conversation")
        assert_that(cases | beam.Map(lambda c: (c.data["instance_id"], len(c.data["invocations"]), c.line_count)),
                    lambda got: sorted(got) == [("s_none", 1, 3), ("s_raise", 1, 4), ("s_two", 2, 12)]
                    or pytest.fail(str(got)))
        assert_that(lines | beam.Map(lambda s: s.lines) | beam.CombineGlobally(sum),
                    lambda got: got == [len(spans)] or pytest.fail(str(got)), label="AllSpans")


@pytest.mark.slow
def test_spans_exported_twice_are_dropped_and_counted_and_a_changed_copy_is_a_dead_letter(tmp_path):
    """OpenTelemetry exporters and collectors retry: half the requests of a real ADK run sent again.
    The copies are dropped and counted (the runs row's lines_duplicate), never dead letters: the run
    passes with the scores of a run without them (it exited 1 before, most of its records dead letters).
    A span sent again with different content is a dead letter naming where each copy was read."""
    spans = _spans(DATA / "adk_weather.jsonl")
    random.Random(3).shuffle(spans)
    requests = [json.dumps(_request(spans[i:i + 3])) for i in range(0, len(spans), 3)]
    retried = requests[::2]
    copies = sum(len(json.loads(r)["resourceSpans"]) for r in retried)

    def run_on(name: str, files: dict[str, list[str]]):
        folder = tmp_path / name
        folder.mkdir()
        for file, lines in files.items():
            (folder / file).write_text("\n".join(lines) + "\n")
        config = {"name": "otel", "run_id": name,
                  "input": {"uri": str(folder / "*.jsonl"), "format": "otel_traces", "otel": {"group_by": "conversation"}},
                  "metrics": ["failure", "latency_in_seconds", "tool_call_count_v1"],
                  "output": {"parquet": str(tmp_path / "out")}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        result = evalbeam("run", str(path), check=False)
        out = tmp_path / "out" / name
        [runs] = table(out, "runs")
        scores = sorted((r["instance_id"], r["metric"], r["score"]) for r in table(out, "metric_results"))
        return result, runs, scores, table(out, "dead_letter")

    _, once, scores, _ = run_on("once", {"spans.jsonl": requests})
    result, twice, twice_scores, dead = run_on("twice", {"spans.jsonl": requests, "retry.jsonl": retried})
    assert result.returncode == 0, result.stderr
    assert twice_scores == scores and not dead
    assert (twice["read_count"], twice["scored_count"], twice["dead_letter_count"]) == (3, 3, 0)
    assert twice["lines_read"] == len(spans) + copies
    assert twice["lines_duplicate"] == copies == twice["lines_skipped"]
    assert twice["lines_scored"] == len(spans) == once["lines_scored"] and once["lines_duplicate"] == 0
    # one span of the retry changed on the way (a collector added an attribute): a dead letter naming both places
    changed = json.loads(retried[1])
    span = changed["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "collector.retry", "value": {"boolValue": True}})
    result, runs, _, dead = run_on("changed", {"spans.jsonl": requests, "retry.jsonl": [retried[0], json.dumps(changed)]})
    assert result.returncode == 0, result.stderr
    [letter] = dead
    assert f"span {span['spanId']}" in letter["reason"] and "arrived twice with different content" in letter["reason"]
    assert f"{tmp_path / 'changed' / 'spans.jsonl'}:3" in letter["reason"]
    assert f"{tmp_path / 'changed' / 'retry.jsonl'}:2" in letter["reason"]
    assert letter["field"] == "span_id" and letter["line_count"] == 1
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"] + runs["lines_dead_lettered"]
    assert runs["scored_count"] == 3
