"""Conversation scenarios generated through the one judge layer (metrics.scenarios), and the ADK
eval set they are written to.

    grid cell numbers -> keyed by shard (judge.shards: the job's quota split as the judge's)
              -> one DoFn call per shard: each cell's generation request made there from its number
                 (the prompt is never shuffled), answered from judge.cache or this run_id's
                 checkpoints when they hold its key, else called on the shard's judge stream (quota,
                 retries, hedging) or in batch jobs (judge.mode batch), checkpointed as answers come
              -> per cell: each scenario asked checked (empty, a tool the agent lacks, ADK's own
                 models), near-duplicates found (datasketch MinHash), one scenarios row per
                 scenario asked (kept, near_duplicate or dead_letter with the reason)
              -> the kept ones: (eval_id, eval case) for the eval set file, and records (an ADK
                 eval set's records, as transforms.read_adk reads a conversation_scenario case)
                 for a run that evaluates them.

Why not the judge composite (transforms.judge.AnswerJudgeRequests): its shuffles would carry every
cell's prompt and answer, which the local runner holds in memory; here a shuffle carries the cells'
numbers only, and a shard holds the calls in flight. The client, quota, retries, cache keys,
checkpoints, batch jobs and accounting are the judge layer's own.

The eval set is one JSON document: each bundle writes its kept cases sorted by eval_id to a part
file, and one last step merges the parts in order (heapq.merge), a case at a time, into the file,
put in place only once complete. Memory stays bounded by the cells in flight, not by the set.
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import posixpath
import uuid
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from evalbeam.metrics.judge.answers import AnswerStore
from evalbeam.metrics.judge.batch import judge_batch
from evalbeam.metrics.judge.client import JudgeRequest, JudgeResponse, JudgeStream, request_key
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.rows.tables import RunKey, to_json_text
from evalbeam.metrics.scenarios import (
    ANSWER_FIELD,
    DEAD_LETTER,
    KEPT,
    NEAR_DUPLICATE,
    USAGE,
    AgentDescription,
    Cell,
    Grid,
    adk_check,
    check_item,
    eval_id_of,
    generation_prompt,
    generation_schema,
    near_duplicates,
    scenario_digest,
    scenario_text,
    set_digest,
)
from evalbeam.transforms import judge_checkpoint
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import UsageFn
from evalbeam.transforms.progress import CallCounters
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.progress import CountFn, JudgeShardLog
from evalbeam.transforms.records import Record

KEPT_CASES = "kept_cases"
ANSWERED = "answered"
NEEDED = "needed"


@dataclasses.dataclass(frozen=True)
class GenerationPlan:
    """What every shard needs to make and read its cells' requests: plain data (the grid, the agent's
    description, the examples), so the workers need neither the agent's code nor the config."""
    grid: Grid
    agent: AgentDescription
    examples: tuple[str, ...]
    settings: JudgeSettings  # the generator's: judge: with scenarios.judge laid over it
    seed: int
    threshold: float
    eval_set_id: str

    def request(self, cell: Cell) -> JudgeRequest:
        count = self.grid.per_cell
        prompt = generation_prompt(self.agent, cell, count, self.examples)
        schema_json = json.dumps(generation_schema(count), sort_keys=True)
        key = request_key(self.settings, prompt, schema_json, self.seed)
        return JudgeRequest(key, USAGE, prompt, schema_json, ANSWER_FIELD, (), seed=self.seed)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One scenario asked of a cell, decided."""
    position: int
    decision: str
    reason: str | None = None
    field: str | None = None
    eval_id: str | None = None
    digest: str | None = None
    duplicate_of: str | None = None
    scenario: dict[str, Any] | None = None
    tools: tuple[str, ...] = ()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) or value is None else json.dumps(value, ensure_ascii=False)


def cell_outcomes(plan: GenerationPlan, cell: Cell, response: JudgeResponse, validate=None) -> list[Outcome]:
    """The decision on each of the per_cell scenarios asked of a cell, from the generator's answer;
    `validate`: ADK's check of an eval case (metrics.scenarios.adk_check, the default)."""
    validate = validate or adk_check
    count = plan.grid.per_cell
    if response.error is not None:
        return [Outcome(k, DEAD_LETTER, f"generation failed: {response.error}") for k in range(count)]
    items = json.loads(response.verdict)[:count]
    outcomes: list[Outcome | None] = [None] * count
    candidates: list[tuple[int, dict, tuple, str, str]] = []
    for k, item in enumerate(items):
        checked = check_item(item, cell.persona, plan.agent.tools)
        if checked.reason is None:
            digest = scenario_digest(checked.scenario)
            eval_id = eval_id_of(cell, digest)
            refused = validate(eval_id, checked.scenario)
            if refused is None:
                candidates.append((k, checked.scenario, checked.tools, digest, eval_id))
                continue
            checked = dataclasses.replace(checked, reason=refused, field="conversation_scenario")
        outcomes[k] = Outcome(k, DEAD_LETTER, checked.reason, checked.field, scenario=checked.scenario,
                              tools=checked.tools)
    duplicates = near_duplicates([scenario_text(c[1]) for c in candidates], plan.threshold)
    for (k, scenario, tools, digest, eval_id), of in zip(candidates, duplicates):
        if of is None:
            outcomes[k] = Outcome(k, KEPT, None, None, eval_id, digest, None, scenario, tools)
        else:
            first = candidates[of]
            outcomes[k] = Outcome(k, NEAR_DUPLICATE, f"near-duplicate of {first[4]} (word-shingle Jaccard >= "
                                  f"{plan.threshold:g}, MinHash estimate)", None, None, digest, first[4], scenario, tools)
    for k in range(len(items), count):
        outcomes[k] = Outcome(k, DEAD_LETTER, f"not generated: the generator returned {len(items)} of the {count} "
                                              "scenarios asked", "scenarios")
    return [o for o in outcomes if o is not None]


def scenario_row(run: RunKey, plan: GenerationPlan, cell: Cell, outcome: Outcome, response: JudgeResponse | None,
                 key: str | None) -> dict[str, Any]:
    scenario = outcome.scenario or {}
    return {**run.columns(), "eval_set_id": plan.eval_set_id, "eval_id": outcome.eval_id, "cell": cell.number,
            **cell.columns(), "position": outcome.position, "model": plan.settings.model, "request_key": key,
            "digest": outcome.digest, "decision": outcome.decision, "reason": outcome.reason, "field": outcome.field,
            "duplicate_of": outcome.duplicate_of, "starting_prompt": _text(scenario.get("starting_prompt")),
            "conversation_plan": _text(scenario.get("conversation_plan")),
            "tools": to_json_text(list(outcome.tools)) if outcome.scenario is not None else None,
            "conversation_scenario": to_json_text(scenario) if outcome.decision == KEPT else None,
            "cache_hit": bool(response.cache_hit) if response is not None else True}


def eval_case(eval_id: str, scenario: dict[str, Any]) -> str:
    """An eval case of the eval set file, as one line of JSON (keys sorted: the same bytes every time)."""
    return json.dumps({"eval_id": eval_id, "conversation_scenario": scenario}, sort_keys=True, ensure_ascii=False)


def record_data(eval_set_id: str, eval_id: str, scenario: dict[str, Any], columns: dict[str, Any]) -> dict[str, Any]:
    """A kept scenario as the record transforms.read_adk reads from an eval set's conversation_scenario case,
    with the grid's columns (the run's slices)."""
    return {"instance_id": f"{eval_set_id}:{eval_id}", "eval_set_id": eval_set_id, "eval_id": eval_id,
            "adk_case": {"eval_set_id": eval_set_id, "eval_id": eval_id, "conversation_scenario": scenario},
            **{k: v for k, v in columns.items() if v is not None}}


def kept_output(plan: GenerationPlan, cell: Cell, outcome: Outcome):
    """(eval_id, its eval case line, its record data) of a kept scenario."""
    return (outcome.eval_id, eval_case(outcome.eval_id, outcome.scenario),
            record_data(plan.eval_set_id, outcome.eval_id, outcome.scenario, cell.columns()))


class GenerateFn(beam.DoFn):
    """(shard, [cell number]) -> scenarios rows; tagged KEPT_CASES: (eval_id, case line, record data) of
    the kept scenarios; ANSWERED: (response, ()) once per cell (judge_cache rows, usage); NEEDED: a mark per
    cell not answered by judge.cache (progress)."""

    def __init__(self, run: RunKey, plan: GenerationPlan, context: JudgeContext):
        self._run, self._plan = run, plan
        self._shards = plan.settings.shards
        self._settings = plan.settings.with_quota_share(1.0 / self._shards)
        self._checkpoint = context.checkpoint
        self._staging = context.staging
        self._checkpoint_seconds = plan.settings.checkpoint_seconds

    def setup(self):
        self._counters = {name: Metrics.counter("evalbeam", f"scenarios_{name}")
                          for name in ("asked", KEPT, NEAR_DUPLICATE, DEAD_LETTER)}
        self._hits = Metrics.counter("evalbeam", "judge_cache_hits")
        self._reused = Metrics.counter("evalbeam", "judge_checkpoint_reused")
        self._to_call = Metrics.counter("evalbeam", "judge_requests_to_call")
        self._counted = CallCounters()

    def _known(self, shard: int, cached) -> AnswerStore:
        """This shard's answers to reuse, on disk: its checkpoints, and judge.cache over them."""
        known = AnswerStore()
        if self._checkpoint:
            known.put_all(judge_checkpoint.read_checkpoints(self._checkpoint, shard, self._shards).values())
        known.put_all(r for _, r in cached if r.metric == USAGE)
        return known

    def process(self, element, cached=()):
        shard, numbers = element
        plan = self._plan
        known = self._known(shard, cached)
        log = JudgeShardLog(shard, self._shards, self._settings.requests_per_minute)
        writer = judge_checkpoint.CheckpointWriter(self._checkpoint, shard, self._checkpoint_seconds) \
            if self._checkpoint else None
        stream, waiting = None, []
        try:
            for number in numbers:
                cell = plan.grid.cell(number)
                request = plan.request(cell)
                hit = known.get(request.key)
                if hit is not None:
                    hit = dataclasses.replace(hit, metric=USAGE, model=self._settings.model)
                    (self._hits if hit.cache_hit else self._reused).inc()
                    if not hit.cache_hit:
                        yield beam.pvalue.TaggedOutput(NEEDED, 1)
                    yield from self._outputs(cell, request.key, hit)
                    continue
                self._to_call.inc()
                yield beam.pvalue.TaggedOutput(NEEDED, 1)
                if self._settings.mode == "batch":
                    waiting.append((cell, request))
                    continue
                if stream is None:
                    stream = JudgeStream(self._settings, lambda item: item[1])
                for (done_cell, done_request), response in stream.put((cell, request)):
                    yield from self._answered(done_cell, done_request, response, log, writer)
            if stream is not None:
                for (done_cell, done_request), response in stream.close():
                    yield from self._answered(done_cell, done_request, response, log, writer)
            if waiting:
                journal = judge_checkpoint.BatchJournal(self._checkpoint, shard, self._shards) \
                    if self._checkpoint else None
                staging = judge_checkpoint.GcsStaging(self._staging) if self._staging else None
                for (done_cell, done_request), response in judge_batch(self._settings, waiting, lambda item: item[1],
                                                                        journal, staging=staging):
                    yield from self._answered(done_cell, done_request, response, log, writer)
            log.finish()
        finally:
            if writer:
                writer.close()
            known.close()

    def _answered(self, cell: Cell, request: JudgeRequest, response: JudgeResponse, log, writer):
        self._counted.add(response, log, writer)
        yield from self._outputs(cell, request.key, response)

    def _outputs(self, cell: Cell, key: str, response: JudgeResponse):
        yield beam.pvalue.TaggedOutput(ANSWERED, (response, ()))
        for outcome in cell_outcomes(self._plan, cell, response):
            self._counters["asked"].inc()
            self._counters[outcome.decision].inc()
            yield scenario_row(self._run, self._plan, cell, outcome, response, key)
            if outcome.decision == KEPT:
                yield beam.pvalue.TaggedOutput(KEPT_CASES, kept_output(self._plan, cell, outcome))


class GenerateScenarios(beam.PTransform):
    """PBegin -> (scenarios rows, kept (eval_id, case line, record data), judge_cache rows, usage)."""

    def __init__(self, run: RunKey, plan: GenerationPlan, context: JudgeContext):
        super().__init__()
        self._run, self._plan, self._context = run, plan, context

    def expand(self, pbegin):
        plan, context = self._plan, self._context
        shards = plan.settings.shards
        cached = [beam.pvalue.AsIter(context.cached | "GenerationAnswers" >> beam.Filter(
            lambda kv: kv[1].metric == USAGE))] if context.cached is not None else []
        generated = (
            pbegin
            | "Cells" >> beam.Create(list(range(plan.grid.size)))
            | "ByShard" >> beam.Map(lambda n, s: (n % s, n), shards)
            | "Shards" >> beam.GroupByKey()
            | "Generate" >> beam.ParDo(GenerateFn(self._run, plan, context), *cached).with_outputs(
                KEPT_CASES, ANSWERED, NEEDED, main="rows")
        )
        answered = generated[ANSWERED]
        if context.progress:
            generated[NEEDED] | "ProgressJudgeNeeded" >> beam.ParDo(CountFn(context.progress, "judge_needed"))
            called = answered | "Called" >> beam.Filter(lambda a: not a[0].cache_hit)
            called | "ProgressJudgeDone" >> beam.ParDo(CountFn(context.progress, "judge_done"))
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None and not a[0].cache_hit else [],
            self._run, plan.settings.model)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return generated.rows, generated[KEPT_CASES], cache_rows, usage


def scenario_records(kept, eval_set: str) -> Record:
    """A kept scenario -> the run's record of it (its source: the eval set file and the case)."""
    eval_id, line, data = kept
    return Record(f"{eval_set}: eval case {eval_id!r}", data, line, from_csv=False, origin=eval_set)


# --- the eval set file -------------------------------------------------------------------------------------


PART_LINES = 2_000  # kept cases held before they are written as a sorted part


class _PartFn(beam.DoFn):
    """Kept cases -> part files under `folder`: `eval_id<TAB>case line` lines sorted by eval_id, a part per
    PART_LINES cases (and one at the end of a bundle), so that memory holds at most PART_LINES of them;
    yields each part's path."""

    def __init__(self, folder: str):
        self._folder = folder

    def start_bundle(self):
        self._lines: list[tuple[str, str]] = []

    def process(self, kept):
        self._lines.append((kept[0], kept[1]))
        if len(self._lines) >= PART_LINES:
            yield self._write()

    def finish_bundle(self):
        if self._lines:
            yield GlobalWindows.windowed_value(self._write())

    def _write(self) -> str:
        path = FileSystems.join(self._folder, f"part-{uuid.uuid4().hex}.tsv")
        with FileSystems.create(path, mime_type="text/plain") as f:
            for eval_id, line in sorted(self._lines):
                f.write(f"{eval_id}\t{line}\n".encode("utf-8"))
        self._lines = []
        return path


def _part_lines(path: str) -> Iterable[tuple[str, str]]:
    with FileSystems.open(path, mime_type="application/octet-stream") as f:
        for raw in f:
            eval_id, _, line = raw.decode("utf-8").rstrip("\n").partition("\t")
            yield eval_id, line


MERGE_FAN_IN = 100  # part files read at once


def fewer_parts(paths: list[str], folder: str) -> list[str]:
    """At most MERGE_FAN_IN parts: more are first merged in groups into parts of their own."""
    paths = sorted(paths)
    while len(paths) > MERGE_FAN_IN:
        merged = []
        for i in range(0, len(paths), MERGE_FAN_IN):
            path = FileSystems.join(folder, f"merged-{uuid.uuid4().hex}.tsv")
            with FileSystems.create(path, mime_type="text/plain") as f:
                for eval_id, line in heapq.merge(*(_part_lines(p) for p in paths[i:i + MERGE_FAN_IN])):
                    f.write(f"{eval_id}\t{line}\n".encode("utf-8"))
            merged.append(path)
        paths = merged
    return paths


def write_eval_set(_, parts: list[str], path: str, folder: str, eval_set_id: str, name: str) -> Iterable[dict]:
    """The parts merged into the eval set file: an ADK EvalSet, one eval case a line, in eval_id order;
    written aside and put in place once complete (a failed run leaves the file it had). Two passes over
    the parts, a line at a time: the set's digest (its description names it), then the cases. Yields
    {cases, digest} (metrics.scenarios.set_digest)."""
    parts = fewer_parts(parts, folder)
    digests = [0]

    def each_digest():
        for _, line in heapq.merge(*(_part_lines(p) for p in parts)):
            digests[0] += 1
            yield scenario_digest(json.loads(line)["conversation_scenario"])

    digest = set_digest(each_digest())
    count = digests[0]
    description = f"Conversation scenarios generated by evalbeam: {count} scenario(s), set digest {digest}"
    header = {"eval_set_id": eval_set_id, "name": name, "description": description, "creation_timestamp": 0.0}
    temporary = f"{path}.evalbeam-{uuid.uuid4().hex[:12]}.tmp"
    with FileSystems.create(temporary, mime_type="application/json") as f:
        f.write(("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n"
                                 for k, v in header.items()) + '  "eval_cases": [').encode("utf-8"))
        for n, (_, line) in enumerate(heapq.merge(*(_part_lines(p) for p in parts))):
            f.write(((",\n    " if n else "\n    ") + line).encode("utf-8"))
        f.write(("\n  ]\n}\n" if count else "]\n}\n").encode("utf-8"))
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([temporary], [path])
    if parts:
        try:
            FileSystems.delete([folder])
        except Exception:  # noqa: BLE001 - the parts are scratch: a folder left behind is harmless
            pass
    yield {"cases": count, "digest": digest}


class WriteEvalSet(beam.PTransform):
    """Kept (eval_id, case line, record data) -> the eval set file at `path`; yields one {cases, digest}."""

    def __init__(self, path: str, eval_set_id: str, name: str):
        super().__init__()
        self._path, self._eval_set_id, self._name = path, eval_set_id, name

    def expand(self, kept):
        head, tail = posixpath.split(self._path)
        folder = FileSystems.join(head or ".", f".{tail}.parts-{uuid.uuid4().hex[:12]}")
        parts = kept | "Parts" >> beam.ParDo(_PartFn(folder))
        return (kept.pipeline | "Once" >> beam.Create([None])
                | "Merge" >> beam.FlatMap(write_eval_set, beam.pvalue.AsList(parts), self._path, folder,
                                          self._eval_set_id, self._name))
