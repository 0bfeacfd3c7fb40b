"""Run with the reference ADK venv (.adk/bin/python): prints, as JSON, the key
table of every pydantic model an ADK EvalSet file or EvalSetResult file is
validated against (google.adk.evaluation.eval_set.EvalSet,
google.adk.evaluation.eval_result.EvalSetResult and every model reachable from
them, google.genai's types and ADK's Session and Event included): per model, its `extra` policy and each field's
name, alias and value type. tests/transforms/test_adk_files.py compares it with
evalbeam's own table (transforms/adk_models.py), so a change of ADK's
models is caught.

Type expressions: null (no model inside), "Model", ["list", T], ["dict", T]
(values), ["tuple", T...], ["union", T...].
"""
import json
import sys
import types
import typing

import pydantic
from google.adk.evaluation.eval_result import EvalSetResult
from google.adk.evaluation.eval_set import EvalSet

MODELS: dict[str, dict] = {}


def type_of(annotation):
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_of(args[0])
    if origin in (typing.Union, types.UnionType):
        members = [type_of(a) for a in args if a is not type(None)]
        members = [m for i, m in enumerate(members) if m is not None and m not in members[:i]]
        if not members:
            return None
        return members[0] if len(members) == 1 else ["union", *members]
    if origin in (list, set, frozenset, typing.Sequence) or annotation in (list,):
        inner = type_of(args[0]) if args else None
        return ["list", inner] if inner is not None else None
    if origin is dict:
        inner = type_of(args[1]) if len(args) == 2 else None
        return ["dict", inner] if inner is not None else None
    if origin is tuple:
        inner = [type_of(a) for a in args if a is not Ellipsis]
        return ["tuple", *inner] if any(i is not None for i in inner) else None
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        add(annotation)
        return annotation.__name__
    return None


def add(model: type[pydantic.BaseModel]) -> None:
    name = model.__name__
    if name in MODELS:
        if MODELS[name]["module"] != model.__module__:
            sys.exit(f"two models named {name}")
        return
    entry = {"module": model.__module__, "extra": model.model_config.get("extra") or "ignore", "fields": {}}
    MODELS[name] = entry
    for field_name, info in model.model_fields.items():
        alias = info.validation_alias or info.alias
        if alias is not None and not isinstance(alias, str):
            sys.exit(f"{name}.{field_name}: a validation alias that is not a string")
        entry["fields"][field_name] = {"alias": alias if alias != field_name else None,
                                       "type": type_of(info.annotation)}


add(EvalSet)
add(EvalSetResult)
json.dump({k: MODELS[k] for k in sorted(MODELS)}, sys.stdout, indent=1, sort_keys=True)
