"""Custom metrics: a user function named by import path ``package.module:function``.

The function receives the instance's canonical fields as a dict and returns
``{metric_name: score, other_key: value, ...}``: the first key is the score,
the others are kept as extra values.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable

from evalbeam.metrics.registry import MetricError, MetricValue


def function_path(path: str) -> tuple[str, str]:
    """(module, attribute) of 'package.module:function'; ValueError when it is not of that form."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not of the form 'package.module:function'")
    return module_name, attr


def path_hint(module_name: str, error: BaseException) -> str:
    """For a user's module that is not found: how to make it importable. The `evalbeam` command
    does not put the current folder on Python's path, as `python -m` or `python script.py` would."""
    if not isinstance(error, ModuleNotFoundError):
        return ""
    top = module_name.split(".")[0]
    if error.name != top:
        return ""  # its package was found (a submodule or something it imports was not)
    here = os.getcwd()
    if os.path.exists(os.path.join(here, f"{top}.py")) or os.path.isdir(os.path.join(here, top)):
        return (f" ({top!r} is in the current folder, which the evalbeam command does not put on Python's path: "
                "run it with PYTHONPATH=. before it, or install your package)")
    return " (it must be importable: install it, or put its folder on PYTHONPATH)"


def load_function(path: str) -> Callable[[dict[str, Any]], Any]:
    module_name, attr = function_path(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r}: {e}{path_hint(module_name, e)}") from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ValueError(f"{path!r} is not callable")
    return fn


def custom_scorer(path: str):
    fn = load_function(path)

    def score(fields):
        result = fn(dict(fields))
        if not isinstance(result, dict) or not result:
            raise MetricError(f"{path} must return a non-empty dict, got {type(result).__name__}")
        items = iter(result.items())
        _, value = next(items)
        extra = dict(items)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MetricError(f"{path} returned a non-numeric score {value!r}")
        return MetricValue(float(value), extra=extra or None)

    return score
