"""The built-in metrics, and where a metric is looked up.

Importing this module imports every built-in metric module, each of which registers its metrics
(and refuses the names it will not score under) in metrics.registry; the lookups here then see them
all. The registry never imports this module, nor does a metric module: importing the package, a
base module or the config model loads no metric; importing this module does.
"""
from __future__ import annotations

from evalbeam.metrics import adk, passthrough, text, tool_call, trajectory
from evalbeam.metrics.judge import adk_judges, library, rubric_library
from evalbeam.metrics.names import did_you_mean
from evalbeam.metrics.registry import MetricDef, refusal, registered, registered_metrics

MODULES = (adk, passthrough, text, tool_call, trajectory, adk_judges, library, rubric_library)


def get_metric(name: str) -> MetricDef:
    """The metric `name`. KeyError saying why when there is none: a refused name's reason, or
    the nearest known name to a misspelt one."""
    definition = registered(name)
    if definition is not None:
        return definition
    reason = refusal(name)
    if reason is not None:
        raise KeyError(f"{name}: {reason}")
    known = [d.name for d in registered_metrics()]
    raise KeyError(f"unknown metric {name!r}{did_you_mean(name, known)}; `evalbeam metrics` lists the known ones")


def all_metrics() -> list[MetricDef]:
    """Every metric, by kind and name."""
    return registered_metrics()


def is_refused(name: str) -> bool:
    return refusal(name) is not None
