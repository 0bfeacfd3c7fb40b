"""The built-in metrics: importing their modules registers them. The registry imports this
module the first time a metric is looked up or listed (registry.get_metric, all_metrics)."""
from evalbeam.metrics import adk, passthrough, text, tool_call, trajectory
from evalbeam.metrics.judge import adk_judges, library, rubric_library

MODULES = (adk, passthrough, text, tool_call, trajectory, adk_judges, library, rubric_library)
