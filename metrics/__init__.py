"""evalbeam metrics: pure Python, no Beam. A metric takes an instance's fields and returns a score.

Importing the package (or a base module of it: names, fields, the judge's settings) loads no metric:
metrics/catalog.py imports the built-in ones, and is where a metric is looked up or listed."""
from evalbeam.metrics.registry import MetricDef, MetricError, MetricValue, as_metric_value

__all__ = ["MetricDef", "MetricError", "MetricValue", "as_metric_value"]
