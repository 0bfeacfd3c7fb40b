"""A config file read: YAML, then the `--set` overrides, then its relative paths taken from
its folder, then ADK's expansion (configs.adk_expansion) and the schema (configs.schema).

Reads the file (local or on Cloud Storage) and, for ADK inputs, ADK's test_config.json files;
nothing here imports user code or an optional package (pipelines.preflight checks those).
"""
from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

import pydantic
import yaml

from evalbeam.configs.schema import ConfigError, EvalConfig, format_errors


def validate_config(data: Any) -> EvalConfig:
    """A config given as a mapping (a YAML file's, with its overrides and paths applied), with
    what its ADK inputs imply (expand_adk), validated by the schema. Raises
    pydantic.ValidationError naming each bad field, as EvalConfig.model_validate does (an error
    of ADK's files at the top level)."""
    # start-up time: Beam and ADK's reader (the expansion reads files) only where a config is validated
    from evalbeam.configs.adk_expansion import expand_adk

    try:
        data, per_file = expand_adk(data)
    except ValueError as e:
        raise pydantic.ValidationError.from_exception_data(
            EvalConfig.__name__, [{"type": "value_error", "loc": (), "input": data, "ctx": {"error": e}}]) from None
    return EvalConfig.model_validate(data).note_origin(criteria_per_file=per_file)


class _Loader(yaml.SafeLoader):
    """YAML as safe_load reads it, but a date-like scalar stays text: the config's
    one date (run_date) is parsed by its field, which names it when it is not a
    date (`2026-02-30`), and a string field keeps what was typed. (PyYAML builds
    a date object as it reads, and raises a bare ValueError on an impossible one.)"""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def _override_value(text: str) -> Any:
    """A --set value: YAML (numbers, lists, mappings...), else the text as typed
    (`*.jsonl` or `%x` are not valid YAML, and are meant as text)."""
    if not text:
        return ""
    try:
        return _yaml(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` (value parsed as YAML, else text; list items by index)."""
    for item in overrides:
        path, sep, text = item.partition("=")
        if not sep or not path:
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE")
        _set_path(raw, path, _override_value(text))
    return raw


def _set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    """Set the value at a dotted path (list items by index), creating mappings on the way."""
    node: Any = raw
    parts = path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {path}: {'.'.join(parts[:i])} has no item {part}")
            if last:
                node[int(part)] = value
            else:
                if isinstance(node[int(part)], str):  # a metric given by name only
                    node[int(part)] = {"name": node[int(part)]}
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise ConfigError(f"--set {path}: {'.'.join(parts[:i])} is not a mapping")


# The paths a config file names, each (section, field): a relative local one is taken
# relative to the config file's folder, so that a config means the same files wherever it is
# run from. (judge.cache and judge.rubrics_from hold one location or a list of them.)
PATH_FIELDS = (("input", "uri"), ("input", "adk_criteria"), ("output", "parquet"), ("output", "adk_eval_history"),
               ("output", "otel_events"), ("judge", "cache"), ("judge", "rubrics_from"), ("failure_modes", "taxonomy"),
               ("failure_modes", "taxonomies_from"), ("output", "eval_set"), ("scenarios", "seeds"),
               ("scenarios", "pinned_from"), ("red_team", "attacks"), ("red_team", "attacks", "generate", "attacks_from"))


def _config_folder(path: str) -> str:
    """The folder of the config file, as the path names it ('' for one in the current folder)."""
    from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only where a config file is read

    if FileSystems.get_scheme(path) is None:
        return os.path.dirname(path)
    return path.rsplit("/", 1)[0] if "/" in path.split("://", 1)[1] else path


def relative_to(folder: str, value: Any) -> Any:
    """`value` taken relative to `folder`, if it is a relative local path (a URL, an
    absolute path or a non-text value is kept); a trailing / stays."""
    from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only where a config file is read

    if not folder or not isinstance(value, str) or not value or os.path.isabs(value) or \
            FileSystems.get_scheme(value) is not None:
        return value
    if FileSystems.get_scheme(folder) is None:
        joined = os.path.normpath(os.path.join(folder, value))
    else:  # gs://bucket/evals + data/x.jsonl: the path within the bucket normalised, its scheme and bucket kept
        scheme, rest = folder.split("://", 1)
        bucket, _, within = rest.partition("/")
        joined = f"{scheme}://{bucket}/" + posixpath.normpath(posixpath.join(within, value)).lstrip("/")
    return joined + "/" if value.endswith("/") and not joined.endswith("/") else joined


def resolve_paths(raw: dict[str, Any], folder: str) -> dict[tuple[str, ...], str]:
    """Make the relative local paths of a config file's PATH_FIELDS relative to its folder,
    in place; returns what was changed: field path -> the value as written."""
    changed = {}
    for *sections, field in PATH_FIELDS:
        node = raw
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if not isinstance(node, dict) or field not in node:
            continue
        values = node[field]
        for i, value in enumerate(values if isinstance(values, list) else [values]):
            resolved = relative_to(folder, value)
            if resolved == value:
                continue
            if isinstance(values, list):
                values[i] = resolved
                changed[(*sections, field, str(i))] = value
            else:
                node[field] = resolved
                changed[(*sections, field)] = value
    return changed


def _value_at(raw: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if isinstance(raw, dict):
            raw = raw.get(part)
        elif isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        else:
            return None
    return raw


def load_config(path: str | Path, overrides: list[str] | None = None) -> EvalConfig:
    """The config file at `path` (local or gs://) with the `--set` overrides applied.
    A relative local path in the file (PATH_FIELDS) is relative to the file's folder;
    one given in an override is taken as typed (relative to the current folder)."""
    from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only where a config file is read

    path = str(path)
    try:
        with FileSystems.open(path, mime_type="application/octet-stream") as f:
            raw = _yaml(f.read().decode("utf-8"))
    except (FileNotFoundError, IOError) as e:
        if not FileSystems.exists(path):
            raise ConfigError(f"config file {path!r} does not exist") from None
        raise ConfigError(f"cannot read config file {path!r}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    folder = _config_folder(path)
    resolved = {loc: (written, _value_at(raw, loc)) for loc, written in resolve_paths(raw, folder).items()}
    raw = apply_overrides(raw, overrides or [])
    # the notes errors give: for the paths that came from the file (an override replaces its note)
    notes = {".".join(loc): (written, folder or ".") for loc, (written, value) in resolved.items()
             if _value_at(raw, loc) == value}
    try:
        return validate_config(raw).note_origin(config_file=path, relative_paths=notes, overrides=overrides or [])
    except pydantic.ValidationError as e:
        error = e
    # A string field set with --set takes the text as typed (`--set run_id=20261122`
    # is YAML for a number): put those values back as text and validate once more.
    typed = {tuple(o.partition("=")[0].split(".")): o.partition("=")[2] for o in overrides or []}
    as_text = [loc for loc in (tuple(map(str, err["loc"])) for err in error.errors() if err["type"] == "string_type")
               if loc in typed]
    if as_text:
        for loc in as_text:
            _set_path(raw, ".".join(loc), typed[loc])
        try:
            return validate_config(raw).note_origin(config_file=path, relative_paths=notes, overrides=overrides or [])
        except pydantic.ValidationError as e:
            error = e
    raise ConfigError(f"{path}: invalid config\n{format_errors(error)}") from None
