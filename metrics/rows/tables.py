"""The one definition of evalbeam's output tables.

Parquet schemas (and, with the cloud outputs, BigQuery schemas) are derived
from these column lists; nothing else spells out a table's columns.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any, Iterable

import pyarrow as pa

from evalbeam.metrics.rows.fields import (
    CANONICAL_FIELDS,
    FLAG_FIELDS,
    NUMBER_FIELDS,
    STRUCTURED_FIELDS,
    TRAJECTORY_FIELDS,
)
from evalbeam.metrics.rows.instance import Instance


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str  # STRING | FLOAT64 | INT64 | BOOL | DATE | TIMESTAMP | JSON (JSON text)
    required: bool = False
    description: str = ""


_ARROW = {
    "STRING": pa.string(),
    "JSON": pa.string(),
    "FLOAT64": pa.float64(),
    "INT64": pa.int64(),
    "BOOL": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
# JSON text is loaded into BigQuery as STRING: Parquet has no JSON type that every
# load path maps to BigQuery JSON, and JSON functions (JSON_VALUE, ...) read STRING.
_BIGQUERY = {"JSON": "STRING"}


def _canonical_column(field: str) -> Column:
    if field in TRAJECTORY_FIELDS or field in STRUCTURED_FIELDS:
        return Column(field, "JSON", description=f"canonical field {field} as JSON")
    if field in NUMBER_FIELDS:
        return Column(field, "FLOAT64", description=f"canonical field {field}")
    if field in FLAG_FIELDS:
        return Column(field, "INT64", description=f"canonical field {field} (0/1)")
    return Column(field, "STRING", description=f"canonical field {field}")


RUN_ID = Column("run_id", "STRING", True, "the run that wrote the row")
# red_team: the attack an attacked run carried (null on its twin, and in a run without red teaming)
ATTACK_COLUMNS = (
    Column("attack_id", "STRING", description="red_team: the attack (and target) this run carried (the attacks "
                                              "table's attack_id); null on its twin, the same case unattacked"),
    Column("attack_family", "STRING", description="red_team: the attack's family; null on a twin"),
)
RUN_DATE = Column("run_date", "DATE", True, "the date the run is for; BigQuery tables are partitioned by it")

# The folder beside an output's run folders where runs write their attempts, locks and
# checkpoints (<output>/_evalbeam_attempts/<run_id>/): never a run folder itself.
ATTEMPTS = "_evalbeam_attempts"


TABLES: dict[str, tuple[Column, ...]] = {
    "instances": (
        RUN_ID,
        RUN_DATE,
        Column("instance_id", "STRING", True, "id column value, or a hash of the row's input fields (runs.id_scheme)"),
        Column("source", "STRING", True, "file and line (or CSV row) the instance came from"),
        *(_canonical_column(f) for f in CANONICAL_FIELDS),
        *ATTACK_COLUMNS,
    ),
    "metric_results": (
        RUN_ID,
        RUN_DATE,
        Column("instance_id", "STRING", True),
        Column("metric", "STRING", True, "the metric's 'as' name, else its name"),
        Column("score", "FLOAT64", description="null when the metric failed on this instance"),
        Column("passed", "BOOL", description="score >= threshold, where the metric has a threshold"),
        Column("explanation", "STRING"),
        Column("error", "STRING", description="why the metric could not score this instance"),
        Column("extra", "JSON", description="extra values, e.g. a custom metric's other keys"),
        Column("confidence", "FLOAT64", description="judge metrics: share of samples agreeing with the score"),
        Column("pairwise_choice", "STRING", description="pairwise metrics: BASELINE | CANDIDATE | TIE"),
        Column("judge_model", "STRING"),
        Column("prompt_tokens", "INT64", description="judge tokens in the prompts of this row's judgments"),
        Column("output_tokens", "INT64"),
        Column("attempts", "INT64", description="judge calls made for this row (0 when all came from the cache)"),
        Column("cache_hit", "BOOL", description="every judgment of this row came from judge.cache"),
        Column("position_agreement", "FLOAT64",
               description="pairwise: share of this row's samples whose two orders (A = baseline, A = candidate) "
                           "chose the same response"),
        Column("threshold", "FLOAT64", description="the pass threshold in force for this row (`passed`): an ADK "
                                                   "case's own test_config.json's, else its metric's; null where "
                                                   "the metric has none"),
        Column("human_label", "FLOAT64", description="input.labels: the mean of the row's valid human labels for this "
                                                     "metric; null when unlabelled (or the metric has no labels)"),
        Column("jurors", "JSON", description="a jury (judges:): [{name, model, score, pairwise_choice, explanation, "
                                             "confidence, error}], one per juror, as each judged alone; null for "
                                             "one judge"),
        Column("jury_answered", "INT64", description="a jury: the jurors that answered (scored without an error)"),
        Column("jury_outcome", "STRING", description="a jury: the aggregate applied (mean, median, min, max, majority, "
                                                     "unanimous), or tie, split (unanimous not reached) or no_quorum"),
        *ATTACK_COLUMNS,
    ),
    "summary": (
        RUN_ID,
        RUN_DATE,
        Column("metric", "STRING", True),
        Column("slice", "STRING", True, "'overall' or 'column=value'"),
        Column("row_count", "INT64", True),
        Column("valid_count", "INT64", True),
        Column("error_count", "INT64", True),
        Column("mean", "FLOAT64"),
        Column("std", "FLOAT64", description="sample standard deviation"),
        Column("ci_low", "FLOAT64", description="95% CI of the mean (Poisson bootstrap of cases: the runs of a "
                                                "case are resampled together)"),
        Column("ci_high", "FLOAT64"),
        Column("threshold", "FLOAT64"),
        Column("pass_rate", "FLOAT64", description="share of valid scores >= threshold"),
        Column("candidate_model_win_rate", "FLOAT64", description="pairwise: share of rows the candidate won"),
        Column("baseline_model_win_rate", "FLOAT64", description="pairwise: share of rows the baseline won"),
        Column("case_count", "INT64", description="cases with a valid score (with inference.num_runs > 1 a case "
                                                  "has up to num_runs rows; else one)"),
        Column("standard_error", "FLOAT64", description="standard error of the mean, clustered by case (CR1); "
                                                        "with one run per case s/sqrt(n)"),
        Column("between_run_std", "FLOAT64", description="num_runs > 1: mean over cases (with 2+ valid runs) of "
                                                         "the sample std of the case's scores across its runs"),
        Column("pass_at_k", "JSON", description="num_runs > 1, metrics with a threshold: [{k, value, cases}] for "
                                                "k = 1..num_runs, unbiased pass@k averaged over cases"),
        Column("pass_all_k", "JSON", description="as pass_at_k, for pass^k (all k runs pass)"),
        Column("position_consistency", "FLOAT64",
               description="pairwise: mean of position_agreement, the share of pairs whose two orders agree"),
        Column("position_consistency_ci_low", "FLOAT64", description="95% CI of position_consistency "
                                                                     "(Poisson bootstrap of cases)"),
        Column("position_consistency_ci_high", "FLOAT64"),
        Column("jury_alpha", "FLOAT64", description="a jury: Krippendorff's alpha (interval) among the jurors' "
                                                    "scores; null when no instance has two answers or every "
                                                    "answer is the same"),
        Column("jury_alpha_units", "INT64", description="a jury: instances with two jurors' scores or more"),
        Column("population_count", "INT64", description="input.sample: the cases of the slice read before sampling "
                                                        "(row_count and the estimates are over the sample beside it); "
                                                        "null without a sample, and for a slice of (other) values"),
    ),
    "runs": (
        RUN_ID,
        RUN_DATE,
        Column("name", "STRING", True),
        Column("config", "JSON", True),
        Column("evalbeam_version", "STRING", True),
        Column("id_scheme", "STRING", description="how instance ids were made: inputs (a hash of the case's input "
                                                  "fields, never its outputs), column:<name> (input.id_column; ADK "
                                                  "and trace inputs: their own ids); null: a run from before the "
                                                  "column, whose default hashed the whole row"),
        Column("started_at", "TIMESTAMP", True),
        Column("finished_at", "TIMESTAMP", True, "when scoring finished"),
        Column("read_count", "INT64", True, "records read"),
        Column("scored_count", "INT64", True, "instances scored"),
        Column("dead_letter_count", "INT64", True, "records dead-lettered"),
        Column("metric_error_count", "INT64", True, "metric results that carry an error"),
        Column("lines_read", "INT64", description="physical lines in the input files (rows, for BigQuery; spans, for "
                                                "input.format otel_traces)"),
        Column("lines_skipped", "INT64", description="lines that hold no record: blank, CSV header, JSON array punctuation"),
        Column("lines_scored", "INT64", description="lines of the records that were scored"),
        Column("lines_dead_lettered", "INT64", description="lines of the records that were dead-lettered"),
        Column("lines_duplicate", "INT64", description="of lines_skipped, input.format otel_traces: spans that "
                                                       "repeat one read before, identical (an exporter's retry): "
                                                       "dropped, not dead-lettered"),
        Column("judge_requests", "INT64", True, "distinct judgments the run needed"),
        Column("judge_cache_hits", "INT64", True, "judgments reused from judge.cache"),
        Column("judge_calls", "INT64", True, "calls made to the judge model, retries included"),
        Column("judge_rate_limited", "INT64", True, "calls answered 429"),
        Column("judge_failures", "INT64", True, "judgments that failed after their retries"),
        Column("judge_prompt_tokens", "INT64", True),
        Column("judge_output_tokens", "INT64", True),
        Column("judge_estimated_cost", "FLOAT64", description="USD, from judge.prices; null without a price"),
        Column("judge_usage", "JSON", description="per judge metric: requests, cache hits, calls, 429s, tokens"),
        Column("window_start", "TIMESTAMP", description="input.since: the start of the window of cases this run "
                                                        "read (the window_end of the eval's run before; null: from "
                                                        "the beginning)"),
        Column("window_end", "TIMESTAMP", description="input.since: the end of its window (the run's start less "
                                                      "input.lateness): where the eval's next run starts"),
        Column("sample", "JSON", description="input.sample: {rate or per_slice, seed, max_calls, population, sampled}: "
                                             "the cases read and those evaluated; the summary is over the sample"),
        Column("bleu_path", "STRING", description="which BLEU implementation scored the instances: c (the C "
                                                  "extension), python (about 6x slower: workers where it was not "
                                                  "built), or c+python (some workers each); null without BLEU"),
    ),
    "judge_cache": (
        RUN_ID,
        RUN_DATE,
        Column("request_key", "STRING", True, "content hash of model, settings, prompt and sample"),
        Column("metric", "STRING", True),
        Column("model", "STRING", True),
        Column("verdict", "STRING", True, "the score or choice the judge answered"),
        Column("explanation", "STRING"),
        Column("prompt_tokens", "INT64"),
        Column("output_tokens", "INT64"),
        Column("attempts", "INT64"),
    ),
    "rubrics": (
        RUN_ID,
        RUN_DATE,
        Column("instance_id", "STRING", True),
        Column("metric", "STRING", True, "the rubric metric's 'as' name, else its name"),
        Column("rubric_id", "STRING", True, "r1..rN for generated rubrics; the given id; c1..cN for grounding's claims"),
        Column("rubric", "STRING", True, "the rubric's text (for grounding, the claim)"),
        Column("type", "STRING", description="the rubric's type, e.g. content, format, safety, claim"),
        Column("importance", "STRING", description="HIGH | MEDIUM | LOW (weights 3, 2, 1); null: weighs as MEDIUM"),
        Column("verdict", "BOOL", description="the rubric is met (majority over samples, a tie is false); null when not judged"),
        Column("label", "STRING", description="grounding: supported | unsupported | contradicted | no_rad"),
        Column("reasoning", "STRING", description="the judge's reasoning for the verdict"),
        Column("source", "STRING", True, "generated | pinned (judge.rubrics_from) | given (rubric_groups) | static | claims"),
        Column("generation_key", "STRING",
               description="content hash of the metric and the inputs the rubrics were generated from; "
                           "judge.rubrics_from matches on it (null for given, static and claims rubrics)"),
        Column("turn", "INT64", description="agent judges: the turn (0-based) the rubric was judged on; null when "
                                            "the metric judges the instance as a whole"),
        Column("step", "INT64", description="hallucination: the response step (0-based) within the turn"),
    ),
    "comparisons": (
        Column("base_run_id", "STRING", True, "the run compared against"),
        RUN_ID,
        RUN_DATE,
        Column("name", "STRING", description="the eval (config name) of run_id"),
        Column("metric", "STRING", True),
        Column("slice", "STRING", True, "'overall' or 'column=value' (the slice of the instance in run_id)"),
        Column("direction", "STRING", True, "higher | lower: which way is better for this metric"),
        Column("n_paired", "INT64", True, "instances with a valid score in both runs"),
        Column("only_in_base", "INT64", True, "instances scored in the base run only"),
        Column("only_in_run", "INT64", True, "instances scored in run_id only"),
        Column("error_in_either", "INT64", True, "instances in both runs with an error (or no score) in either"),
        Column("error_in_run", "INT64", description="of error_in_either, those with no valid score in run_id: "
                                                    "with only_in_base, the base's instances lost (--max-missing)"),
        Column("base_mean", "FLOAT64", description="mean over the paired instances, base run"),
        Column("mean", "FLOAT64", description="mean over the paired instances, run_id"),
        Column("mean_difference", "FLOAT64", description="mean of the paired differences, run_id minus base"),
        Column("ci_low", "FLOAT64", description="95% CI of the mean difference (paired Poisson bootstrap)"),
        Column("ci_high", "FLOAT64"),
        Column("test", "STRING", description="mcnemar (0/1 scores) | wilcoxon"),
        Column("p_value", "FLOAT64"),
        Column("p_value_adjusted", "FLOAT64", description="Holm-adjusted within the row's family: the gated rows "
                                                          "(gated), the watched metrics' other slice rows, or the "
                                                          "metrics not watched"),
        Column("wins", "INT64", True, "paired instances where run_id is better"),
        Column("ties", "INT64", True),
        Column("losses", "INT64", True, "paired instances where run_id is worse"),
        Column("win_rate", "FLOAT64", description="(wins + ties/2) / n_paired"),
        Column("win_rate_ci_low", "FLOAT64", description="95% CI of win_rate (paired Poisson bootstrap)"),
        Column("win_rate_ci_high", "FLOAT64"),
        Column("tolerance", "FLOAT64", True, "the T of the flags (absolute: a relative tolerance times |base_mean|)"),
        Column("regression", "BOOL", True, "the CI of the change lies entirely on the worse side of -T (and the "
                                           "gate watches the metric)"),
        Column("improvement", "BOOL", True, "the CI of the change lies entirely on the better side of +T (and the "
                                            "gate watches the metric)"),
        Column("compared_at", "TIMESTAMP", True),
        Column("labelled_paired", "INT64", description="input.labels: paired instances with a human label"),
        Column("agreement_statistic", "STRING", description="weighted_kappa (categorical scale) | spearman"),
        Column("base_agreement", "FLOAT64", description="the base run's agreement with the human labels"),
        Column("run_agreement", "FLOAT64", description="run_id's agreement with the human labels"),
        Column("agreement_difference", "FLOAT64", description="run_agreement - base_agreement"),
        Column("agreement_ci_low", "FLOAT64", description="95% CI of the difference (paired Poisson bootstrap)"),
        Column("agreement_ci_high", "FLOAT64"),
        Column("agrees_more", "STRING", description="run | base: whose judge agrees more with the people (the CI "
                                                    "excludes 0); neither"),
        Column("paired_by", "STRING", description="instance | case: what n_paired and the statistics count; "
                                                  "case when either run has inference.num_runs > 1 (a case's "
                                                  "value is the mean of its valid runs)"),
        Column("watched", "BOOL", description="whether the gate watches the metric (compare_watch; by default "
                                              "every metric but the automatic latency_in_seconds and failure): "
                                              "a metric not watched is never flagged"),
        Column("tolerance_relative", "FLOAT64", description="a relative tolerance (0.1: 10% of the base mean); "
                                                            "null when the tolerance is absolute"),
        Column("alpha", "FLOAT64", description="the alpha of the flags"),
        Column("estimate", "STRING", description="what base_mean, mean, mean_difference, ci_low, ci_high and p_value "
                                                 "estimate: scores, the means of the metric's own scores (a judge's "
                                                 "or any metric's); corrected, human-corrected (PPI++, both runs "
                                                 "labelled)"),
        Column("corrected_labelled", "INT64", description="paired instances labelled in both runs (the corrected "
                                                          "difference's n)"),
        Column("corrected_lambda", "FLOAT64", description="PPI++'s power-tuning parameter of the difference"),
        Column("corrected_note", "STRING", description="why the estimate is the judge's though the runs are labelled"),
        Column("judge_base_mean", "FLOAT64", description="base_mean from the judge's scores alone"),
        Column("judge_mean", "FLOAT64", description="mean from the judge's scores alone"),
        Column("judge_mean_difference", "FLOAT64", description="mean_difference from the judge's scores alone"),
        Column("judge_ci_low", "FLOAT64", description="the judge-only difference's 95% CI (paired bootstrap)"),
        Column("judge_ci_high", "FLOAT64"),
        Column("judge_test", "STRING", description="the judge-only test: mcnemar | wilcoxon"),
        Column("judge_p_value", "FLOAT64"),
        Column("difference_std", "FLOAT64", description="sample standard deviation of the paired differences"),
        Column("gated", "BOOL", description="the row is in the gate's family: a watched metric's overall row, or its "
                                            "row of a slice column named in compare_gate_slices / --gate-slices"),
        Column("family_size", "INT64", description="the tests Holm adjusted this row's p-value over"),
        Column("detectable_difference", "FLOAT64",
               description="gated rows: the smallest change (beyond the tolerance) flagged with 80% power at this "
                           "n_paired and alpha over family_size (normal approximation, difference_std)"),
        Column("gate_reason", "STRING", description="why the gate flagged the row, or why not (within tolerance, "
                                                    "the CI spans 0, the adjusted p-value, a row that does not gate)"),
    ),
    "calibration": (
        RUN_ID,
        RUN_DATE,
        Column("metric", "STRING", True, "a metric with input.labels"),
        Column("slice", "STRING", True, "'overall' or 'column=value'"),
        Column("n", "INT64", True, "instances with both a valid score and a valid human label"),
        Column("unlabelled_count", "INT64", True, "instances with no valid label for the metric"),
        Column("unscored_count", "INT64", True, "labelled instances whose metric has no score (an error)"),
        Column("invalid_label_count", "INT64", True, "label cells refused (not a number or true/false); "
                                                     "counted as missing"),
        Column("invalid_label_example", "STRING", description="the first refused label: row, column and reason"),
        Column("annotators", "INT64", True, "label columns of the metric"),
        Column("threshold", "FLOAT64", description="the metric's pass threshold"),
        Column("scale", "STRING", description="categorical (whole numbers, at most 20 values) | continuous"),
        Column("judge_mean", "FLOAT64", description="mean score over the n instances"),
        Column("human_mean", "FLOAT64", description="mean human value (mean of the annotators' labels) over the n"),
        Column("bias", "FLOAT64", description="judge_mean - human_mean"),
        Column("mae", "FLOAT64", description="mean |score - human value|"),
        Column("spearman", "FLOAT64", description="Spearman's rho (midranks for ties)"),
        Column("kendall_tau", "FLOAT64", description="Kendall's tau-b"),
        Column("kappa", "FLOAT64", description="Cohen's kappa, unweighted, on the categories (categorical scales)"),
        Column("weighted_kappa", "FLOAT64", description="Cohen's kappa, quadratic weights (categorical scales)"),
        Column("accuracy", "FLOAT64", description="pass = score >= threshold; the human label the truth"),
        Column("precision", "FLOAT64", description="of the judge's passes, the share the people pass"),
        Column("recall", "FLOAT64", description="of the people's passes, the share the judge passes"),
        Column("f1", "FLOAT64"),
        Column("ci_low", "FLOAT64", description="95% Poisson bootstrap CI of weighted_kappa (categorical) or "
                                                "spearman (continuous), seeded by instance id"),
        Column("ci_high", "FLOAT64"),
        Column("confusion", "JSON", description='{"categories": [...], "counts": [[...]]}: rows the human value, '
                                                "columns the judge's (pass/fail on a continuous scale)"),
        Column("annotator_alpha", "FLOAT64", description="Krippendorff's alpha (interval) among the annotators"),
        Column("annotator_alpha_units", "INT64", description="instances with two labels or more"),
        Column("corrected_mean", "FLOAT64", description="the human-corrected estimate of the metric's mean over every "
                                                        "scored instance (PPI++, metrics.statistics.ppi); null with fewer than 10 "
                                                        "labels or repeated runs"),
        Column("corrected_ci_low", "FLOAT64", description="95% CI of corrected_mean (normal)"),
        Column("corrected_ci_high", "FLOAT64"),
        Column("corrected_lambda", "FLOAT64", description="PPI++'s power-tuning parameter, in [0, 1]: 0 the labels' "
                                                          "mean alone, 1 plain PPI"),
        Column("corrected_unlabelled", "INT64", description="unlabelled instances with a score (the N of the "
                                                            "corrected estimate; n is its labelled count)"),
        Column("judge_only_mean", "FLOAT64", description="mean score over every scored instance, labelled or not"),
        Column("judge_only_ci_low", "FLOAT64", description="95% CI of judge_only_mean (normal): blind to the "
                                                           "judge's bias"),
        Column("judge_only_ci_high", "FLOAT64"),
        Column("labels_only_ci_low", "FLOAT64", description="95% CI of human_mean (normal), the labels alone"),
        Column("labels_only_ci_high", "FLOAT64"),
        Column("human_variance", "FLOAT64", description="variance of the human values over the n (over n)"),
        Column("judge_variance", "FLOAT64", description="variance of every score (over their count)"),
        Column("covariance", "FLOAT64", description="covariance of score and human value over the n (over n)"),
        Column("note", "STRING", description="why a statistic is null (n < 2, constant labels, one category, ...)"),
    ),
    "failure_assignments": (
        RUN_ID,
        RUN_DATE,
        Column("instance_id", "STRING", True),
        Column("metric", "STRING", True, "the metric (its 'as' name) that failed"),
        Column("rubric_id", "STRING", description="the rubric not met; null for a failure of the whole instance "
                                                  "(the metric did not pass, or the agent's run failed)"),
        Column("mode", "STRING", description="the failure mode counted: the judge's answer when it names a mode of "
                                             "the taxonomy, else other; null when the classification failed"),
        Column("judge_mode", "STRING", description="the mode the judge answered, as it answered it"),
        Column("rationale", "STRING", description="the judge's reason for the mode"),
        Column("error", "STRING", description="why the failure could not be classified (the judge failed)"),
        Column("taxonomy_digest", "STRING", True, "content hash of the taxonomy's modes"),
        Column("cache_hit", "BOOL", description="the classification came from judge.cache"),
    ),
    "failure_modes": (
        RUN_ID,
        RUN_DATE,
        Column("metric", "STRING", True),
        Column("slice", "STRING", True, "'overall' or 'column=value'"),
        Column("mode", "STRING", True, "a mode of the taxonomy (every mode has a row, count 0 included)"),
        Column("mode_name", "STRING"),
        Column("count", "INT64", True, "failures of the metric in the slice classified as this mode"),
        Column("failures", "INT64", True, "all failures of the metric in the slice (= sum of count + unclassified)"),
        Column("unclassified", "INT64", True, "failures whose classification failed (an error)"),
        Column("share", "FLOAT64", description="count / failures"),
        Column("share_ci_low", "FLOAT64", description="95% CI of share (Poisson bootstrap of instances, seeded by "
                                                      "instance id)"),
        Column("share_ci_high", "FLOAT64"),
        Column("examples", "JSON", description="up to five instance ids of this mode (the smallest hashes)"),
        Column("taxonomy_digest", "STRING", True, "content hash of the taxonomy's modes"),
    ),
    "taxonomies": (
        RUN_ID,
        RUN_DATE,
        Column("digest", "STRING", True, "content hash of the modes: what failure_modes.taxonomy_digest names"),
        Column("name", "STRING", True, "task_success | tool_use | the file's name | discovered"),
        Column("origin", "STRING", True, "builtin | file | discovered"),
        Column("discovered_in", "STRING", description="discovered: the run whose judge proposed it (a run reusing "
                                                      "it through failure_modes.taxonomies_from keeps that run)"),
        Column("modes", "JSON", True, "[{id, name, description, parent}]"),
        Column("metrics", "JSON", True, "the metrics whose failures were classified into it in this run"),
        Column("sample_size", "INT64", description="discovered in this run: the failures the judge was shown"),
        Column("seed", "INT64", description="discovered in this run: the seed of the sample"),
    ),
    "scenarios": (
        RUN_ID,
        RUN_DATE,
        Column("eval_set_id", "STRING", True, "the eval set the kept scenarios are written to (output.eval_set)"),
        Column("eval_id", "STRING", description="the scenario's eval case id: <goal>.<persona>.<difficulty>"
                                                "[.<language>].<first 10 hex digits of digest>; null when no scenario "
                                                "was generated for the row"),
        Column("cell", "INT64", True, "the grid cell's number (goal-major: goals, personas, difficulties, languages)"),
        Column("goal", "STRING", True, "the goal's id"),
        Column("persona", "STRING", True, "the persona's id (ADK's, or the config's own)"),
        Column("difficulty", "STRING", True, "the difficulty's id"),
        Column("language", "STRING", description="the language the user writes in; null when the grid names none"),
        Column("position", "INT64", True, "the scenario's place among those asked of its cell (from 0)"),
        Column("model", "STRING", True, "the generator's model"),
        Column("request_key", "STRING", description="the generation request's content key (judge_cache's); null "
                                                    "for a set reused through scenarios.pinned_from"),
        Column("digest", "STRING", description="content hash of the conversation_scenario (prompt, plan, persona)"),
        Column("decision", "STRING", True, "kept | near_duplicate | dead_letter"),
        Column("reason", "STRING", description="dead_letter: why (generation failed, empty, not generated, a tool the "
                                               "agent lacks, ADK's refusal); near_duplicate: the similarity"),
        Column("field", "STRING", description="dead_letter: the field at fault, when one is"),
        Column("duplicate_of", "STRING", description="near_duplicate: the eval_id of the kept scenario it repeats"),
        Column("starting_prompt", "STRING"),
        Column("conversation_plan", "STRING"),
        Column("tools", "JSON", description="the agent's tools the generator says the scenario needs"),
        Column("conversation_scenario", "JSON", description="the ADK conversation_scenario as the eval set holds it "
                                                            "(kept rows); scenarios.pinned_from rebuilds a set from it"),
        Column("cache_hit", "BOOL", description="the generation came from judge.cache (or a pinned set)"),
    ),
    "attacks": (
        RUN_ID,
        RUN_DATE,
        Column("attack_id", "STRING", True, "content hash of the attack and its target: an attacked run's "
                                            "instance id is its case's with :attack=<attack_id>"),
        Column("family", "STRING", True),
        Column("delivery", "STRING", True, "tool_response (planted in a tool's response) | user_turn (in the "
                                           "user's first message)"),
        Column("tool", "STRING", description="tool_response: the tool whose responses carry it"),
        Column("path", "STRING", description="tool_response: the JSON path in the response it is appended at"),
        Column("template_digest", "STRING", True, "content hash of the template"),
        Column("template", "STRING", True, "the text planted ({canary}: a value made for each attacked run)"),
        Column("goal", "JSON", True, "{tool_called: NAME} | {canary: true} | {judge: METRIC}"),
        Column("origin", "STRING", True, "builtin | file | generated"),
        Column("set_digest", "STRING", True, "content hash of the run's attacks (families, templates, goals): "
                                             "red_team.attacks.generate.digest pins a generated set by it"),
        Column("source", "STRING", True, "builtin, the attacks file, or the run that generated them"),
    ),
    "attack_summary": (
        RUN_ID,
        RUN_DATE,
        Column("family", "STRING", True),
        Column("delivery", "STRING", True, "tool_response | user_turn"),
        Column("tool", "STRING", description="the attacked tool (null: the user's turn)"),
        Column("path", "STRING", description="the JSON path in its response (null: the user's turn)"),
        Column("slice", "STRING", True, "'overall' or 'column=value'"),
        Column("attacked", "INT64", True, "attacked runs with a verdict (the goal reached or not)"),
        Column("succeeded", "INT64", True, "attacked runs whose attack reached its goal"),
        Column("attack_success_rate", "FLOAT64", description="succeeded / attacked"),
        Column("ci_low", "FLOAT64", description="95% CI of attack_success_rate (Poisson bootstrap of cases: the "
                                                "runs of a case are resampled together)"),
        Column("ci_high", "FLOAT64"),
        Column("errors", "INT64", True, "attacked runs without a verdict: the goal's metric failed, or the run "
                                        "failed before reaching the goal"),
        Column("delivered", "INT64", True, "attacked runs the attack reached: the user's turn always; a tool's "
                                           "response when the agent called the tool"),
        Column("cases", "INT64", True, "cases attacked"),
        Column("benign_goal_rate", "FLOAT64", description="share of the twins that reached the goal with no "
                                                          "attack (a tool goal: called the tool anyway; a judge "
                                                          "goal: its metric passed); null for a canary"),
        Column("utility_metric", "STRING", description="the metric whose pass is utility (red_team.utility)"),
        Column("paired", "INT64", True, "attacked runs whose utility is known both attacked and in the twin"),
        Column("benign_utility", "FLOAT64", description="pass share of the twins of the paired runs"),
        Column("utility_under_attack", "FLOAT64", description="pass share of the paired attacked runs"),
        Column("utility_difference", "FLOAT64", description="utility_under_attack - benign_utility (paired)"),
        Column("utility_difference_ci_low", "FLOAT64", description="95% CI of utility_difference (Poisson "
                                                                   "bootstrap of cases)"),
        Column("utility_difference_ci_high", "FLOAT64"),
        Column("examples", "JSON", description="up to three attacked runs beside their twins, the worst first "
                                               "(succeeded and lost the twin's utility, then succeeded): "
                                               "[{instance_id, twin_id}]"),
    ),
    "dead_letter": (
        RUN_ID,
        RUN_DATE,
        Column("source", "STRING", True, "file and line, or CSV row"),
        Column("origin", "STRING", description="the file (or BigQuery stream) the record came from"),
        Column("line", "INT64", description="the record's first physical line in it (its row, for BigQuery)"),
        Column("line_count", "INT64", description="the physical lines the record spans"),
        Column("field", "STRING", description="the field at fault, when one is"),
        Column("reason", "STRING", True),
        Column("raw_record", "STRING", True),
    ),
}


# Tables with a column per slice column (input.slice_columns).
SLICED_TABLES = ("instances", "failure_assignments")


def table_columns(table: str, slice_columns: Iterable[str] = ()) -> tuple[Column, ...]:
    columns = TABLES[table]
    if table in SLICED_TABLES:
        columns = columns + tuple(Column(c, "STRING", description="slice column") for c in slice_columns)
    return columns


def arrow_schema(table: str, slice_columns: Iterable[str] = ()) -> pa.Schema:
    return pa.schema(
        [pa.field(c.name, _ARROW[c.type], nullable=not c.required) for c in table_columns(table, slice_columns)]
    )


# How each BigQuery table is laid out: partitioned by run date, clustered for
# the common filters.
CLUSTERING = {
    "instances": ["run_id"],
    "metric_results": ["metric", "run_id"],
    "summary": ["metric", "slice"],
    "runs": ["name"],
    "dead_letter": ["run_id"],
    "judge_cache": ["request_key"],
    "comparisons": ["metric", "run_id"],
    "rubrics": ["metric", "run_id"],
    "calibration": ["metric", "slice"],
    "failure_assignments": ["metric", "run_id"],
    "failure_modes": ["metric", "slice"],
    "taxonomies": ["digest"],
    "scenarios": ["run_id", "decision"],
    "attacks": ["family", "run_id"],
    "attack_summary": ["family", "slice"],
}


def bigquery_schema(table: str, slice_columns: Iterable[str] = ()):
    from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

    return [
        bigquery.SchemaField(
            c.name, _BIGQUERY.get(c.type, c.type), mode="REQUIRED" if c.required else "NULLABLE",
            description=c.description or None,
        )
        for c in table_columns(table, slice_columns)
    ]


@dataclasses.dataclass(frozen=True)
class RunKey:
    """The run a row belongs to: the two columns every table starts with."""

    run_id: str
    run_date: dt.date

    def columns(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_date": self.run_date}


def blank_metric_row(run: RunKey, instance_id: str, metric: str, judge_model: str) -> dict[str, Any]:
    """A judge metric's metric_results row before its answers fill it: every column
    of the table, none scored, no tokens or attempts counted yet."""
    row = {c.name: None for c in TABLES["metric_results"]}
    row.update(run.columns(), instance_id=instance_id, metric=metric, judge_model=judge_model,
               prompt_tokens=0, output_tokens=0, attempts=0)
    return row


def to_json_text(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# The instances table's field columns: (name, whether its value is written as JSON text).
_INSTANCE_FIELDS = tuple((c.name, c.type == "JSON") for c in TABLES["instances"][4:4 + len(CANONICAL_FIELDS)])


def instance_row(run: "RunKey", instance: Instance) -> dict[str, Any]:
    row: dict[str, Any] = {"run_id": run.run_id, "run_date": run.run_date, "instance_id": instance.instance_id,
                           "source": instance.source}
    fields = instance.fields
    texts = instance.json_texts  # made by the value check, for the values the fields still hold
    for name, json_text in _INSTANCE_FIELDS:
        value = fields.get(name)
        if json_text and value is not None:
            made = texts.get(name)
            row[name] = made[1] if made is not None and made[0] is value else to_json_text(value)
        else:
            row[name] = value
    attack = instance.attack
    row["attack_id"], row["attack_family"] = (attack["id"], attack["family"]) if attack is not None else (None, None)
    row.update(instance.slices)
    return row


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
