"""Inference before scoring (the `inference` config block).

    instances -> (num_runs > 1) one copy per run, ids <id>:run<k>
              -> function | agent: batches of cases, each batch inferred in one
                 DoFn call with `max_concurrency` cases in flight
                 (metrics.agents.inference.infer_all), each case filled or failed
              -> a2a | agent_engine: cases split into inference.shards by their content
                 key, each shard inferred on one worker (metrics.agents.a2a and agent_engine,
                 through metrics.agents.calls: the job's quota share, retries, no answered
                 turn sent again), finished cases
                 checkpointed and reused by a re-run of the run_id
              -> model: one free-text request per case, keyed by the content hash
                 of model, settings and prompt, answered by the judge layer's one
                 composite (transforms.judge.AnswerJudgeRequests: judge.cache,
                 checkpoints, shards within the job's quota, retries), then joined
                 back to its case
    -> (instances with what inference produced, judge_cache rows, usage)

A case that raises, times out or gets no answer keeps its instance, with
`failure` 1 and `inference_error` (transforms.score puts the error on each of
its metrics): nothing is dropped.

The model's calls share the judge's quota without splitting it: judging starts
only after the join that ends inference (a CoGroupByKey), so the two stages do
not call at the same time.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.metrics.agents.inference import (
    USAGE_METRIC,
    AgentInferrer,
    InferenceError,
    apply_result,
    failed,
    infer_all,
    load_target,
    make_inferrer,
    render_prompt,
    scenario_of,
)
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.deployed import case_key, decode_result, make_deployed_inferrer
from evalbeam.metrics.retry import RetryPolicy
from evalbeam.metrics.rows.instance import Instance, run_number
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeRequest, request_key
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn
from evalbeam.transforms.judge_checkpoint import CheckpointWriter, read_checkpoints, shard_of
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.metrics.rows.tables import RunKey, blank_metric_row
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.deployed import CHECKPOINTS, CheckpointedInferrer, deployed_auth
from evalbeam.transforms.simulator import Simulate

FAILED = "failed"


def run_copies(instance: Instance, num_runs: int):
    """num_runs > 1: one copy of the case per run, `:run<k>` (k from 1) on its id."""
    if num_runs == 1:
        yield instance
        return
    for k in range(1, num_runs + 1):
        yield dataclasses.replace(instance, instance_id=f"{instance.instance_id}:run{k}", fields=dict(instance.fields))


def inferred(instance: Instance) -> bool:
    return "inference_error" not in instance.fields


def inference_error_rows(instance: Instance, run: RunKey, metrics: list[str], model: str):
    """A case inference could not produce, with a judge metric row per judge metric carrying the error."""
    rows = [{**blank_metric_row(run, instance.instance_id, m, model), "error": instance.fields["inference_error"]}
            for m in metrics]
    return ScoredInstance(instance, rows)


class InferFn(beam.DoFn):
    """[instance] -> instances filled by a function or an ADK agent."""

    def __init__(self, kind: str, target: str, max_concurrency: int, timeout_seconds: float, num_runs: int = 1):
        self._num_runs = num_runs  # 1: every case is run 1, whatever its id ends with
        self._kind = kind
        self._target = target
        self._max_concurrency = max_concurrency
        self._timeout = timeout_seconds
        self._cases = Metrics.counter("evalbeam", "inference_cases")
        self._failures = Metrics.counter("evalbeam", "inference_failures")

    def setup(self):
        # fail the worker at once, with the reason, when the code is not installed there
        if self._kind == "agent":
            AgentInferrer(self._target)
        else:
            load_target(self._target, f"inference.{self._kind}")

    def process(self, batch):
        by_id = {i.instance_id: i for i in batch}
        items = [(i.instance_id, i.fields) for i in batch]
        make = lambda: make_inferrer(self._kind, self._target, self._max_concurrency)  # noqa: E731
        run_of = run_number if self._num_runs > 1 else (lambda _: 1)
        for instance_id, fields in infer_all(make, items, self._max_concurrency, self._timeout, run_of=run_of):
            self._cases.inc()
            self._failures.inc("inference_error" in fields)
            yield dataclasses.replace(by_id[instance_id], fields=fields)


class DeployedInferFn(beam.DoFn):
    """(shard, [instance]) -> instances filled by a deployed agent (inference.a2a or
    inference.agent_engine): one shard per call, with its share of the job's quota.
    Finished cases are checkpointed every judge.checkpoint_seconds under the run's
    checkpoint folder (transforms.judge_checkpoint's chunks, keyed by the case's content
    key, metrics.agents.deployed.case_key): a re-run of the same run_id takes them from there
    instead of asking the agent again."""

    def __init__(self, inference, checkpoint: str | None, checkpoint_seconds: float):
        self._inference = inference
        self._folder = FileSystems.join(checkpoint, CHECKPOINTS) if checkpoint else None
        self._seconds = checkpoint_seconds
        self._cases = Metrics.counter("evalbeam", "inference_cases")
        self._failures = Metrics.counter("evalbeam", "inference_failures")
        self._requests = Metrics.counter("evalbeam", "inference_requests")
        self._retries = Metrics.counter("evalbeam", "inference_retries")
        self._reused = Metrics.counter("evalbeam", "inference_checkpointed")

    def process(self, element):
        shard, batch = element
        inference = self._inference
        batch = list(batch)
        done = read_checkpoints(self._folder, shard, inference.shards) if self._folder else {}
        keys = {i.instance_id: case_key(inference.kind, inference.target, i.instance_id, i.fields) for i in batch}
        todo = []
        for instance in batch:
            answer = done.get(keys[instance.instance_id])
            if answer is None:
                todo.append(instance)
                continue
            self._reused.inc()
            self._cases.inc()
            try:
                fields = apply_result(instance.fields, decode_result(answer.verdict))
            except InferenceError as e:
                fields = failed(instance.fields, str(e))
            yield dataclasses.replace(instance, fields=fields)
        if not todo:
            return
        writer = CheckpointWriter(self._folder, shard, self._seconds) if self._folder else None
        items = [(i.instance_id, dict(i.fields)) for i in todo]
        by_fields = {id(f): keys[k] for k, f in items}
        calls: list = []

        def make():
            calls.append(Calls(inference.quota_share(), RetryPolicy(max_attempts=inference.max_attempts),
                               inference.request_timeout_seconds))
            inner = make_deployed_inferrer(inference.kind, inference.target, calls[0], inference.base_url,
                                           inference.max_concurrency, deployed_auth(inference))
            return CheckpointedInferrer(inner, by_fields, writer)

        by_id = {i.instance_id: i for i in todo}
        try:
            for instance_id, fields in infer_all(make, items, inference.max_concurrency, inference.timeout_seconds):
                if writer is not None:
                    writer.check()  # a full disk: the run ends (status 120), no case of this shard is kept
                self._cases.inc()
                self._failures.inc("inference_error" in fields)
                yield dataclasses.replace(by_id[instance_id], fields=fields)
        finally:
            if writer is not None:
                writer.close()
            if calls:
                self._requests.inc(calls[0].stats.requests)
                self._retries.inc(calls[0].stats.retries)


def model_asks(instance: Instance, settings, template: str, num_runs: int = 1):
    """instance -> (request_key, (request, instance_id)), or tagged failed: the instance.
    With num_runs > 1, run k is sample k-1 (its own key and seed), so runs are not
    answered once for all."""
    try:
        turns = instance.fields.get("invocations")
        if turns and len(turns) > 1:
            raise InferenceError(f"inference.model answers one prompt per case; this case has {len(turns)} turns "
                                 "(use inference.function or inference.agent)")
        prompt = render_prompt(template, instance.fields)
    except InferenceError as e:
        yield beam.pvalue.TaggedOutput(FAILED, dataclasses.replace(instance, fields=failed(instance.fields, str(e))))
        return
    sample = int(instance.instance_id.rsplit(":run", 1)[1]) - 1 if num_runs > 1 else 0
    key = request_key(settings, prompt, "", sample)
    yield key, (JudgeRequest(key, USAGE_METRIC, prompt, "", FREE_TEXT, (), seed=sample if num_runs > 1 else None),
                instance.instance_id)


def fill_from_answer(element):
    """(instance_id, {instance, answer, failed}) -> the case filled from its answer
    (or, failed before asking, as it failed)."""
    instance_id, groups = element
    failed_before = list(groups["failed"])
    if failed_before:
        yield from failed_before
        return
    answers = list(groups["answer"])
    for instance in groups["instance"]:
        response = answers[0] if answers else None
        if response is None:
            fields = failed(instance.fields, "inference.model: no answer reached this case")
        elif response.error:
            fields = failed(instance.fields, f"inference.model: {response.error}")
        else:
            try:
                fields = apply_result(instance.fields, response.verdict)
            except InferenceError as e:
                fields = failed(instance.fields, str(e))
        yield dataclasses.replace(instance, fields=fields)


class Infer(beam.PTransform):
    """Instances -> (instances with inference's output, judge_cache rows, usage per metric)."""

    def __init__(self, run: RunKey, inference, context: JudgeContext):
        super().__init__()
        self._run = run
        self._inference = inference
        self._context = context

    def expand(self, instances):
        inference = self._inference
        cases = instances | "Runs" >> beam.FlatMap(run_copies, inference.num_runs)
        if inference.kind != "model" and inference.user_simulator is not None:
            # conversation_scenario cases run with the user simulator (transforms.simulator)
            split = cases | "Scenarios" >> beam.Partition(lambda i, _: int(scenario_of(i.fields) is not None), 2)
            fixed = split[0] | "Fixed" >> Infer(self._run, inference.model_copy(update={"user_simulator": None, "num_runs": 1}),
                                                 self._context)
            scenarios = split[1]
            if inference.deployed:
                # One agent, one quota: the simulated conversations start once the fixed-turn cases are done
                # (a side input is ready only then), so the two kinds never together exceed requests_per_minute.
                fixed_done = fixed[0] | "FixedDone" >> beam.combiners.Count.Globally()
                scenarios = scenarios | "AfterFixed" >> beam.Map(lambda i, _done: i, beam.pvalue.AsSingleton(fixed_done))
            simulated, cache_rows, usage = scenarios | "Simulate" >> Simulate(self._run, inference, self._context)
            return (fixed[0], simulated) | "AllCases" >> beam.Flatten(), cache_rows, usage
        if inference.deployed:
            kind, target, shards = inference.kind, inference.target, inference.shards
            filled = (
                cases
                | "ToShards" >> beam.Map(lambda i: (shard_of(case_key(kind, target, i.instance_id, i.fields), shards), i))
                | "ByShard" >> beam.GroupByKey()
                | "InferDeployed" >> beam.ParDo(DeployedInferFn(inference, self._context.checkpoint,
                                                                self._context.settings.checkpoint_seconds))
            )
            pipeline = instances.pipeline
            return filled, pipeline | "NoInferenceCache" >> beam.Create([]), pipeline | "NoInferenceUsage" >> beam.Create([{}])
        if inference.kind != "model":
            filled = (
                cases
                | "Spread" >> beam.Reshuffle()
                | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=max(16, 4 * inference.max_concurrency))
                | "Infer" >> beam.ParDo(InferFn(inference.kind, inference.target, inference.max_concurrency,
                                                inference.timeout_seconds, inference.num_runs))
            )
            pipeline = instances.pipeline
            return filled, pipeline | "NoInferenceCache" >> beam.Create([]), pipeline | "NoInferenceUsage" >> beam.Create([{}])
        context = self._context.for_model(inference.model)
        asks = cases | "ModelRequests" >> beam.FlatMap(
            model_asks, context.settings, inference.prompt_template, inference.num_runs).with_outputs(
            FAILED, main="asks")
        answered = asks.asks | "Generate" >> AnswerJudgeRequests(context)
        fanned = answered | "ToCases" >> beam.FlatMap(lambda a: [(link, a[0]) for link in a[1]])
        filled = (
            {"instance": cases | "ById" >> beam.Map(lambda i: (i.instance_id, i)), "answer": fanned,
             "failed": asks[FAILED] | "FailedById" >> beam.Map(lambda i: (i.instance_id, i))}
            | "JoinAnswers" >> beam.CoGroupByKey()
            | "Fill" >> beam.FlatMap(fill_from_answer)
        )
        cache_rows = answered | "InferenceCacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], self._run, inference.model)
        usage = answered | "InferenceUsage" >> beam.CombineGlobally(UsageFn())
        return filled, cache_rows, usage
