"""What a run asks the judge, in pure Python: the template judge metrics resolved with
their judges (JudgePlan, a jury's Jurors), one provider quota shared between the settings
that call it, and each instance's requests (keyed by the content hash of what is asked)
with the Link back to who asked.

The judge stage (transforms.judge), the cost plan (transforms.plan) and preflight read
these; the answers become rows in metrics.judge.verdicts.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Callable, Iterable

from evalbeam.metrics.judge.adk_judges import AdkJudge
from evalbeam.metrics.judge.agent_views import units_of
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeRequest, JudgeResponse, request_key
from evalbeam.metrics.judge.jury import JuryRule
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import PAIRWISE_CHOICES, JudgeTemplate
from evalbeam.metrics.rows.instance import Instance

QUOTAS = ("requests_per_minute", "tokens_per_minute")


class QuotaError(ValueError):
    """Quotas named by some judges on one provider quota leave the others none (a config error:
    preflight reports it as one)."""


@dataclasses.dataclass(frozen=True)
class Juror:
    """One judge of a metric: its name (a jury's column and explanation label), the settings it
    calls with, the label its judgments carry (JudgeRequest.metric: judge_usage and judge_cache
    entries) and the stream that answers them (JudgeRequest.judge: "" the stage's own settings)."""
    name: str
    settings: JudgeSettings
    label: str
    judge: str = ""
    own_quota: tuple[str, ...] = ()  # the quotas its partial names (requests_per_minute, tokens_per_minute): kept (share_quotas)


@dataclasses.dataclass(frozen=True)
class JudgePlan:
    output_name: str
    kind: str  # pointwise | pairwise
    template: JudgeTemplate
    threshold: float | None
    # who judges: empty for the stage's settings (the run's judge:); else the metric's own judge, or a jury
    jurors: tuple[Juror, ...] = ()
    jury: JuryRule | None = None  # a jury's rule (judges: given); None for one judge

    def judges(self, settings: JudgeSettings) -> tuple[Juror, ...]:
        return self.jurors or (Juror(settings.model, settings, self.output_name),)


def plan_judges(specs, settings: JudgeSettings | None = None,
                juror_settings: Callable[[dict], JudgeSettings] | None = None) -> list[JudgePlan]:
    """The plans of template judge metrics (MetricSpecs); with the stage's settings, each metric's
    own judge or jurors resolved (MetricSpec.judge, .judges: partial settings laid over the stage's
    by `juror_settings`, default JudgeSettings.overridden; a judge stage's JudgeContext.juror_settings
    also gives a quota the partial names the stage's share of it)."""
    if settings is not None and juror_settings is None:
        juror_settings = settings.overridden
    plans = []
    for s in specs:
        jurors: tuple[Juror, ...] = ()
        if settings is not None and (s.judge is not None or s.judges is not None):
            names = [name for name, _ in s.jurors(settings)]
            partials = [p for _, p in s.judge_partials()]
            jurors = tuple(
                Juror(name, own, f"{s.output_name}:{name}" if s.judges is not None else s.output_name,
                      "" if own == settings else own.digest(), _names_quota(partial))
                for name, own, partial in zip(names, (juror_settings(p) for p in partials), partials))
        plans.append(JudgePlan(s.output_name, s.judge_kind(), s.judge_template(), s.effective_threshold(), jurors,
                               (s.jury or JuryRule()) if s.judges is not None else None))
    return plans


def _names_quota(partial: dict) -> tuple[str, ...]:
    return tuple(k for k in QUOTAS if partial.get(k) is not None)


def share_quotas(plans: list[JudgePlan], settings: JudgeSettings) -> tuple[list[JudgePlan], JudgeSettings]:
    """The plans and the stage's settings with one provider quota shared: the distinct settings
    this stage calls with (its own, when a metric uses it, and every metric's own judge and
    juror) that draw on one quota (JudgeSettings.quota_key: provider, backend, endpoint, model)
    split it, as they call at once. A metric's judge or juror that names its own
    requests_per_minute (or tokens_per_minute) keeps it, and it is taken out of the quota the
    others inherit; they split the rest equally. QuotaError when the quotas named on one
    quota leave the others none."""
    own_used = any(not p.jurors or any(j.judge == "" for j in p.jurors) for p in plans)
    distinct: dict[str, tuple[JudgeSettings, tuple[str, ...], str]] = (
        {"": (settings, (), "judge")} if own_used else {})
    for p in plans:
        for j in p.jurors:
            if j.judge:
                distinct.setdefault(j.judge, (j.settings, j.own_quota, j.label))
    share: dict[tuple, float | None] = {}  # (quota key, field) -> each inheriting settings' share
    for field in QUOTAS:
        for key in {s.quota_key() for s, _, _ in distinct.values()}:
            on_key = [(s, own, label) for s, own, label in distinct.values() if s.quota_key() == key]
            inheriting = [s for s, own, _ in on_key if field not in own]
            pool = getattr(inheriting[0], field) if inheriting else None
            if pool is None:  # no settings inherit it (or no such budget): nothing to split
                continue
            named = [(label, getattr(s, field)) for s, own, label in on_key if field in own]
            left = pool - sum(value for _, value in named)
            if left <= 0:
                raise QuotaError(
                    f"judge.{field}: the quotas named by {', '.join(label for label, _ in named)} "
                    f"({' + '.join(f'{v:g}' for _, v in named)}) leave none of the {pool:g} of model {key[-1]} "
                    f"({key[0]}) to the {len(inheriting)} other judge settings calling it: lower them, or raise "
                    f"judge.{field}")
            share[key, field] = left / len(inheriting)

    def shared(settings: JudgeSettings, own: tuple[str, ...] = ()) -> JudgeSettings:
        update = {field: share[settings.quota_key(), field] for field in QUOTAS
                  if field not in own and (settings.quota_key(), field) in share}
        return settings.model_copy(update=update) if update else settings

    settings = shared(settings)
    plans = [dataclasses.replace(p, jurors=tuple(
        dataclasses.replace(j, settings=settings if not j.judge else shared(j.settings, j.own_quota))
        for j in p.jurors)) for p in plans]
    return plans, settings


def plan_judge_settings(plans: list[JudgePlan]) -> tuple:
    """(digest, settings) of every metric's own judge and juror: JudgeContext.judges."""
    return tuple({j.judge: j.settings for p in plans for j in p.jurors}.items())


def usage_models(plans: list[JudgePlan]) -> dict[str, str]:
    """judge_usage entry (JudgeRequest.metric) -> model, for the judgments not made by the stage's model."""
    return {j.label: j.settings.model for p in plans for j in p.jurors}


@dataclasses.dataclass(frozen=True)
class Link:
    """Who asked a judgment: an instance's metric, sample and order."""

    instance_id: str
    metric: str
    sample: int
    order: int  # 0: as given (A = baseline); 1: swapped (pairwise only)
    unit: int = 0  # per-turn templates: the turn
    juror: int = 0  # a jury: the juror (JudgePlan.jurors) who judged


@dataclasses.dataclass(frozen=True)
class Unasked:
    """A judgment that cannot be asked (an input missing, or ADK's evaluator refusing the case):
    the error response its row carries, with who would have asked it."""

    instance_id: str
    link: Link
    response: JudgeResponse


def judge_requests(instance: Instance, plans: list[JudgePlan], settings: JudgeSettings,
                   sampling_count: int) -> Iterable[tuple[str, tuple[JudgeRequest, Link]] | Unasked]:
    """An instance's judge requests: (request_key, (request, link)) for each metric, juror, unit,
    sample and order; an Unasked for each that cannot be asked."""
    for plan in plans:
        for index, juror in enumerate(plan.judges(settings)):
            samples = juror.settings.sampling_count if plan.jurors else sampling_count
            yield from _requests(instance, plan, juror, index, samples)


def _requests(instance: Instance, plan: JudgePlan, juror: Juror, index: int, sampling_count: int):
    """One juror's requests for one metric (a metric judged by one judge: its one juror)."""
    settings = juror.settings
    t = plan.template
    if isinstance(t, AdkJudge):
        yield from _adk_requests(instance, plan, juror, index, sampling_count)
        return
    if plan.kind == "pointwise":
        schema, field, allowed = t.pointwise_schema(), "score", tuple(t.rating_rubric)
    else:
        schema, field, allowed = t.pairwise_schema(), t.choice_field, PAIRWISE_CHOICES
    schema_json = json.dumps(schema, sort_keys=True)
    orders = (0,) if plan.kind == "pointwise" else (0, 1)
    samples = t.samples(sampling_count)
    needed = ("response", *t.input_variables, *(("baseline_model_response",) if plan.kind == "pairwise" else ()))
    for unit, fields in _judged_units(instance, t):
        missing = [f for f in dict.fromkeys(needed) if fields.get(f) is None]
        if missing:
            # e.g. inference made a multi-turn case, which has no single response:
            # no question to ask; the row carries why (never a crash, never a lost row)
            error = (f"cannot be judged: the instance has no {', '.join(map(repr, missing))} "
                     f"(needed by {plan.output_name})")
            for sample in range(samples):
                for order in orders:
                    yield Unasked(instance.instance_id,
                                  Link(instance.instance_id, plan.output_name, sample, order, unit, index),
                                  JudgeResponse("", juror.label, error=error))
            continue
        for sample in range(samples):
            for order in orders:
                prompt = t.render_pointwise(fields) if plan.kind == "pointwise" else \
                    t.render_pairwise(fields, swapped=bool(order))
                key = request_key(settings, prompt, schema_json, sample)
                request = JudgeRequest(key, juror.label, prompt, schema_json, field, allowed,
                                       seed=sample if samples > 1 else None, judge=juror.judge)
                yield key, (request, Link(instance.instance_id, plan.output_name, sample, order, unit, index))


def _adk_requests(instance: Instance, plan: JudgePlan, juror: Juror, index: int, sampling_count: int):
    """An ADK judge criterion's requests: each turn's prompt as ADK's own evaluator renders it
    (metrics.judge.adk_judges), asked as free text, once per sample."""
    t, settings = plan.template, juror.settings
    try:
        prompts = t.prompts(instance.fields)
    except Exception as e:  # noqa: BLE001 - ADK's evaluator refuses the case (ADK: NOT_EVALUATED): the row says why
        yield Unasked(instance.instance_id, Link(instance.instance_id, plan.output_name, 0, 0, 0, index),
                      JudgeResponse("", juror.label, error=f"cannot be judged: {e}" if isinstance(e, ValueError)
                                    else f"cannot be judged: {type(e).__name__}: {e}"))
        return
    samples = t.samples(sampling_count)
    for unit, prompt in enumerate(prompts):
        for sample in range(samples):
            key = request_key(settings, prompt, "", sample)
            request = JudgeRequest(key, juror.label, prompt, "", FREE_TEXT, (),
                                   seed=sample if samples > 1 else None, judge=juror.judge)
            yield key, (request, Link(instance.instance_id, plan.output_name, sample, 0, unit, index))


def _judged_units(instance: Instance, t) -> list[tuple[int, dict]]:
    """(unit, fields) judged: the instance, or each turn with a final response (per-turn templates)."""
    if not getattr(t, "per_turn", False):
        return [(0, instance.fields)]

    return [(u, unit.fields) for u, unit in enumerate(units_of(instance.fields, "turn")) if not unit.skip]
