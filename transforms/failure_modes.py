"""Failure modes in the pipeline (metrics.failure_modes): every failure of the
configured metrics classified into one mode of a taxonomy, through the one judge
layer, then counted per metric, slice and mode.

    scored instances, failed rubrics
              -> one classification request per failure (a metric that did not
                 pass, a rubric not met, an agent run that failed), keyed by the
                 content hash of what is asked: the same failure asked twice is
                 one call, and judge.cache answers a re-run
              -> judge.AnswerJudgeRequests (quota, retries, dedup, cache,
                 checkpoints, batch mode, accounting)
              -> one failure_assignments row per failure (a judge that failed
                 leaves its error on the row; a mode outside the taxonomy is
                 counted as other, the answer kept)
              -> CombinePerKey per (metric, slice): counts, shares, the share's
                 bootstrap CI, five examples per mode (metrics.failure_modes.ModeCounts,
                 bounded by the number of modes).

The taxonomy comes as a one-element PCollection (a side input): a built-in or a
user's file, or one the judge discovered in this run (transforms.taxonomy).
"""
from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import TYPE_CHECKING, Any, Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from evalbeam.metrics.failure_modes import (
    MODE_FIELD,
    Failure,
    ModeCounts,
    assigned_mode,
    classification_prompt,
    classification_schema,
    discovery_prompt,
    discovery_schema,
    instance_failure,
    rubric_failure,
    sample_entry,
    sample_rank,
)
from evalbeam.metrics.taxonomy import (
    BUILTIN,
    DISCOVERY_FIELD,
    Taxonomy,
    TaxonomyError,
    builtin_taxonomy,
    taxonomy_from_json,
    taxonomy_from_yaml,
)
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.client import JudgeRequest, JudgeResponse, request_key
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.metrics.rows.tables import RunKey, to_json_text
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.summary import OVERALL

if TYPE_CHECKING:
    from evalbeam.configs.failure_modes import FailureModesConfig

STAGE = "failure_modes"
UNASKED = "unasked"


@dataclasses.dataclass(frozen=True)
class FailureLink:
    """Who asked a classification: an instance's failure, with the instance's slices."""

    instance_id: str
    metric: str
    rubric_id: str | None
    slices: tuple[tuple[str, Any], ...]


def usage_name(metric: str) -> str:
    """The judge_usage entry (and judge_cache metric) of a metric's classifications."""
    return f"{metric}:{STAGE}"


def instance_failures(scored: ScoredInstance, metrics: frozenset, rubric_metrics: frozenset) -> Iterable:
    """A ScoredInstance (one part of an instance's rows) -> (Failure, Instance) of its failed
    rows. A rubric metric's failures are its failed rubrics (instance_rubric_failures),
    unless its row failed because the agent's run did."""
    for row in scored.results:
        if row["metric"] not in metrics:
            continue
        failure = instance_failure(scored.instance.instance_id, scored.instance.fields, row)
        if failure is None or (row["metric"] in rubric_metrics and row.get("error") is None):
            continue
        yield failure, scored.instance


def instance_rubric_failures(element) -> Iterable:
    """(instance_id, {instance, rubrics}) -> (Failure, Instance) of the instance's failed rubrics."""
    _, groups = element
    for instance in groups["instance"]:
        for row in groups["rubrics"]:
            failure = rubric_failure(row)
            if failure is not None:
                yield failure, instance


def link_of(failure: Failure, instance: Instance) -> FailureLink:
    return FailureLink(failure.instance_id, failure.metric, failure.rubric_id, tuple(sorted(instance.slices.items())))


def classification_ask(item, settings: JudgeSettings, taxonomy: Taxonomy):
    """(Failure, Instance) -> its classification ask; tagged UNASKED: its error row when
    there is no taxonomy to classify into (the discovery failed)."""
    failure, instance = item
    if not taxonomy.modes:
        yield beam.pvalue.TaggedOutput(UNASKED, (JudgeResponse("", usage_name(failure.metric), error=taxonomy.name),
                                                 [link_of(failure, instance)]))
        return
    prompt = classification_prompt(failure, instance.fields, taxonomy)
    schema_json = json.dumps(classification_schema(taxonomy), sort_keys=True)
    key = request_key(settings, prompt, schema_json, 0)
    request = JudgeRequest(key, usage_name(failure.metric), prompt, schema_json, MODE_FIELD, taxonomy.ids)
    yield key, (request, link_of(failure, instance))


def instance_asks(scored: ScoredInstance, metrics: frozenset, rubric_metrics: frozenset, settings: JudgeSettings,
                  taxonomy: Taxonomy) -> Iterable:
    """A ScoredInstance -> the classification asks of its failed rows (evalbeam plan)."""
    for item in instance_failures(scored, metrics, rubric_metrics):
        yield from classification_ask(item, settings, taxonomy)


def assignment_rows(answered, run: RunKey, taxonomy: Taxonomy) -> Iterable[dict[str, Any]]:
    """(response, [FailureLink]) -> one failure_assignments row per failure that asked."""
    response, links = answered
    for link in links:
        row = {**run.columns(), "instance_id": link.instance_id, "metric": link.metric, "rubric_id": link.rubric_id,
               "mode": None, "judge_mode": None, "rationale": None, "error": response.error,
               "taxonomy_digest": taxonomy.digest, "cache_hit": response.cache_hit, **dict(link.slices)}
        if response.error is None:
            row.update(mode=assigned_mode(response.verdict, taxonomy), judge_mode=response.verdict,
                       rationale=response.explanation)
        yield row


def slice_keys(row: dict[str, Any], slice_columns: tuple[str, ...]) -> Iterable:
    """An assignment row -> ((metric, slice), (instance_id, mode)) for overall and each slice."""
    value = (row["instance_id"], row["mode"])
    yield (row["metric"], OVERALL), value
    for column in slice_columns:
        v = row.get(column)
        yield (row["metric"], f"{column}={'(missing)' if v is None else v}"), value


class ModeCountsFn(beam.CombineFn):
    def create_accumulator(self):
        return ModeCounts()

    def add_input(self, acc: ModeCounts, element):
        return acc.add(*element)

    def merge_accumulators(self, accs):
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first

    def compact(self, acc: ModeCounts):
        acc.flush()
        return acc

    def extract_output(self, acc: ModeCounts):
        return acc


def mode_rows(element, run: RunKey, taxonomy: Taxonomy) -> Iterable[dict[str, Any]]:
    (metric, slice_name), counts = element
    for r in counts.rows(taxonomy):
        yield {**run.columns(), "metric": metric, "slice": slice_name, **r, "examples": to_json_text(r["examples"]),
               "taxonomy_digest": taxonomy.digest}


class CountFailureModes(beam.PTransform):
    """failure_assignments rows -> failure_modes rows (one per metric, slice and mode)."""

    def __init__(self, run: RunKey, slice_columns, taxonomy):
        super().__init__()
        self._run = run
        self._slices = tuple(slice_columns)
        self._taxonomy = taxonomy  # a one-element PCollection

    def expand(self, assignments):
        return (
            assignments
            | "BySlice" >> beam.FlatMap(slice_keys, self._slices)
            | "CountModes" >> beam.CombinePerKey(ModeCountsFn())
            | "ModeRows" >> beam.FlatMap(mode_rows, self._run, taxonomy=beam.pvalue.AsSingleton(self._taxonomy))
        )


class ClassifyFailures(beam.PTransform):
    """(scored ScoredInstances, instances) -> (failure_assignments rows, failure_modes rows,
    judge_cache rows, usage, the taxonomy), through the stage's JudgeContext; `taxonomy` a
    one-element PCollection of the Taxonomy, or None to discover one from a seeded sample
    of the failures; `rubrics` the rubrics table's rows, or None."""

    def __init__(self, run: RunKey, metrics, rubric_metrics, slice_columns, context: JudgeContext, taxonomy,
                 rubrics=None, discover_sample: int = 200, seed: int = 0):
        super().__init__()
        self._run = run
        self._metrics = frozenset(metrics)
        self._rubric_metrics = frozenset(rubric_metrics) & self._metrics
        self._slices = tuple(slice_columns)
        self._context = context
        self._taxonomy = taxonomy
        self._rubrics = rubrics
        self._discover_sample = discover_sample
        self._seed = seed

    def expand(self, inputs):
        scored, instances = inputs
        rubrics = self._rubrics
        settings, run = self._context.settings, self._run
        failures = [scored | "InstanceFailures" >> beam.FlatMap(instance_failures, self._metrics, self._rubric_metrics)]
        if self._rubric_metrics and rubrics is not None:
            failed = (rubrics
                      | "FailedRubrics" >> beam.Filter(
                          lambda r, ms: r["metric"] in ms and r.get("verdict") is False, self._rubric_metrics)
                      | "RubricById" >> beam.Map(lambda r: (r["instance_id"], r)))
            by_id = instances | "InstanceById" >> beam.Map(lambda i: (i.instance_id, i))
            failures.append({"instance": by_id, "rubrics": failed}
                            | "JoinRubrics" >> beam.CoGroupByKey()
                            | "RubricFailures" >> beam.FlatMap(instance_rubric_failures))
        failures = tuple(failures) | "AllFailures" >> beam.Flatten() if len(failures) > 1 else failures[0]
        answers = []
        taxonomy_pc = self._taxonomy
        if taxonomy_pc is None:  # discover: one request, from a seeded sample of the failures
            discovered = failures | "Discover" >> DiscoverTaxonomy(self._discover_sample, self._seed, self._context)
            taxonomy_pc, answers = discovered.taxonomy, [discovered.answered]
        taxonomy = beam.pvalue.AsSingleton(taxonomy_pc)
        asks = failures | "Asks" >> beam.FlatMap(classification_ask, settings, taxonomy=taxonomy).with_outputs(
            UNASKED, main="asks")
        answered = asks.asks | "Classify" >> AnswerJudgeRequests(self._context)
        assignments = ((answered, asks[UNASKED]) | "AnsweredOrNot" >> beam.Flatten()
                       | "AssignmentRows" >> beam.FlatMap(assignment_rows, run, taxonomy=taxonomy))
        modes = assignments | "Count" >> CountFailureModes(run, self._slices, taxonomy_pc)
        every = tuple([answered, *answers]) | "AllAnswers" >> beam.Flatten() if answers else answered
        cache_rows = every | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], run, settings.model)
        usage = every | "Usage" >> beam.CombineGlobally(UsageFn())
        return assignments, modes, cache_rows, usage, taxonomy_pc


DISCOVERY = "failure_modes:discovery"


def sample_item(item, seed: int):
    failure, instance = item
    return sample_rank(seed, failure), sample_entry(failure, instance.fields)


def discovery_ask(sample: list, settings: JudgeSettings):
    """The seeded sample ([(rank, entry)], smallest ranks) -> the one discovery ask (none without failures)."""
    if not sample:
        return
    prompt = discovery_prompt([entry for _, entry in sorted(sample)])
    schema_json = json.dumps(discovery_schema(), sort_keys=True)
    key = request_key(settings, prompt, schema_json, 0)
    yield key, (JudgeRequest(key, DISCOVERY, prompt, schema_json, DISCOVERY_FIELD, ()), None)


def discovered_taxonomy(answers: list) -> Taxonomy:
    """The discovery's answer -> the Taxonomy; one without modes, named by the error, when
    it failed (every failure then carries that error) or there was nothing to discover from."""
    if not answers:
        return Taxonomy("no failure to discover a taxonomy from", (), "discovered")
    response = answers[0][0]
    if response.error:
        return Taxonomy(f"taxonomy discovery failed: {response.error}", (), "discovered")
    return taxonomy_from_json(response.verdict, "discovered", "discovered")


class DiscoverTaxonomy(beam.PTransform):
    """(Failure, Instance) items -> .taxonomy (a one-element PCollection) and .answered (the
    discovery's answer, for the cache rows and usage)."""

    def __init__(self, sample_size: int, seed: int, context: JudgeContext):
        super().__init__()
        self._size = sample_size
        self._seed = seed
        self._context = context

    def expand(self, failures):
        answered = (failures
                    | "Rank" >> beam.Map(sample_item, self._seed)
                    | "SeededSample" >> beam.combiners.Top.Smallest(self._size)
                    | "DiscoveryAsk" >> beam.FlatMap(discovery_ask, self._context.settings)
                    | "AskJudge" >> AnswerJudgeRequests(self._context))
        taxonomy = (failures.pipeline | "Once" >> beam.Create([None])
                    | "Taxonomy" >> beam.Map(lambda _, a: discovered_taxonomy(a), beam.pvalue.AsList(answered)))
        return _Discovered(taxonomy, answered)


@dataclasses.dataclass
class _Discovered:
    taxonomy: Any
    answered: Any


def taxonomy_row(taxonomy: Taxonomy, run: RunKey, metrics: list[str], sample_size: int | None, seed: int | None):
    """The taxonomies table's row of the taxonomy a run classified into."""
    discovered_here = taxonomy.origin == "discovered" and taxonomy.discovered_in is None
    return {**run.columns(), "digest": taxonomy.digest if taxonomy.modes else "", "name": taxonomy.name,
            "origin": taxonomy.origin, "discovered_in": run.run_id if discovered_here else taxonomy.discovered_in,
            "modes": taxonomy.modes_json(), "metrics": to_json_text(list(metrics)),
            "sample_size": sample_size if discovered_here else None, "seed": seed if discovered_here else None}


def earlier_table_rows(location: str) -> list[dict[str, Any]]:
    """Every row of an earlier run's table (a pinned taxonomy's taxonomies, red teaming's attacks): a
    Parquet folder or glob, or bq://project.dataset.table."""
    if location.startswith("bq://"):
        from evalbeam.transforms.local_cloud import bigquery_client  # start-up time: Google Cloud clients only where used

        table = location.removeprefix("bq://")
        client = bigquery_client(table.split(".")[0])
        return [dict(r.items()) for r in client.query(f"SELECT * FROM `{table}`").result()]
    import pyarrow.parquet as pq  # start-up time: only where an earlier run's table is read

    pattern = location if any(c in location for c in "*?[") or location.endswith(".parquet") \
        else location.rstrip("/") + "/*.parquet"
    rows = []
    for match in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(match.path, mime_type="application/octet-stream") as f:
            rows += pq.read_table(f).to_pylist()
    return rows


def pinned_taxonomy(locations: list[str], digest: str | None = None) -> Taxonomy:
    """The earliest discovered taxonomy (by run date, then run_id) in earlier runs' taxonomies
    tables, or the one of `digest`. Raises TaxonomyError when there is none: a run never
    discovers again in its place."""
    found = []
    for location in locations:
        try:
            found += [r for r in earlier_table_rows(location) if r.get("origin") == "discovered" and r.get("digest")]
        except Exception as e:  # noqa: BLE001 - any failure to read is said, naming the location
            raise TaxonomyError(f"failure_modes.taxonomies_from: cannot read {location}: {e}") from None
    if digest:
        found = [r for r in found if r["digest"] == digest]
    if not found:
        what = f"discovered taxonomy of digest {digest}" if digest else "discovered taxonomy"
        raise TaxonomyError(f"failure_modes.taxonomies_from: no {what} in {', '.join(locations)} (evalbeam does not "
                            "discover a new one in its place: remove taxonomies_from to discover one)")
    first = min(found, key=lambda r: (str(r["run_date"]), r["run_id"]))
    return dataclasses.replace(taxonomy_from_json(first["modes"], "discovered", "discovered"),
                               discovered_in=first.get("discovered_in") or first["run_id"])


def taxonomy_of(config: "FailureModesConfig") -> Taxonomy | None:
    """The taxonomy a built-in name or a file names, or the pinned discovered one
    (taxonomies_from); None to discover one in the pipeline. Raises TaxonomyError."""
    if config.taxonomy in BUILTIN:
        return builtin_taxonomy(config.taxonomy)
    if config.discovers:
        if not config.taxonomies_from:
            return None
        return pinned_taxonomy(config.taxonomies_from, config.taxonomy_digest)
    try:
        with FileSystems.open(config.taxonomy, mime_type="application/octet-stream") as f:
            text = f.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError) as e:
        raise TaxonomyError(f"failure_modes.taxonomy: cannot read {config.taxonomy}: {e}") from None
    try:
        return taxonomy_from_yaml(text, posixpath.basename(config.taxonomy).rsplit(".", 1)[0])
    except TaxonomyError as e:
        raise TaxonomyError(f"failure_modes.taxonomy: {config.taxonomy}: {e}") from None
