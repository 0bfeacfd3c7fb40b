"""evalbeam metrics: pure Python, no Beam. A metric takes an instance's fields and returns a score."""
from evalbeam.metrics.registry import MetricDef, MetricError, MetricValue, all_metrics, as_metric_value, get_metric

# Importing the built-in metric modules registers them (the registry itself imports none).
from evalbeam.metrics import adk, agent, text, tool_call, trajectory  # noqa: E402,F401  isort: skip
from evalbeam.metrics.judge import adk_judges, library, rubric_library  # noqa: E402,F401  isort: skip

__all__ = ["MetricDef", "MetricError", "MetricValue", "all_metrics", "as_metric_value", "get_metric"]
