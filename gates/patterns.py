"""User regular expressions and JSON Schemas, run in bounded time and never over a network.

A gate file is read from the user, and what it checks comes from the recorded
command: neither may stall sealing. So:

- Every user regex (a schema's ``pattern`` and ``patternProperties``, the
  ``output-free-of`` check's ``patterns``) runs on RE2 (google-re2), whose
  matching time is linear in the input: ``^(a+)+$`` against a long ``aaaa…!``
  answers at once. A pattern RE2 cannot run
  (backreferences, lookaround) is refused when the gate file is loaded.
- A schema's ``$ref`` is never fetched: a reference that is not local to the
  schema (``#...``) is refused when the gate file is loaded, and the validators
  run with a registry that refuses any retrieval (an evaluation that reaches
  one anyway is inconclusive, never a network call).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["PatternError", "check_schema_safety", "compile_pattern", "schema_validator", "search", "simple_check"]

_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
#: RE2's memory budget for one compiled pattern (bytes): a bounded program, so bounded time and space.
MAX_MEM = 8 << 20


class PatternError(ValueError):
    """A regex the linear-time engine cannot run."""


@lru_cache(maxsize=512)
def compile_pattern(pattern: str | bytes) -> Any:
    """``pattern`` compiled by RE2 (a bytes pattern searches bytes); ``PatternError`` when RE2
    cannot express it."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_MEM
    try:
        return re2.compile(pattern, options)
    except Exception as exc:  # noqa: BLE001 - re2 raises its own error type (and TypeError, ValueError)
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PatternError(f"regex {pattern!r} cannot run in linear time (RE2: {detail})") from None


def search(pattern: str, text: str) -> bool:
    """``re.search`` semantics, in linear time.

    ``text`` may hold lone surrogates (bytes that were not UTF-8, as ``os.fsdecode``
    gives them); RE2 reads UTF-8 only, so each stands in as U+FFFD: one character,
    which a gate file's pattern (always UTF-8 text) can only match with a wildcard.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return compile_pattern(pattern).search(text) is not None


def _walk(node: Any, depth: int = 0) -> Iterator[tuple[str, Any, Mapping[str, Any]]]:
    """Every ``(key, value, owner)`` of every object in a JSON document (iteratively: no recursion limit)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, Mapping):
            for key, value in cur.items():
                yield str(key), value, cur
                stack.append(value)
        elif isinstance(cur, list):
            stack.extend(cur)


def check_schema_safety(schema: Mapping[str, Any]) -> None:
    """Refuse (``PatternError``) what could stall or reach out: remote references, patterns RE2
    cannot run, and ``unevaluatedProperties`` next to ``patternProperties`` (jsonschema would
    run those patterns on Python's backtracking engine)."""
    for key, value, owner in _walk(schema):
        if key in _REF_KEYS and isinstance(value, str) and not value.startswith("#"):
            raise PatternError(f"{key} {value!r} is not local to the schema: references are never fetched")
        if key == "pattern" and isinstance(value, str):
            compile_pattern(value)
        if key == "patternProperties" and isinstance(value, Mapping):
            for pattern in value:
                compile_pattern(str(pattern))
            if "unevaluatedProperties" in owner:
                raise PatternError("'unevaluatedProperties' next to 'patternProperties' is not supported")


def _refuse(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(uri)


def _pattern(validator: Any, patrn: str, instance: Any, _schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pattern_properties: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(e) for e in sorted(extras))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {', '.join(map(repr, patterns))}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, extras))} unexpected)")


@lru_cache(maxsize=1)
def _validator_class() -> Any:
    from jsonschema import Draft202012Validator, validators  # type: ignore[import-untyped]

    return validators.extend(
        Draft202012Validator,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """A Draft 2020-12 validator for ``schema`` whose regexes run on RE2 and which fetches nothing."""
    from referencing import Registry

    registry: Any = Registry(retrieve=_refuse)  # type: ignore[call-arg]
    return _validator_class()(schema, registry=registry)


#: Keywords that annotate and never change whether an instance is valid.
_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "default", "deprecated"})
_TOP_KEYS = frozenset({"type", "properties", "required", "additionalProperties"}) | _ANNOTATIONS
_PROPERTY_KEYS = frozenset({"type"}) | _ANNOTATIONS


def _is_type(name: str, value: Any) -> bool:
    """Draft 2020-12's ``type`` (jsonschema's draft202012 type checker): a bool is no number; 1.0 is an integer."""
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return not isinstance(value, bool) and (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        )
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, int | float)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "object":
        return isinstance(value, dict)
    return isinstance(value, list)  # "array" (no other name gets here)


_TYPE_NAMES = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})


def _type_names(spec: Any) -> tuple[str, ...] | None:
    names = (spec,) if isinstance(spec, str) else tuple(spec) if isinstance(spec, list) else None
    if not names or not all(isinstance(n, str) and n in _TYPE_NAMES for n in names):
        return None
    return names


def simple_check(schema: Mapping[str, Any]) -> Any:
    """For the common shape of a receipt schema, a fast test that proves an instance valid; else None.

    The shape: an object with ``properties`` whose subschemas give only ``type``, ``required``,
    ``additionalProperties`` true or false (and annotations). The returned function answers True
    only when the full validator would find no error, and False when it cannot tell cheaply (the
    caller then runs the full validator, for the verdict and its messages). Any other schema: None.
    """
    if not isinstance(schema, Mapping) or not set(schema) <= _TOP_KEYS:
        return None
    if "type" in schema and schema["type"] != "object":
        return None
    extra = schema.get("additionalProperties", True)
    required = schema.get("required", [])
    props = schema.get("properties", {})
    if not isinstance(extra, bool) or not isinstance(required, list) or not isinstance(props, Mapping):
        return None
    if not all(isinstance(r, str) for r in required):
        return None
    types: dict[str, tuple[str, ...] | None] = {}
    for key, sub in props.items():
        if not isinstance(key, str) or not isinstance(sub, Mapping) or not set(sub) <= _PROPERTY_KEYS:
            return None
        if "type" in sub:
            names = _type_names(sub["type"])
            if names is None:
                return None
            types[key] = names
        else:
            types[key] = None
    need = tuple(required)

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return False
        for key in need:
            if key not in value:
                return False
        for key, item in value.items():
            if key in types:
                names = types[key]
                if names is not None and not any(_is_type(n, item) for n in names):
                    return False
            elif not extra:
                return False
        return True

    return check
