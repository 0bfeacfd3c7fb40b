"""evalbeam metrics: pure Python, no Beam. A metric takes an instance's fields and returns a score.

Importing the package (or a base module of it: names, fields, the judge's settings) loads no metric:
the registry imports the built-in ones (metrics/builtin.py) when a metric is first looked up or listed."""
from evalbeam.metrics.registry import MetricDef, MetricError, MetricValue, all_metrics, as_metric_value, get_metric

__all__ = ["MetricDef", "MetricError", "MetricValue", "all_metrics", "as_metric_value", "get_metric"]
