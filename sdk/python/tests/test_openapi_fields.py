"""The SDK's models against the native API's OpenAPI document
(api/openapi.yaml): every field a schema of a result, record or frame
defines is a field of the SDK class that models it, every SDK field is the
schema's or named here as the SDK's own, an SDK field is Optional exactly
where the document lets the value be null (the SDK may be more lenient:
fields newer than the published API default to None, for older daemons),
and the field's Python type is the schema's JSON type. The reasons a run can end are the
document's. Pure: reads the document, starts nothing."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple, Type

import pytest
import yaml

import kernelbridge
from kernelbridge import types as kbtypes

DOCUMENT = Path(__file__).resolve().parents[3] / "api" / "openapi.yaml"

# SDK class, the document's schema (a component, or a path to an inline
# one), the SDK's own fields (not the daemon's JSON), and the schema's
# fields the SDK does not model (each with why).
MODELS: List[Tuple[Type[Any], Tuple[str, ...], Set[str], Dict[str, str]]] = [
    (kbtypes.InterpreterResult, ("InterpreterResult",), set(), {}),
    (kbtypes.InterpreterProcess, ("ProcessOutcome",), set(), {}),
    (kbtypes.InterpreterOutput, ("Output",), set(), {}),
    (kbtypes.InterpreterError, ("ExecutionError",), set(), {}),
    (kbtypes.InterpreterLogs, ("InterpreterResult", "logs"), set(), {}),
    (kbtypes.RunResources, ("RunResources",), set(), {}),
    (kbtypes.ContextResources, ("ContextResources",), set(), {}),
    (kbtypes.LogFrame, ("LogFrame",), set(), {}),
    (kbtypes.ProcessRecord, ("Process",), set(), {}),
    (kbtypes.ProcessStatus, ("WaitState",), {"process_id"}, {}),
    (kbtypes.ForkOrigin, ("ForkedFrom",), set(), {}),
    (kbtypes.RestoreOrigin, ("RestoredFrom",), set(), {}),
    (kbtypes.Checkpoint, ("Checkpoint",), {"sandbox_id"}, {}),
    (
        kbtypes.AsyncInterpreterContext,
        ("Context",),
        set(),
        {
            name: "operational detail, read with get_context's raw JSON"
            for name in (
                "kernel_name", "kernel_id", "connections", "dropped_messages", "cwd", "state",
                "created_at", "last_activity_at", "execution_count", "pid", "default", "heartbeat",
            )
        },
    ),
]

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
              list: "array", dict: "object"}


@pytest.fixture(scope="module")
def document() -> Dict[str, Any]:
    with open(DOCUMENT, encoding="utf-8") as f:
        loaded: Dict[str, Any] = yaml.safe_load(f)
    return loaded


def _schema(document: Dict[str, Any], where: Tuple[str, ...]) -> Dict[str, Any]:
    schema: Dict[str, Any] = document["components"]["schemas"][where[0]]
    for name in where[1:]:
        schema = schema["properties"][name]
    return schema


def _resolve(document: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    ref = schema.get("$ref")
    return _resolve(document, document["components"]["schemas"][ref.rsplit("/", 1)[1]]) if ref else schema


def _json_types(document: Dict[str, Any], schema: Dict[str, Any]) -> Set[str]:
    """The JSON types a schema allows (empty: any)."""
    schema = _resolve(document, schema)
    if "oneOf" in schema:
        return set().union(*(_json_types(document, s) for s in schema["oneOf"]))
    if "const" in schema:
        return {JSON_TYPES[type(schema["const"])]}
    kind = schema.get("type")
    if kind is None:
        return {"string"} if "enum" in schema else set()
    return set(kind) if isinstance(kind, list) else {kind}


def _python_types(hint: Any) -> Tuple[Set[str], bool]:
    """The JSON types a field's annotation reads, and whether it is Optional
    (empty set: any value)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        args = typing.get_args(hint)
        optional = type(None) in args
        found: Set[str] = set()
        for arg in args:
            if arg is not type(None):
                kinds, _ = _python_types(arg)
                if not kinds:
                    return set(), optional
                found |= kinds
        return found, optional
    if hint is Any:
        return set(), True
    if origin in (list, List):
        return {"array"}, False
    if origin in (dict, Dict, typing.Mapping) or hint in (dict, Dict):
        return {"object"}, False
    if isinstance(hint, type) and issubclass(hint, kbtypes.WaitReason):
        return {"string"}, False
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return {"object"}, False
    if typing.is_typeddict(hint):
        return {"object"}, False
    for python, json_type in JSON_TYPES.items():
        if hint is python:
            return {"number", "integer"} if python is float else {json_type}, False
    return set(), True  # a JSON value of any kind (JsonValue)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m[0].__name__)
def test_fields_match_the_document(document: Dict[str, Any], model: Any) -> None:
    cls, where, sdk_only, not_modelled = model
    schema = _schema(document, where)
    properties: Dict[str, Any] = schema["properties"]
    hints = typing.get_type_hints(cls, vars(kbtypes))
    fields = {f.name for f in dataclasses.fields(cls)}

    missing = set(properties) - fields - set(not_modelled)
    assert not missing, "%s lacks the document's fields %s" % (cls.__name__, sorted(missing))
    extra = fields - set(properties) - sdk_only
    assert not extra, "%s has fields the document does not: %s" % (cls.__name__, sorted(extra))
    assert not set(not_modelled) & fields, "named as not modelled but modelled"
    assert not set(not_modelled) - set(properties), "named as not modelled but not the document's"

    for name in fields & set(properties):
        wanted = _json_types(document, properties[name])
        kinds, optional = _python_types(hints[name])
        if "null" in wanted:
            assert optional, "%s.%s: the document allows null, the SDK's type %s does not" % (
                cls.__name__, name, hints[name])
        if kinds and wanted - {"null"}:
            assert kinds & (wanted - {"null"}), "%s.%s: %s in the SDK, %s in the document" % (
                cls.__name__, name, sorted(kinds), sorted(wanted))


def test_reasons_match_the_document(document: Dict[str, Any]) -> None:
    assert [r.value for r in kernelbridge.WaitReason] == document["components"]["schemas"]["Reason"]["enum"]


def test_error_codes_are_the_document(document: Dict[str, Any]) -> None:
    """Every error code the document lists has a typed exception in the SDK."""
    codes = document["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    from kernelbridge import errors

    assert set(codes) <= set(errors._BY_CODE), sorted(set(codes) - set(errors._BY_CODE))
    for code in codes:
        assert errors.error_class(code) is not errors.KernelBridgeError, code
