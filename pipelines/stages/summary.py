"""The summary stage: every part of the scores made one table and summarized per
metric and slice (transforms.summary), the judge calls' cache rows and usage
gathered, and the run's record (transforms.runs), with its counts reconciled."""
from __future__ import annotations

from importlib import metadata

import apache_beam as beam

from evalbeam.configs import EvalConfig
from evalbeam.pipelines.stages import Stage, parts
from evalbeam.pipelines.stages.score import adk_verdicts
from evalbeam.transforms.adk_status import THRESHOLD
from evalbeam.metrics.judge.asks import plan_judges, usage_models
from evalbeam.metrics.judge.usage import merge_usage
from evalbeam.metrics.rows.instance import first_run, id_scheme
from evalbeam.pipelines.stages.read import row_spec
from evalbeam.transforms.progress import CountFn
from evalbeam.transforms.rubrics import plan_rubric_metrics
from evalbeam.transforms.runs import RunRecord
from evalbeam.transforms.score import plan_metrics, with_thresholds
from evalbeam.transforms.summary import SummarizeScores


def thresholds(config: EvalConfig) -> dict[str, float | None]:
    """output name -> its pass threshold, for every metric the run reports."""
    found = {p.output_name: p.threshold for p in plan_metrics(config.computation_specs())}
    if adk_verdicts(config):
        found["adk_case_status"] = THRESHOLD
    if config.template_judge_specs():
        found.update({p.output_name: p.threshold for p in plan_judges(config.template_judge_specs())})
    if config.rubric_specs():
        found.update({p.output_name: p.threshold for p in plan_rubric_metrics(config.rubric_specs())})
    found.update({s.output_name: s.effective_threshold() for s in config.simulator_quality_specs()})
    return found


def version() -> str:
    try:
        return metadata.version("evalbeam")
    except metadata.PackageNotFoundError:
        return "unknown"


class SummariesStage(Stage):
    """scores/*, judge_cache/*, usage/* -> scored, judge_cache, summary, runs."""

    def expand(self, named):
        context = self._context
        config, run = context.config, context.run
        pipeline = named["instances"].pipeline
        scores, caches, usages = parts(named, "scores"), parts(named, "judge_cache"), parts(named, "usage")
        scored = tuple(scores) | "AllScores" >> beam.Flatten() if len(scores) > 1 else scores[0]
        scored = scored | "RowThresholds" >> beam.Map(with_thresholds, thresholds(config))
        cache_rows = tuple(caches) | "AllJudgeCache" >> beam.Flatten() if caches else (
            pipeline | "NoJudgeCache" >> beam.Create([]))
        if len(usages) > 1:
            usage = tuple(usages) | "AllJudgeUsage" >> beam.Flatten() | "MergeJudgeUsage" >> beam.CombineGlobally(merge_usage)
        else:
            usage = usages[0] if usages else pipeline | "NoJudgeUsage" >> beam.Create([{}])
        num_runs = config.inference.num_runs if config.inference else 1
        summary = scored | "Summarize" >> SummarizeScores(run, thresholds(config), config.input.max_slice_values,
                                                                num_runs=num_runs)
        if "population" in named:  # input.sample: each slice's cases before sampling, beside the estimates
            summary = summary | "PopulationCounts" >> beam.Map(
                lambda row, population: {**row, "population_count": population.get(row["slice"])},
                beam.pvalue.AsDict(named["population"]))
        records, unparseable = named["records"], named["unparseable"]
        counted = named["computed"]
        if config.inference and config.inference.num_runs > 1:
            # a case scored num_runs times counts once: read = scored + dead-lettered
            counted = counted | "FirstRuns" >> beam.Filter(lambda s, n: first_run(s.instance.instance_id, n),
                                                           config.inference.num_runs)
        if context.progress:
            # counted where they are made, not after a Flatten: the local runner runs a
            # Flatten's consumers only once every input is complete
            records | "ProgressRead" >> beam.ParDo(CountFn(context.progress, "read"))
            unparseable | "ProgressReadUnparseable" >> beam.ParDo(CountFn(context.progress, "read"))
            counted | "ProgressScored" >> beam.ParDo(CountFn(context.progress, "scored"))
            unparseable | "ProgressUnparseable" >> beam.ParDo(CountFn(context.progress, "dead_lettered"))
            named["invalid"] | "ProgressInvalid" >> beam.ParDo(CountFn(context.progress, "dead_lettered"))
        # the records read: parsed or not (tallied apart, then summed)
        runs = ((records, unparseable), counted, scored, named["dead_letters"], usage, named["source_lines"],
                *([named["sample"]] if "sample" in named else [])) \
            | "RunRecord" >> RunRecord(run, config.name, config.to_json(), version(), context.started_at,
                                       config.judge.prices, config.judge.model,
                                       usage_models(plan_judges(config.template_judge_specs(), config.judge)),
                                       id_scheme(row_spec(config)), context.window)
        return {"scored": scored, "judge_cache": cache_rows, "summary": summary, "runs": runs}
