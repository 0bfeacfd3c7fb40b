"""Checks made before any work: that what the config names imports here (a custom metric's function,
Vertex's published prompts, google-adk for ADK's judges and user simulator), that the input exists and its columns
provide every metric's inputs, that the outputs can be written (and the run's folder is
evalbeam's to replace), that the judge has credentials and its tables exist, and
that an inference function or agent imports. Each failure is a ConfigError that
names the resource or field at fault; nothing is created. (The config model, configs.schema,
checks a config's shape only: these are what the environment must provide.)"""
from __future__ import annotations

import dataclasses
import json
import os

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions
from google.auth.exceptions import DefaultCredentialsError

from evalbeam.configs import ConfigError, EvalConfig, MetricSpec
from evalbeam.metrics.rows.otlp import SPAN_COLUMNS
from evalbeam.metrics.custom import load_function, path_hint
from evalbeam.metrics.agents.probe import reachable
from evalbeam.metrics.rows.fields import InvalidField
from evalbeam.metrics.agents.inference import AgentInferrer, load_target
from evalbeam.metrics.rows.instance import RowSpec, build_instance, present_columns
from evalbeam.metrics.judge.adk_judges import AdkJudgesUnavailable, check_evaluators
from evalbeam.metrics.judge.adk_judges import require_adk as require_adk_judges
from evalbeam.metrics.judge.asks import QuotaError, plan_judges, share_quotas
from evalbeam.metrics.judge.client import JudgeCredentialsError, check_credentials
from evalbeam.metrics.judge.vertex_templates import VERTEX_METRICS, vertex_template
from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.registry import unmet_inputs
from evalbeam.metrics.agents.simulator import QUALITY_METRIC, SimulatorUnavailable, check_custom_instructions, require_adk
from evalbeam.pipelines.local import LOCAL_RUNNERS
from evalbeam.pipelines.stages.read import adk_reading, inputs_left, row_spec
from evalbeam.pipelines.stages.red_team import check_red_team
from evalbeam.transforms import bigquery
from evalbeam.transforms.local_cloud import no_credentials, storage_client
from evalbeam.transforms.read import match_files, parse_file
from evalbeam.transforms.records import DeadLetter, Record
from evalbeam.transforms.sample import sample_records
from evalbeam.transforms.write import OutputFolderError, check_run_folder, check_writable


@dataclasses.dataclass
class Preflight:
    source: str  # what was checked: the files matched, or the BigQuery table/query
    checked_rows: int | None  # rows sampled for the column check (None: the table schema was used)
    columns: set[str]
    unreadable: list = dataclasses.field(default_factory=list)  # dead letters met while sampling
    whole: bool = False  # the sample read every file to its end (a small input)


@dataclasses.dataclass
class RowsCheck:
    """What `run` would make of a file input: its records read, its instances to score, and its
    dead letters (read = usable + dead_count, as the runs table counts them)."""
    files: int
    usable: int
    dead_count: int
    dead_letters: list  # the first few

    @property
    def read(self) -> int:
        return self.usable + self.dead_count


def check_rows(config: EvalConfig, limit: int = 10) -> RowsCheck:
    """Every file of the input parsed and its records validated as `run` reads them (the same
    parser, encoding, ADK base folder and criteria, the same instance checks and repeated ids:
    with an id column the later ones are dead letters, without one they are renamed and kept):
    the instances to score, and the dead letters (the first `limit` kept). Reads the whole
    input: for ADK files, and for inputs preflight's sample read whole."""
    spec = row_spec(config)
    files = match_files(config.input.uri)
    reading = adk_reading(config)
    check = RowsCheck(len(files), 0, 0, [])
    seen: dict[str, str] = {}
    for path in files:
        for item in parse_file(path, config.input.inferred_format(), config.input.encoding, adk=reading):
            if isinstance(item, Record):
                try:
                    instance = build_instance(item.data, spec, item.source, item.from_csv, item.line_count)
                except InvalidField as e:
                    item = DeadLetter(item.source, str(e), item.raw, e.field)
                except Exception as e:  # noqa: BLE001 - as the run's validation: the record is its dead letter
                    item = DeadLetter(item.source, f"cannot be used: {type(e).__name__}: {e}", item.raw)
                else:
                    if instance.instance_id not in seen or spec.id_column is None:
                        seen.setdefault(instance.instance_id, item.source)
                        check.usable += 1
                        continue
                    item = DeadLetter(item.source, f"duplicate id {instance.instance_id!r} in column "
                                                   f"{spec.id_column!r}: first seen at {seen[instance.instance_id]}",
                                      item.raw, "instance_id")
            if isinstance(item, DeadLetter):
                check.dead_count += 1
                if len(check.dead_letters) < limit:
                    check.dead_letters.append(item)
    return check


def billing_project(config: EvalConfig, options: PipelineOptions | None) -> str | None:
    if config.input.project:
        return config.input.project
    if config.output.bigquery:
        return config.output.bigquery_dataset()[0]
    return options.view_as(GoogleCloudOptions).project if options else None


def preflight(config: EvalConfig, options: PipelineOptions | None = None, run_id: str | None = None,
              credentials: bool = True) -> Preflight:
    """Check, before any work, that the input exists, that its columns provide
    every input of every metric, and that the outputs can be written (and, for
    `run_id`, that its Parquet folder is evalbeam's to replace). Raises
    ConfigError naming the resource or field at fault. Creates nothing.
    credentials: False for what calls no model (`plan`): the judge's key is not needed."""
    try:
        return _preflight(config, options, run_id, credentials)
    except DefaultCredentialsError:
        # google-auth's own message is a paragraph; what the user needs is which resource asked
        raise ConfigError(no_credentials(f"BigQuery or Cloud Storage: {_cloud_resources(config)}")) from None


def _cloud_resources(config: EvalConfig) -> str:
    """The config's cloud resources, for the message of missing credentials."""
    named = []
    if config.input.kind != "files":
        named.append(f"input {config.input.uri or 'query'}" + (f" in project {config.input.project}"
                                                               if config.input.project else ""))
    elif config.input.uri.startswith("gs://"):
        named.append(f"input {config.input.uri}")
    if config.output.bigquery:
        named.append(f"output {config.output.bigquery}")
    if config.output.parquet and str(config.output.parquet).startswith("gs://"):
        named.append(f"output {config.output.parquet}")
    return ", ".join(named) or "the config's cloud resources"


def _preflight(config: EvalConfig, options: PipelineOptions | None, run_id: str | None,
               credentials: bool) -> Preflight:
    check_imports(config)
    if config.scenarios is not None:  # the input is the scenarios the run makes (or reuses)
        checked = check_scenarios(config)
    elif config.input.kind == "files":
        checked = _check_files(config)
    else:
        try:
            label, columns = bigquery.describe_input(config.input, billing_project(config, options))
        except bigquery.BigQueryError as e:
            raise ConfigError(str(e)) from None
        checked = Preflight(label, None, set(columns))
    _check_columns(config, checked)
    _check_outputs(config, options, run_id or config.resolved_run_id())
    _check_judge(config, options, credentials)
    _check_inference(config)
    _check_simulator(config)
    _check_taxonomy(config)
    check_red_team(config)
    _check_bleu(config)
    return checked


def check_scenarios(config: EvalConfig) -> Preflight:
    """scenarios: google-adk here (ADK's models check each scenario, its personas are ADK's), the agent
    read (imported, or its A2A card), the personas known, the seed conversations readable, the eval set
    file's place; or, pinned, the earlier set found. ConfigError in one line; nothing is called."""
    from evalbeam.pipelines.scenario_inputs import generation_plan, pinned_set  # start-up time: only with scenarios:

    scenarios = config.scenarios
    eval_set = config.output.eval_set
    if eval_set.endswith("/") or (FileSystems.get_scheme(eval_set) is None and os.path.isdir(eval_set)):
        raise ConfigError(f"output.eval_set: {eval_set!r} is a folder: name the eval set's file, e.g. "
                          f"{eval_set.rstrip('/') + '/' + config.name + '.evalset.json'!r}")
    if scenarios.pinned:
        digest, rows = pinned_set(scenarios)
        return Preflight(f"scenario set {digest} ({len(rows)} scenarios) of {', '.join(scenarios.pinned_from)}", 0,
                         set())
    plan = generation_plan(config)
    asked = plan.grid.size * plan.grid.per_cell
    return Preflight(f"scenarios: {plan.grid.size} cells x {plan.grid.per_cell} = {asked} asked of "
                     f"{plan.settings.model} for agent {plan.agent.name} ({len(plan.agent.tools)} tools)", 0, set())


def _check_bleu(config: EvalConfig) -> None:
    """require_native_bleu: a bleu metric needs BLEU's C extension here (the launcher; each worker checks
    its own as it starts scoring: transforms.score.ScoreFn)."""
    from evalbeam.metrics import sentence_bleu  # start-up time: sacrebleu only for a config with BLEU

    if not config.require_native_bleu or sentence_bleu.path() == sentence_bleu.C_PATH:
        return
    if any(s.name == "bleu" and not s.is_custom for s in config.computation_specs()):
        raise ConfigError("require_native_bleu: BLEU's C extension (metrics/_bleu13a.c) is not built in this "
                          "install of evalbeam (no C compiler was found when it was installed), so BLEU would run "
                          "its Python path, about 6x slower: reinstall evalbeam where a C compiler is found, or "
                          "set require_native_bleu: false")


def check_imports(config: EvalConfig) -> None:
    """What the config needs to import here, checked first: a custom metric's function, a
    Vertex-named judge's published prompt (read from google-cloud-aiplatform), google-adk for ADK's
    judge criteria and for the user simulator's verifier (per_turn_user_simulator_quality_v1), and
    ADK's own check of the user simulator's custom_instructions. Raises ConfigError naming each
    field at fault (`metrics.<i>: ...`), worded as the config's own errors are."""
    problems = []
    for i, spec in enumerate(config.metrics):
        try:
            _check_metric_imports(spec)
        except ValueError as e:
            problems.append(f"  metrics.{i}: {e}")
    simulator = config.inference.user_simulator if config.inference else None
    if simulator is not None:
        try:
            check_custom_instructions(simulator.custom_instructions)
        except ValueError as e:
            problems.append(f"  inference.user_simulator.custom_instructions: {e}")
    if problems:
        where = f"{config.config_file}: " if config.config_file else ""
        raise ConfigError(f"{where}invalid config\n" + "\n".join(problems))


def _check_metric_imports(spec: MetricSpec) -> None:
    if spec.is_custom:
        try:
            load_function(spec.function)
        except ValueError as e:
            raise ValueError(f"function: {e}") from None
        return
    if spec.user_template is not None:
        return
    if spec.name.removeprefix("pairwise_") in VERTEX_METRICS:
        # read Vertex's text here, where the pipeline is built: a missing package is a config error
        vertex_template(spec.name.removeprefix("pairwise_"))
    # ADK's own evaluator renders and scores ADK's judge criteria: google-adk must import where the pipeline is built
    require_adk_judges([spec.name])
    if spec.name == QUALITY_METRIC:  # ADK's own verifier prompt and parsing, likewise
        require_adk(spec.name)


def _check_taxonomy(config: EvalConfig) -> None:
    """failure_modes.taxonomy's file (or taxonomies_from's pinned taxonomy) must be readable
    and well formed: said before any work."""
    if config.failure_modes is None:
        return
    from evalbeam.transforms.failure_modes import taxonomy_of  # start-up time: only with failure_modes
    from evalbeam.metrics.taxonomy import TaxonomyError

    try:
        taxonomy_of(config.failure_modes)
    except TaxonomyError as e:
        raise ConfigError(str(e)) from None


def _check_inference(config: EvalConfig) -> None:
    """The function or agent to run must import here (workers need it installed too)."""
    inference = config.inference
    if inference is None or inference.kind == "model":
        return
    if inference.deployed:  # an endpoint that does not answer: one line, before any work
        problem = reachable(inference.kind, inference.target, inference.base_url,
                            auth=inference.auth.plain() if inference.auth else None)
        if problem:
            raise ConfigError(problem)
        return

    try:
        if inference.kind == "agent":
            AgentInferrer(inference.target)
        else:
            load_target(inference.target, "inference.function")
    except Exception as e:  # noqa: BLE001 - whatever stops the import is what the user must fix
        hint = path_hint(inference.target.partition(":")[0], e)
        raise ConfigError(f"inference.{inference.kind}: cannot load {inference.target!r}: {type(e).__name__}: {e}{hint}") from None


def _check_simulator(config: EvalConfig) -> None:
    """per_turn_user_simulator_quality_v1 and conversation_scenario cases run google-adk's own user
    simulator and verifier (metrics.agents.simulator): google-adk must import here (and on the workers).
    The input is looked into for a scenario case only when google-adk is missing."""
    try:
        for spec in config.simulator_quality_specs():
            require_adk(spec.name)
        if config.simulates_users():
            try:
                require_adk("conversation_scenario cases")
            except SimulatorUnavailable:
                case = _a_scenario_case(config)
                if case is not None:
                    require_adk(f"conversation_scenario cases (eval case {case})")
    except SimulatorUnavailable as e:
        raise ConfigError(str(e)) from None


def _a_scenario_case(config: EvalConfig) -> str | None:
    """The first conversation_scenario case of an ADK eval set input (`file: eval_id`), or None."""
    if config.input.kind != "files" or config.input.inferred_format() != "adk_eval_set":
        return None
    for path in match_files(config.input.uri):
        try:
            with FileSystems.open(path) as f:
                value = json.loads(f.read().decode("utf-8-sig"))
        except (OSError, ValueError, RecursionError):
            continue  # its cases are dead-lettered when read, saying why
        cases = value.get("eval_cases") if isinstance(value, dict) else None
        for case in cases if isinstance(cases, list) else []:
            if isinstance(case, dict) and (case.get("conversation_scenario") or case.get("conversationScenario")):
                return f"{path}: {case.get('eval_id', case.get('evalId'))!r}"
    return None


def parquet_glob(location: str) -> str:
    """A judge.cache location: a glob as given, else a judge_cache folder."""
    if any(c in location for c in "*?[") or location.endswith(".parquet"):
        return location
    return location.rstrip("/") + "/*.parquet"


def judge_credentials_problem(config: EvalConfig) -> str | None:
    """What a judge the run calls lacks to authenticate, or None: for `validate` and `plan`, which
    check everything else without it and report this as the one thing left."""
    if not config.calls_a_model():
        return None
    try:
        check_judges_credentials(config)
    except ConfigError as e:
        return str(e)
    return None


def check_judges_credentials(config: EvalConfig) -> None:
    """ConfigError unless every judge the run calls can authenticate: the run's own (where used) and each
    metric's own judge and juror (they may name another backend, provider or key's variable)."""
    try:
        if uses_run_judge(config):
            check_credentials(config.judge)
    except JudgeCredentialsError as e:
        raise ConfigError(f"judge (called by {', '.join(run_judge_callers(config))}): {e}") from None
    for i, spec in enumerate(config.metrics):
        for (where, _), (_, settings) in zip(spec.judge_partials(), spec.jurors(config.judge)):
            try:
                check_credentials(settings)
            except JudgeCredentialsError as e:
                raise ConfigError(f"metrics.{i}.{where} ({spec.output_name}): {e}") from None
    _check_generator_credentials(config)


def uses_run_judge(config: EvalConfig) -> bool:
    """Whether anything calls the run's own `judge:`: a judge metric without a judge or jury of its own
    (rubric metrics, simulator quality and ADK's criteria always use it), model inference, the user
    simulator or failure classification. When every metric names its own judge (another provider's,
    say), the run's judge needs no credentials."""
    return config.model_inference() or config.failure_modes is not None or any(
        s.judge is None and s.judges is None for s in config.judge_specs()) or simulator_called(config) or \
        (config.red_team is not None and config.red_team.generates)


def simulator_called(config: EvalConfig) -> bool:
    """Whether the user simulator may be called: it is configured (or, over an ADK eval set, ADK's
    default) and, over an ADK eval set, one of its cases is a conversation_scenario (one without
    any needs no simulated user, nor its key)."""
    if not config.simulates_users():
        return False
    if config.scenarios is not None:  # generated scenarios: every case is a conversation_scenario
        return True
    if config.input.kind == "files" and config.input.inferred_format() == "adk_eval_set":
        return _a_scenario_case(config) is not None
    return True


def run_judge_callers(config: EvalConfig) -> list[str]:
    """What calls the run's own `judge:` (uses_run_judge), as a credentials error names it."""
    callers = [f"metric {s.output_name}" for s in config.judge_specs() if s.judge is None and s.judges is None]
    if config.model_inference():
        callers.append("inference.model")
    if simulator_called(config):
        callers.append("inference.user_simulator")
    if config.failure_modes is not None:
        callers.append("failure_modes")
    if config.red_team is not None and config.red_team.generates:
        callers.append("red_team.attacks.generate")
    return callers


def _check_generator_credentials(config: EvalConfig) -> None:
    """The scenario generator's settings (judge: with scenarios.judge over it) can authenticate."""
    if not config.generates_scenarios():
        return
    from evalbeam.pipelines.scenario_inputs import generator_settings  # start-up time: only with scenarios:

    try:
        check_credentials(generator_settings(config))
    except JudgeCredentialsError as e:
        raise ConfigError(f"judge (called by the scenario generator, scenarios.judge over it): {e}") from None


def _check_judge(config: EvalConfig, options: PipelineOptions | None, credentials: bool = True) -> None:
    # every model the run calls goes through the judge layer: judge metrics (rubric generation
    # included), model inference, the user simulator, failure classification (EvalConfig.calls_a_model)
    if not config.calls_a_model():
        return
    try:  # ADK's own judge criteria render and score with google-adk: it must be here (and on the workers)
        check_evaluators([s.name for s in config.judge_specs() if not s.is_custom and s.user_template is None])
    except AdkJudgesUnavailable as e:
        raise ConfigError(str(e)) from None
    if credentials:
        check_judges_credentials(config)
    if config.template_judge_specs():  # quotas a metric's judge or juror names must leave the others some
        try:
            share_quotas(plan_judges(config.template_judge_specs(), config.judge), config.judge)
        except QuotaError as e:
            raise ConfigError(str(e)) from None
    tables = [("cache", "judge_cache", loc) for loc in config.judge.cache]
    if config.rubric_specs():
        tables += [("rubrics_from", "rubrics", loc) for loc in config.judge.rubrics_from]
    seen: dict[str, int] = {}
    for field, table, location in tables:
        i = seen[field] = seen.get(field, -1) + 1
        if location.startswith("bq://"):
            try:
                bigquery.describe_table(location.removeprefix("bq://"), billing_project(config, options), f"judge.{field}.{i}")
            except bigquery.BigQueryError as e:
                raise ConfigError(str(e)) from None
        else:
            try:
                found = match_files(parquet_glob(location))
            except BeamIOError as e:
                raise ConfigError(f"judge.{field}.{i}: cannot list {location!r}: {_short(e)}") from None
            if not found:
                raise ConfigError(f"judge.{field}.{i}: no {table} Parquet files at {parquet_glob(location)!r}")


def _check_files(config: EvalConfig) -> Preflight:
    uri = config.input.uri
    try:
        files = match_files(uri)
    except BeamIOError as e:
        reason = next(iter(e.exception_details.values()), e) if getattr(e, "exception_details", None) else e
        raise ConfigError(f"input.uri: cannot list {uri!r}{config.path_note('input.uri')}: {_short(reason)}") from None
    if not files:
        raise ConfigError(f"input.uri: no file matches {uri!r}{config.path_note('input.uri')}")
    if FileSystems.get_scheme(uri) is None and os.path.isdir(uri):  # Beam's local match gives a folder named alone
        ext = {"csv": "csv"}.get(config.input.format or "", "jsonl")
        raise ConfigError(f"input.uri: {uri!r} is a folder: name its files, e.g. "
                          f"{os.path.join(uri, '*.' + ext)!r}")
    sample = sample_records(files, config.input.inferred_format(), encoding=config.input.encoding)
    if config.input.format is None and config.input.inferred_format() == "jsonl" and not sample.records \
            and sample.dead_letters:
        _refuse_json_document(config, sample.dead_letters[0].origin or files[0])
    return Preflight(f"{len(files)} file(s)", len(sample.records), present_columns(map(_with_trace_fields, sample.records)),
                     sample.dead_letters, sample.whole)


# A whole file read to tell a JSON document from JSON Lines: ADK writes one file per eval set
_DOCUMENT_CHECK_BYTES = 64 * 1024 * 1024


def _refuse_json_document(config: EvalConfig, path: str) -> None:
    """A `.json` file read as JSON Lines whose lines are no rows: when the file is one JSON
    object over several lines (an ADK eval set, an indented row), a ConfigError saying so
    and which input.format reads it; otherwise nothing (its dead letters say why)."""
    try:
        with FileSystems.open(path) as f:  # decompressed by its extension, as the reader does
            data = f.read(_DOCUMENT_CHECK_BYTES + 1)
        if len(data) > _DOCUMENT_CHECK_BYTES:
            return
        text = data.decode("utf-8-sig")
        value = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return
    if len([line for line in text.splitlines() if line.strip()]) < 2:
        return
    fmt = None
    if isinstance(value, dict):
        fmt = "adk_eval_result" if "eval_case_results" in value or "evalCaseResults" in value else \
            "adk_eval_set" if "eval_cases" in value else None
    what = (f"set input.format: {fmt} (or name the files *.{'evalset_result' if fmt == 'adk_eval_result' else 'evalset'}"
            ".json)" if fmt else "write one object a line (JSON Lines), e.g. `jq -c '.[]'`")
    raise ConfigError(f"input.uri: {path} is one JSON document, not JSON Lines (one object a line), as evalbeam reads a .json or .jsonl file: {what}")


def _with_trace_fields(record: dict) -> dict:
    """A sampled row with the fields its agent trace implies (a one-turn case's response...),
    which the column check counts as provided."""
    if not any(k in record for k in ("invocations", "agent_data", "intermediate_events")):
        return record

    try:
        fields = build_instance(record, RowSpec({}, None, (), ()), "preflight").fields
    except Exception:  # noqa: BLE001 - such a row is dead-lettered when read; here it provides what it has
        return record
    return {**record, **fields}


def _short(error) -> str:
    text = str(error)
    if "NotFound" in text or "404" in text:
        return "the bucket or path does not exist or is not reachable"
    return text.splitlines()[0][:300]


AGENT_EVENT_COLUMNS = ("timestamp", "event_type", "agent", "session_id", "invocation_id", "content")


def _check_columns(config: EvalConfig, checked: Preflight) -> None:
    if checked.checked_rows == 0:
        return  # an empty dataset is an empty run: nothing to check against
    columns = checked.columns
    if config.input.format == "adk_agent_events":
        # the rows are events, not instances: the plugin's columns are what is needed
        missing = [c for c in AGENT_EVENT_COLUMNS if c not in columns]
        if missing:
            raise ConfigError(f"input: {checked.source} is not an ADK agent events table (BigQueryAgentAnalyticsPlugin): "
                              f"no column {', '.join(missing)}")
        return
    if config.input.format == "otel_traces":
        # the rows are OTLP requests, not instances: what a case holds is known once its spans are
        # grouped (a metric whose inputs it lacks gets its error there, e.g. content not recorded)
        if config.input.kind != "files":
            missing = [c for c in SPAN_COLUMNS if c not in columns]
            if missing:
                raise ConfigError(f"input: {checked.source} is not a table of spans (Cloud Trace's _AllSpans schema): "
                                  f"no column {', '.join(missing)}")
            return
        if "resourceSpans" not in columns:
            raise ConfigError(f"input: {checked.source} holds no OTLP JSON trace request (no resourceSpans in "
                              f"the first {checked.checked_rows} rows): input.format otel_traces reads "
                              "ExportTraceServiceRequest JSON, one a line or one a file")
        return
    mapping = config.input.column_mapping
    problems = []
    for i, spec in enumerate(config.metrics):
        alternatives = inputs_left(config, spec.input_alternatives())
        available = {f for alt in alternatives for f in alt if mapping.get(f, f) in columns}
        if not unmet_inputs(alternatives, available):
            continue
        needs = " or ".join(
            "(" + ", ".join(f"{f}" + (f" [column {mapping[f]!r}]" if f in mapping else "") for f in alt) + ")"
            for alt in alternatives
        )
        problems.append(f"  metrics.{i} ({spec.output_name}): needs {needs}; no column provides "
                        + ", ".join(sorted({f for alt in alternatives for f in alt} - available))
                        + _own_prompt_hint(config, spec, columns))
    for col in config.input.slice_columns:
        if col not in columns:
            problems.append(f"  input.slice_columns: column {col!r} is not in the dataset")
    if config.input.id_column and config.input.id_column not in columns:
        problems.append(f"  input.id_column: column {config.input.id_column!r} is not in the dataset")
    for metric, label_columns in config.input.labels.items():
        for col in label_columns:
            if col not in columns:  # a run would find no label to compare with, and fail
                problems.append(f"  input.labels.{metric}: column {col!r} is not in the dataset")
    if problems:
        seen = "its schema" if checked.checked_rows is None else f"the first {checked.checked_rows} rows"
        raise ConfigError(
            f"the dataset ({checked.source}) does not fit the config "
            f"(columns in {seen}: {', '.join(sorted(columns))}):\n" + "\n".join(problems)
        )


def _own_prompt_hint(config: EvalConfig, spec, columns: set[str]) -> str:
    """A Vertex-named judge metric the dataset cannot feed (Vertex's template shows the judge the
    prompt): the name of evalbeam's own prompt, which runs before the split judged under this name,
    where the dataset feeds it."""
    name = spec.name
    base = name.removeprefix("pairwise_")
    if spec.is_custom or spec.user_template is not None or base not in VERTEX_METRICS:
        return ""
    own = f"pairwise_evalbeam_{base}" if name.startswith("pairwise_") else f"evalbeam_{base}"
    try:
        definition = get_metric(own)
    except KeyError:
        return ""
    mapping = config.input.column_mapping
    alternatives = inputs_left(config, definition.inputs)
    available = {f for alt in alternatives for f in alt if mapping.get(f, f) in columns}
    if unmet_inputs(alternatives, available):
        return ""
    return f"; evalbeam's own prompt, which needs no prompt, is {own}"


def _check_outputs(config: EvalConfig, options: PipelineOptions | None, run_id: str | None) -> None:
    parquet = config.output.parquet
    if parquet and parquet.startswith("gs://"):
        bucket = parquet[len("gs://"):].split("/", 1)[0]
        try:
            exists = storage_client().bucket(bucket).exists()
        except Exception as e:  # noqa: BLE001 - any failure to reach the bucket is reported as such
            raise ConfigError(f"output.parquet: cannot reach bucket {bucket!r}: {_short(e)}") from None
        if not exists:
            raise ConfigError(f"output.parquet: bucket {bucket!r} does not exist")
    if parquet:
        try:
            check_writable(parquet)
            if run_id:
                check_run_folder(parquet, run_id)
        except OutputFolderError as e:
            raise ConfigError(str(e)) from None
    if config.output.bigquery and options is not None:
        runner = options.view_as(StandardOptions).runner
        temp = options.view_as(GoogleCloudOptions).temp_location
        if parquet is None and runner not in LOCAL_RUNNERS and not (temp or "").startswith("gs://"):
            raise ConfigError("output.bigquery without output.parquet needs --temp_location=gs://... to stage files")
