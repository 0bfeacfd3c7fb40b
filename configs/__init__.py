"""An evalbeam config: its typed model (schema), ADK's expansion of it (adk_expansion), and its
loading from YAML with --set overrides and paths relative to the file (load).

Importing this package imports neither Beam nor the transforms: the schema checks a config's
shape; what the environment must provide (files, credentials, the user's code, optional
packages) is checked by pipelines.preflight.
"""
from evalbeam.configs.load import PATH_FIELDS, apply_overrides, load_config, relative_to, resolve_paths, validate_config
from evalbeam.configs.schema import (
    DEFAULT_MAX_DEAD_LETTER_SHARE,
    INFERENCE_KINDS,
    ConfigError,
    EvalConfig,
    InferenceConfig,
    InputConfig,
    MetricSpec,
    OutputConfig,
    UserSimulatorConfig,
    format_errors,
)

__all__ = [
    "DEFAULT_MAX_DEAD_LETTER_SHARE", "INFERENCE_KINDS", "PATH_FIELDS", "ConfigError", "EvalConfig", "InferenceConfig",
    "InputConfig", "MetricSpec", "OutputConfig", "UserSimulatorConfig", "apply_overrides", "format_errors",
    "load_config", "relative_to", "resolve_paths", "validate_config",
]
