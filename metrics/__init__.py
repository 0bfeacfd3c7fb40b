"""evalbeam metrics: pure Python, no Beam. A metric takes an instance's fields and returns a score."""
from evalbeam.metrics.registry import MetricDef, MetricError, MetricValue, all_metrics, as_metric_value, get_metric

__all__ = ["MetricDef", "MetricError", "MetricValue", "all_metrics", "as_metric_value", "get_metric"]
