"""What a config of ADK inputs gets from ADK's own files, before the schema validates it.

Loading (configs.load) calls expand_adk on the config as a mapping:

- input.adk_criteria (a test_config.json): its criteria become metrics, its judge criteria's
  judge_model_options judge.model and judge.sampling_count, its user_simulator_config
  inference.user_simulator (the config's own values win);
- an ADK file input with neither metrics nor adk_criteria: every criterion of the test_config.json
  beside each file (as ADK's AgentEvaluator.find_config_for_test_file), else ADK's defaults; each
  file's cases are then judged with their own file's (criteria_per_file);
- recorded runs (adk_agent_events) with no metrics: ADK's reference-free (efficiency) criteria;
- a function or agent run over an ADK eval set: ADK's default user simulator.

It reads files (local or on Cloud Storage) with Beam's FileSystems, among them a file's test_config.json
(criteria_of_file, which the ADK reader, transforms.read_adk, reads its cases' criteria with too); the schema
(configs.schema) reads none. A test_config.json's criteria become metric specs as ADK maps them
(read_test_config, metrics_from_criteria, judge_options), each criterion looked up in metrics.catalog.
"""
from __future__ import annotations

import functools
import json
import math
from typing import Any, Mapping

import pydantic
from apache_beam.io.filesystems import FileSystems

from evalbeam.configs.schema import InputConfig, UserSimulatorConfig
from evalbeam.metrics.adk import INFORMATIONAL_CRITERIA
from evalbeam.metrics.rows.trace import camel_case, get_key


def expand_adk(data: Any) -> tuple[Any, bool]:
    """The config `data` (a mapping) with what its ADK inputs imply, and whether each ADK file is
    judged with its own test_config.json (criteria_per_file). Raises ValueError naming the field
    (`input.adk_criteria: ...`, `input: ...`). A mapping whose input is not valid is returned as it
    is: the schema names its errors."""
    if isinstance(data, dict) and isinstance(data.get("scenarios"), dict) and data.get("input") is None:
        # the input is the generated eval set (configs.scenarios): conversation_scenario cases only, run with
        # ADK's default simulator unless the config sets one
        return _with_user_simulator(data, InputConfig(uri="scenarios", format="adk_eval_set")), False
    if not isinstance(data, dict) or not isinstance(data.get("input"), dict):
        return data, False
    try:
        source = InputConfig.model_validate(data["input"])
    except pydantic.ValidationError:
        return data, False
    per_file = not source.adk_criteria and not data.get("metrics") and source.kind == "files" and source.is_adk
    # the user simulator first: a test_config.json's user_simulator_config is read (and named
    # when it is wrong) before its criteria, as the config model did
    data = _with_user_simulator(data, source)
    return _with_criteria(data, source), per_file


def _with_criteria(data: dict, source: InputConfig) -> dict:
    """input.adk_criteria's criteria become metrics; an ADK input with no
    metrics gets ADK's default criteria (as `adk eval` without a test_config)."""
    metrics = data.get("metrics") or []
    if source.adk_criteria:
        try:
            added = read_test_config(_read_text(source.adk_criteria))
        except (OSError, ValueError) as e:
            raise ValueError(f"input.adk_criteria: {source.adk_criteria}: {e}") from None
    elif source.is_adk and not metrics and source.kind == "files":
        # each file judged with the test_config.json beside it (as ADK's AgentEvaluator): every
        # criterion any of them names; a case's rows carry its own file's (adk_case.criteria)
        try:
            added, judge = _criteria_of_files(source.uri)
        except ValueError as e:
            raise ValueError(f"input: {e}") from None
        data = {**data, "judge": {**judge, **(data.get("judge") or {})}} if judge else data
    elif source.is_adk and not metrics:
        # recorded runs have no expected side: the reference-free (efficiency) criteria
        added = metrics_from_criteria({} if source.format == "adk_agent_events" else None)
    else:
        return data
    names = {m if isinstance(m, str) else m.get("as") or m.get("name") for m in metrics}
    data = {**data, "metrics": list(metrics) + [m for m in added if m["name"] not in names]}
    if source.adk_criteria:
        data = _with_adk_judge_options(data, _read_text(source.adk_criteria))
    return data


def _with_user_simulator(data: dict, source: InputConfig) -> dict:
    """inference.user_simulator, when not given, for an agent (in-process or deployed) or function: input.adk_criteria's
    user_simulator_config, else over an ADK eval set ADK's default LlmBackedUserSimulatorConfig
    (its conversation_scenario cases run with it, as ADK runs them)."""
    inference = data.get("inference")
    if not isinstance(inference, dict) or inference.get("user_simulator") is not None or inference.get("model") \
            or not any(inference.get(k) for k in ("function", "agent", "a2a", "agent_engine")):
        return data
    if source.adk_criteria:  # as ADK reads it: the test_config's user_simulator_config
        try:
            text = _read_text(source.adk_criteria)
        except OSError:
            return data  # reported with the criteria, naming the path
        data = _with_adk_user_simulator(data, text)
        if data["inference"].get("user_simulator") is not None:
            return data
    if source.inferred_format() != "adk_eval_set":
        return data
    return {**data, "inference": {**inference, "user_simulator": {}}}


def test_config_path(path: str) -> str:
    """The test_config.json ADK's AgentEvaluator.find_config_for_test_file reads for a file: beside it."""
    return f"{path.rsplit('/', 1)[0]}/test_config.json" if "/" in path else "test_config.json"


@functools.lru_cache(maxsize=256)
def criteria_of_file(path: str) -> tuple[dict[str, Any], ...]:
    """The metric specs of the criteria ADK judges a file with (find_config_for_test_file):
    its test_config.json's, else ADK's defaults. Raises ValueError naming the test_config."""
    config = test_config_path(path)
    if not FileSystems.exists(config):
        return tuple(metrics_from_criteria(None))
    try:
        with FileSystems.open(config, mime_type="application/octet-stream") as f:
            text = f.read().decode("utf-8")
        return tuple(read_test_config(text))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{config}: {e}") from None


def _criteria_of_files(uri: str) -> tuple[list[dict], dict]:
    """(the metric specs of every criterion the ADK files of `uri` are judged with, each from
    the test_config.json AgentEvaluator.find_config_for_test_file finds for its file, else ADK's
    defaults; the judge settings their judge criteria ask for). A criterion's threshold is in
    its spec where every file agrees; the files' own thresholds are on each row. Its other
    fields (match_type, ...) and a judge criterion's threshold must agree between the files:
    one run computes a metric one way."""
    from evalbeam.metrics.catalog import get_metric  # start-up time: the metric modules where a criterion is read

    try:
        paths = sorted(m.path for m in FileSystems.match([uri])[0].metadata_list)
    except Exception:  # noqa: BLE001 - an unlistable uri: the input check (preflight) names it; ADK's defaults here
        paths = []
    configs = sorted({test_config_path(p) for p in paths}) or [None]
    found: dict[str, tuple[dict, set]] = {}
    judge: dict = {}
    unreadable: list[str] = []
    for config, path in ((c, next(p for p in paths if test_config_path(p) == c) if c else None) for c in configs):
        try:
            specs = criteria_of_file(path) if path else metrics_from_criteria(None)
        except ValueError as e:
            # ADK cannot judge this folder's files: read_adk dead-letters their cases naming the
            # test_config.json (docs/agents.md); the run is configured from the readable ones
            unreadable.append(str(e))
            continue
        if config and FileSystems.exists(config):
            asked = judge_options(json.loads(_read_text(config)).get("criteria"))
            for key, value in asked.items():
                if judge.setdefault(key, value) != value:
                    raise ValueError(f"{config}: its judge criteria ask for judge {key} {value!r}, another file's "
                                     f"{judge[key]!r}; evalbeam runs one judge: make them agree, or set judge.{key}")
        for spec in specs:
            other = {k: v for k, v in spec.items() if k != "threshold"}
            seen, thresholds = found.setdefault(spec["name"], (other, set()))
            if seen != other:
                raise ValueError(f"{config}: criterion {spec['name']} is given as {other.get('params') or {}} there "
                                 f"and as {seen.get('params') or {}} for another file; evalbeam computes a criterion "
                                 "one way in a run: make them agree, or set input.adk_criteria")
            thresholds.add(spec.get("threshold"))
    if unreadable and not found:  # no file could be judged: nothing to run
        raise ValueError(unreadable[0])
    out = []
    for name, (spec, thresholds) in found.items():
        if len(thresholds) > 1 and get_metric(name).is_judge:
            raise ValueError(f"the files' test_config.json give judge criterion {name} different thresholds "
                             f"({', '.join(map(str, sorted(thresholds)))}); per-file thresholds are for the rule-based "
                             "criteria: make them agree, or set input.adk_criteria")
        out.append({**spec, **({"threshold": thresholds.pop()} if len(thresholds) == 1 and None not in thresholds
                               else {})})
    return out, judge


def _with_adk_judge_options(data: dict, text: str) -> dict:
    """The judge criteria's judge_model_options (judge model, num_samples) as
    judge.model and judge.sampling_count, unless the config sets them."""
    try:
        options = judge_options(json.loads(text).get("criteria"))
    except ValueError as e:
        raise ValueError(f"input.adk_criteria: {e}") from None
    judge = dict(data.get("judge") or {})
    for key, value in options.items():
        judge.setdefault(key, value)
    return {**data, "judge": judge} if options else data


def user_simulator_from_adk(text: str) -> dict | None:
    """The user_simulator_config of an ADK test_config.json (EvalConfig), as ADK reads it: snake_case or
    camelCase key, a missing `type` taken as llm_backed (EvalConfig._inject_default_user_simulator_type)."""
    config = json.loads(text)
    value = get_key(config, "user_simulator_config") if isinstance(config, dict) else None
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("user_simulator_config must be an object")
    value = {k: v for k, v in value.items() if v is not None or k != "type"}
    if value.get("type", "llm_backed") != "llm_backed":
        raise ValueError(f"user_simulator_config: type {value['type']!r} is not supported (only llm_backed)")
    # ADK's config allows (and ignores) other keys (BaseUserSimulatorConfig: extra="allow")
    known = {name for field_name, f in UserSimulatorConfig.model_fields.items() for name in (field_name, f.alias)}
    return {k: v for k, v in value.items() if k in known}


def _with_adk_user_simulator(data: dict, text: str) -> dict:
    """The ADK config's user_simulator_config as inference.user_simulator, unless the config sets one."""
    try:
        simulator = user_simulator_from_adk(text)
    except ValueError as e:
        raise ValueError(f"input.adk_criteria: {e}") from None
    inference = data.get("inference")
    if simulator is None or not isinstance(inference, dict) or inference.get("user_simulator") is not None:
        return data
    return {**data, "inference": {**inference, "user_simulator": simulator}}


def _read_text(path: str) -> str:
    if not FileSystems.exists(path):
        raise OSError("the file does not exist")
    with FileSystems.open(path, mime_type="application/octet-stream") as f:
        return f.read().decode("utf-8")


# --- test_config.json -> metrics ---------------------------------------------

# ADK's criteria when no test_config.json is given (eval_config.py _DEFAULT_EVAL_CONFIG).
DEFAULT_CRITERIA = {"tool_trajectory_avg_score": 1.0, "response_match_score": 0.8}


_THRESHOLD = pydantic.TypeAdapter(float)


def _threshold(name: str, value: Any, what: str) -> float:
    """A threshold as ADK's EvalConfig reads it: pydantic's float in lax JSON mode (so "0.5" is
    0.5 and true is 1.0), read by pydantic itself."""
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"criteria.{name}: {what}")
    try:
        return _THRESHOLD.validate_json(json.dumps(value))
    except (pydantic.ValidationError, OverflowError, ValueError):
        raise ValueError(f"criteria.{name}: {what}") from None


def metrics_from_criteria(criteria: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Metric specs (as in an evalbeam config) for ADK criteria, as ADK's
    get_eval_metrics_from_config maps them: a bare number is the threshold; an
    object has a `threshold` and the criterion's own fields (e.g. match_type,
    ignore_args; snake_case or camelCase; other keys ignored, as ADK ignores
    them). ADK's defaults apply when `criteria`
    is None; the informational efficiency criteria are always added, and naming
    one is an error (ADK refuses a threshold on them). Raises ValueError."""
    from evalbeam.metrics.catalog import get_metric, is_refused  # start-up time: the metric modules where a criterion is read

    criteria = DEFAULT_CRITERIA if criteria is None else criteria
    if not isinstance(criteria, Mapping):
        raise ValueError("criteria must be an object of criterion name -> threshold or criterion object")
    specs = []
    for name, criterion in criteria.items():
        if name in INFORMATIONAL_CRITERIA:
            raise ValueError(f"criteria.{name}: {name} does not support a threshold: it reports a value and never "
                             "passes or fails (ADK reports it on every eval without being asked)")
        try:
            definition = get_metric(name)
        except KeyError as e:
            if is_refused(name):  # e names the criterion and why
                raise ValueError(f"criteria.{e.args[0]}") from None
            raise ValueError(f"criteria.{name}: this ADK criterion is not supported by evalbeam") from None
        if isinstance(criterion, dict):
            criterion = dict(criterion)
            threshold = _threshold(name, criterion.pop("threshold", None),
                                   "a criterion object needs a numeric 'threshold'")
            fields = definition.params.model_fields
            if "include_intermediate_responses_in_final" not in fields:
                # BaseCriterion's own field; only ADK's own judges (metrics.judge.adk_judges) read it
                criterion.pop("include_intermediate_responses_in_final", None)
                criterion.pop("includeIntermediateResponsesInFinal", None)
            spellings = {spelling: field for field in fields for spelling in (field, camel_case(field))}
            params = {}
            for key, value in criterion.items():
                # other keys are ignored, as ADK's criteria (extra="allow") ignore them
                if key in spellings:
                    params[spellings[key]] = value
            spec = {"name": name, "threshold": threshold}
            if params:
                spec["params"] = params
        else:
            spec = {"name": name, "threshold": _threshold(
                name, criterion, "expected a threshold (number) or a criterion object")}
        # json and ADK's EvalConfig take NaN and Infinity; against NaN ADK fails every case.
        # Refused here, naming the criterion: a NaN would fill the threshold column
        if not math.isfinite(spec["threshold"]):
            raise ValueError(f"criteria.{name}: the threshold {spec['threshold']} is not a finite number")
        specs.append(spec)
    return specs + [{"name": name} for name in INFORMATIONAL_CRITERIA]


# ADK's JudgeModelOptions defaults (eval_metrics.py): what a judge criterion without options uses.
ADK_JUDGE_MODEL, ADK_NUM_SAMPLES = "gemini-2.5-flash", 5
# ADK's judge criteria without JudgeModelOptions: ADK hands them to Vertex's evaluation service
# (safety_evaluator.py, response_evaluator.py), once per turn, so they ask for no model and no samples
ADK_UNSAMPLED_CRITERIA = ("evalbeam_safety_v1", "evalbeam_response_evaluation_score")


def judge_options(criteria: Mapping[str, Any] | None) -> dict[str, Any]:
    """The judge settings ADK's judge criteria ask for: {"model", "sampling_count"}
    from their `judge_model_options` (judge_model, num_samples; ADK's defaults where
    a judge criterion gives none), or {} when no criterion is a judge. evalbeam
    has one judge per run, so criteria asking for different ones are an error."""
    from evalbeam.metrics.catalog import get_metric  # start-up time: the metric modules where a criterion is read

    asked: dict[str, set] = {"model": set(), "sampling_count": set()}
    for name, criterion in (criteria or {}).items():
        try:
            if not get_metric(name).is_judge or name in ADK_UNSAMPLED_CRITERIA:
                continue
        except KeyError:
            continue
        options = {}
        if isinstance(criterion, dict):
            options = get_key(criterion, "judge_model_options") or {}
            if not isinstance(options, dict):
                raise ValueError(f"criteria.{name}.judge_model_options must be an object")
        model = get_key(options, "judge_model", ADK_JUDGE_MODEL)
        samples = get_key(options, "num_samples", ADK_NUM_SAMPLES)
        if not isinstance(model, str) or not model:
            raise ValueError(f"criteria.{name}.judge_model_options.judge_model must be a model name")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"criteria.{name}.judge_model_options.num_samples must be an integer >= 1")
        asked["model"].add(model)
        asked["sampling_count"].add(samples)
    out = {}
    for key, values in asked.items():
        if len(values) > 1:
            raise ValueError(f"the judge criteria ask for different judge_model_options ({key}: "
                             f"{', '.join(map(str, sorted(values)))}); evalbeam runs one judge: make them agree, "
                             f"or set judge.{key} in the config")
        if values:
            out[key] = values.pop()
    return out


def read_test_config(text: str) -> list[dict[str, Any]]:
    """Metric specs from the text of an ADK test_config.json (EvalConfig)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(config, dict):
        raise ValueError("must be a JSON object with 'criteria'")
    if config.get("custom_metrics") or config.get("customMetrics"):
        raise ValueError("custom_metrics: ADK custom metrics are not supported; use an evalbeam custom metric "
                         "(metrics: - name: ... function: package.module:function)")
    return metrics_from_criteria(config.get("criteria"))
