"""What a stage's judge calls used, in pure Python: answers -> per judge metric the requests,
cache hits, calls, 429s, failures, tokens, and the model that answered (`model`; `models`,
each with its tokens, when several did: judge.prices is per model). An answer that names no
model (reused from checkpoints) is the stage's.

transforms.judge.UsageFn is the Beam CombineFn over these functions; merge_usage joins the
usages of several stages (the summary stage) in the same form.
"""
from __future__ import annotations

from typing import Iterable

from evalbeam.metrics.judge.client import JudgeResponse

TOKENS = ("prompt_tokens", "output_tokens", "batch_prompt_tokens", "batch_output_tokens")

FIELDS = ("requests", "cache_hits", "calls", "rate_limited", "failures", "prompt_tokens", "output_tokens",
          "batch_prompt_tokens", "batch_output_tokens", "checkpoint_reused")


def add_answer(acc: dict, response: JudgeResponse) -> dict:
    """The accumulator (metric -> counts) with one answer added."""
    m = acc.setdefault(response.metric, dict.fromkeys(FIELDS, 0))
    m["requests"] += 1
    if response.cache_hit:
        m["cache_hits"] += 1
        return acc
    m["calls"] += response.attempts
    m["rate_limited"] += response.rate_limited
    m["failures"] += response.error is not None
    m["prompt_tokens"] += response.prompt_tokens
    m["output_tokens"] += response.output_tokens
    m["batch_prompt_tokens"] += response.batch_prompt_tokens
    m["batch_output_tokens"] += response.batch_output_tokens
    m["checkpoint_reused"] += response.checkpointed
    if response.prompt_tokens or response.output_tokens:
        tokens = m.setdefault("models", {}).setdefault(response.model or "", dict.fromkeys(TOKENS, 0))
        for k in TOKENS:
            tokens[k] += getattr(response, k)
    return acc


def merge_accumulators(accs: Iterable[dict]) -> dict:
    """Accumulators -> one: counts summed per metric, and per model its tokens."""
    out: dict[str, dict] = {}
    for acc in accs:
        for metric, m in acc.items():
            t = out.setdefault(metric, dict.fromkeys(FIELDS, 0))
            for k, v in m.items():
                if k == "models":
                    for model, tokens in v.items():
                        into = t.setdefault("models", {}).setdefault(model, dict.fromkeys(TOKENS, 0))
                        for name, n in tokens.items():
                            into[name] += n
                else:
                    t[k] = t.get(k, 0) + v
    return out


def usage_of(acc: dict) -> dict:
    """An accumulator as the usage is written (runs.judge_usage): one model answered, its name as
    `model`; several, `models` with each one's tokens."""
    out = {}
    for metric, m in acc.items():
        m = dict(m)
        models = m.pop("models", {})
        if len(models) == 1 and next(iter(models)):
            m["model"] = next(iter(models))
        elif len(models) > 1:
            m["models"] = models
        out[metric] = m
    return out


def merge_usage(usages: Iterable[dict]) -> dict:
    """Usages as usage_of gives them (several stages', or partial merges of them) -> one, in
    the same form: counts summed per metric, and the models with their tokens."""
    acc: dict[str, dict] = {}
    for usage in usages:
        for metric, m in usage.items():
            m = dict(m)
            if "model" in m:
                models = {m.pop("model"): {k: m.get(k, 0) for k in TOKENS}}
            else:
                models = m.pop("models", {})
            t = acc.setdefault(metric, dict.fromkeys(FIELDS, 0))
            for k, v in m.items():
                t[k] = t.get(k, 0) + v
            for model, tokens in models.items():
                into = t.setdefault("models", {}).setdefault(model, dict.fromkeys(TOKENS, 0))
                for name, n in tokens.items():
                    into[name] += n
    return usage_of(acc)
