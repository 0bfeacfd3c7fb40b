"""conversation_scenario cases: the agent (inference.function, inference.agent, or a deployed
one: inference.a2a, inference.agent_engine) run against ADK's LLM-backed user simulator
(metrics.agents.simulator), whose model calls go through the one judge layer. A deployed agent's
conversation is its one A2A context or Agent Engine session, each user message one request
through metrics.agents.calls.Calls (the job's quota, split over these shards; retries; a turn never
sent twice), finished conversations checkpointed as transforms.inference's fixed-turn cases are.

    scenario cases -> keyed by shard (judge.shards; the judge's split of the quota)
                   -> one DoFn call per shard: its cases with inference.max_concurrency
                      in flight on one asyncio loop (metrics.agents.inference.infer_all), each
                      simulator call asked of the judge layer's client (JudgeClient:
                      backend, base_url, credentials, retries, 1/shards of the job's
                      quota), unless judge.cache or this run_id's checkpoints already
                      hold its answer (keyed by the content hash of the model, its
                      settings and the prompt, i.e. the conversation so far: a re-run
                      with the same cache asks the model nothing)
    -> (instances, judge_cache rows, usage as `user_simulator` in runs.judge_usage)

Why not the judge composite (transforms.judge.AnswerJudgeRequests): each simulator
call depends on the agent's previous answer, so the calls of a case cannot be
gathered before asking; they are asked one by one inside the conversation, with the
same client, cache keys, checkpoints and accounting.
"""
from __future__ import annotations

import asyncio
import dataclasses

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.deployed import case_key, decode_result, make_deployed_inferrer
from evalbeam.metrics.agents.inference import (
    AgentInferrer,
    InferenceError,
    apply_result,
    failed,
    infer_all,
    load_target,
    make_inferrer,
)
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeClient, JudgeRequest, JudgeResponse, request_key
from evalbeam.metrics.judge.ratelimit import AdaptiveRateLimiter
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.retry import RetryPolicy
from evalbeam.metrics.rows.instance import run_number
from evalbeam.metrics.rows.trace import add_rubrics
from evalbeam.metrics.agents.simulator import USAGE_METRIC, LlmBackedUserSimulator, UserSimulatorFailed, parse_scenario
from evalbeam.transforms import judge_checkpoint
from evalbeam.transforms.deployed import CHECKPOINTS, CheckpointedInferrer, deployed_auth
from evalbeam.transforms.judge_checkpoint import CheckpointWriter, read_checkpoints
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import UsageFn
from evalbeam.transforms.progress import CountFn, reused
from evalbeam.metrics.rows.tables import RunKey

ANSWERS = "answers"


class SimulatorCalls:
    """The simulator calls of one shard, on its asyncio loop: `for_case(scenario)` gives a case
    its simulator; every prompt is answered from `known` (judge.cache, checkpoints, this shard's
    earlier answers) or asked of the judge client once (concurrent askers of one prompt share
    the call). `responses` holds one JudgeResponse per ask, for the usage and the cache rows."""

    def __init__(self, settings: JudgeSettings, config, known: dict[str, JudgeResponse],
                 checkpoint: judge_checkpoint.CheckpointWriter | None):
        self._settings = settings
        self._config = config
        self._known = known
        self._checkpoint = checkpoint
        self._client: JudgeClient | None = None
        self._asking: dict[str, asyncio.Future] = {}
        self.responses: list[JudgeResponse] = []

    def for_case(self, scenario, instance_id: str) -> LlmBackedUserSimulator:
        """With num_runs > 1, run k's simulator is sample k-1 (its own seed and cache keys), as
        inference.model's runs are: the runs are separate conversations, not one answered once."""
        c = self._config
        run = instance_id.rsplit(":run", 1)[1] if ":run" in instance_id else ""
        sample = int(run) - 1 if run.isdigit() else None
        return LlmBackedUserSimulator(parse_scenario(scenario), lambda prompt: self.ask(prompt, sample),
                                      c.max_allowed_invocations, c.custom_instructions, c.include_function_calls)

    async def ask(self, prompt: str, sample: int | None = None) -> str:
        key = request_key(self._settings, prompt, "", sample or 0)
        if key in self._known:
            # asked before: a cache hit or checkpoint as it came, and this shard's own answers for free
            first = self._known[key]
            response = first if first.cache_hit or first.checkpointed else \
                JudgeResponse(key, USAGE_METRIC, first.verdict, cache_hit=True)
            if first.checkpointed:  # reused once (a cache row, counted); asked again, a hit of this run
                self._known[key] = JudgeResponse(key, USAGE_METRIC, first.verdict, cache_hit=True)
        elif key in self._asking:
            # asked by another case at the same moment: its answer, counted once (here as a hit of this run)
            response = dataclasses.replace(await asyncio.shield(self._asking[key]), attempts=0, prompt_tokens=0,
                                           output_tokens=0, rate_limited=0, hedged=0, cache_hit=True)
        else:
            future = asyncio.get_running_loop().create_future()
            self._asking[key] = future
            try:
                response = await self._judge(JudgeRequest(key, USAGE_METRIC, prompt, "", FREE_TEXT, (), seed=sample))
            except BaseException as e:
                future.set_exception(e)
                future.exception()  # retrieved: no "never retrieved" warning when no other case waited
                raise
            finally:
                del self._asking[key]
            if not future.done():
                future.set_result(response)
            if response.error is None:
                self._known[key] = response
                if self._checkpoint is not None:
                    self._checkpoint.add(response)
        self.responses.append(response)
        if response.error is not None:
            raise UserSimulatorFailed(f"user simulator: {response.error}")
        return response.verdict

    async def _judge(self, request: JudgeRequest) -> JudgeResponse:
        if self._client is None:
            settings = self._settings
            self._client = JudgeClient(settings, AdaptiveRateLimiter(settings.requests_per_minute,
                                                                     settings.tokens_per_minute))
        return await self._client.judge(request)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


class SimulateFn(beam.DoFn):
    """(shard, [instance]) -> instances with their simulated conversations; tagged ANSWERS:
    a JudgeResponse per simulator call asked."""

    def __init__(self, kind: str, target: str, max_concurrency: int, timeout_seconds: float,
                 simulator_config, settings: JudgeSettings, checkpoint: str | None, deployed=None):
        self._kind, self._target = kind, target
        self._max_concurrency, self._timeout = max_concurrency, timeout_seconds
        self._config, self._settings, self._checkpoint = simulator_config, settings, checkpoint
        self._deployed = deployed  # inference (the config) for a2a and agent_engine, else None
        self._cases = Metrics.counter("evalbeam", "simulated_cases")
        self._requests = Metrics.counter("evalbeam", "inference_requests")
        self._retries = Metrics.counter("evalbeam", "inference_retries")
        self._reused = Metrics.counter("evalbeam", "inference_checkpointed")

    def setup(self):
        if self._deployed is not None:
            return  # nothing to import: the agent is reached over the network
        if self._kind == "agent":
            AgentInferrer(self._target)
        else:
            load_target(self._target, f"inference.{self._kind}")

    def _deployed_inferrer(self, shard: int, batch: list, calls: list):
        """A deployed agent's conversations, as transforms.inference.DeployedInferFn runs fixed turns: the job's
        quota split over this transform's shards, retries, no turn sent twice, finished conversations
        checkpointed (the inference checkpoints, keyed by the case and its scenario) and reused by a re-run.
        -> (make, the cases already finished, the checkpoint writer or None)."""
        inference = self._deployed
        folder = FileSystems.join(self._checkpoint, CHECKPOINTS) if self._checkpoint else None
        done = read_checkpoints(folder) if folder else {}
        keys = {i.instance_id: case_key(inference.kind, inference.target, i.instance_id, i.fields) for i in batch}
        finished = {i.instance_id: done[keys[i.instance_id]] for i in batch if keys[i.instance_id] in done}
        writer = CheckpointWriter(folder, f"sim{shard}", self._settings.checkpoint_seconds) if folder else None
        by_fields = {id(i.fields): keys[i.instance_id] for i in batch}
        share = inference.requests_per_minute / self._settings.shards if inference.requests_per_minute else None

        def make():
            calls.append(Calls(share, RetryPolicy(max_attempts=inference.max_attempts), inference.request_timeout_seconds))
            inner = make_deployed_inferrer(inference.kind, inference.target, calls[0], inference.base_url,
                                           inference.max_concurrency, deployed_auth(inference))
            return CheckpointedInferrer(inner, by_fields, writer)

        return make, finished, writer

    def process(self, element, cached):
        shard, batch = element
        batch = list(batch)
        known = {k: v for k, v in cached.items() if v.metric == USAGE_METRIC}
        writer = None
        if self._checkpoint:
            known.update({k: v for k, v in judge_checkpoint.read_checkpoints(self._checkpoint).items()
                          if v.metric == USAGE_METRIC and k not in known})
            writer = judge_checkpoint.CheckpointWriter(self._checkpoint, f"sim{shard}", self._settings.checkpoint_seconds)
        calls: list[SimulatorCalls] = []

        def make_simulators():
            calls.append(SimulatorCalls(self._settings, self._config, known, writer))
            return calls[0]

        by_id = {i.instance_id: i for i in batch}
        make = lambda: make_inferrer(self._kind, self._target, self._max_concurrency)  # noqa: E731
        agent_calls: list = []
        finished, cases_writer = {}, None
        if self._deployed is not None:
            make, finished, cases_writer = self._deployed_inferrer(shard, batch, agent_calls)
        done = []
        for instance_id, answer in finished.items():
            self._reused.inc()
            try:
                done.append((instance_id, apply_result(by_id[instance_id].fields, decode_result(answer.verdict))))
            except InferenceError as e:
                done.append((instance_id, failed(by_id[instance_id].fields, str(e))))
        try:
            done += list(infer_all(make, [(i.instance_id, i.fields) for i in batch if i.instance_id not in finished],
                                   self._max_concurrency, self._timeout, run_of=run_number,
                                   make_simulators=make_simulators))
        finally:
            if writer is not None:
                writer.close()
            if cases_writer is not None:
                cases_writer.close()  # a full disk: the run ends, as for fixed turns
            if agent_calls:
                self._requests.inc(agent_calls[0].stats.requests)
                self._retries.inc(agent_calls[0].stats.retries)
        for instance_id, fields in done:
            self._cases.inc()
            rubrics = (fields.get("adk_case") or {}).get("rubrics")
            if rubrics:  # the case's rubrics apply to every simulated turn (local_eval_service.py:106-112)
                for turn in fields.get("invocations") or []:
                    add_rubrics(turn, rubrics)
            yield dataclasses.replace(by_id[instance_id], fields=fields)
        for response in (calls[0].responses if calls else []):
            yield beam.pvalue.TaggedOutput(ANSWERS, response)


def simulator_cache_rows(response: JudgeResponse, run: RunKey, settings: JudgeSettings) -> list[dict]:
    """A simulator answer's judge_cache row (none for a failed or cached one), labelled with the
    model of the settings that asked it: UserSimulatorConfig.judge_settings, the judge's model
    when the judge is not gemini and user_simulator.model names none."""
    return [cache_row(run, settings.model, response)] if response.error is None and not response.cache_hit else []


class Simulate(beam.PTransform):
    """scenario cases -> (instances, judge_cache rows, usage per metric: `user_simulator`)."""

    def __init__(self, run: RunKey, inference, context):
        super().__init__()
        self._run, self._inference, self._context = run, inference, context

    def expand(self, cases):
        inference, context = self._inference, self._context
        config = inference.user_simulator
        settings = config.judge_settings(context.settings)
        shards = settings.shards
        shard_settings = settings.with_quota_share(1.0 / shards)
        pipeline = cases.pipeline
        cached = context.cached if context.cached is not None else pipeline | "NoCache" >> beam.Create([])
        # the side input holds the simulator's answers only, not the whole judge cache
        cached = cached | "SimulatorAnswers" >> beam.Filter(lambda kv: kv[1].metric == USAGE_METRIC)
        out = (
            cases
            | "ByShard" >> beam.Map(lambda i: (judge_checkpoint.shard_of(request_key(settings, i.instance_id, "", 0),
                                                                         shards), i))
            | "Shards" >> beam.GroupByKey()
            | "Converse" >> beam.ParDo(
                SimulateFn(inference.kind, inference.target, inference.max_concurrency, inference.timeout_seconds,
                           config, shard_settings, context.checkpoint, inference if inference.deployed else None),
                cached=beam.pvalue.AsDict(cached)).with_outputs(ANSWERS, main="instances")
        )
        answered = out[ANSWERS] | "AsAnswered" >> beam.Map(lambda r: (r, []))
        if context.progress:
            # the progress line counts the simulator's calls as it counts the judges' (each answer not
            # from judge.cache: called, or reused from checkpoints), so its judgments are the judge
            # line's needed less those from the cache. Each call depends on the agent's previous answer,
            # so none is known before it is asked: a shard's calls are counted as needed and done when
            # its conversations end.
            called = answered | "Called" >> beam.Filter(lambda a: not a[0].cache_hit)
            called | "ProgressJudgeNeeded" >> beam.ParDo(CountFn(context.progress, "judge_needed"))
            called | "ProgressJudgeDone" >> beam.ParDo(CountFn(context.progress, "judge_done"))
            called | "ProgressJudgeReused" >> beam.ParDo(CountFn(context.progress, "judge_reused", weight=reused))
        cache_rows = out[ANSWERS] | "CacheRows" >> beam.FlatMap(simulator_cache_rows, self._run, settings)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return out.instances, cache_rows, usage
