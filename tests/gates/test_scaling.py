"""Gate evaluation scales with the stream: each receipt costs the same however many there are.

Counted, never timed: the work per receipt (field lookups, step lookups, full schema
validations) must not grow with the number of receipts and steps. And the quick paths
that make it so (the `each` index, the quick schema test) decide exactly as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gates import engine, patterns
from gates.engine import evaluate
from gates.evidence import Evidence
from gates.language import parse_gate_text
from gates.patterns import schema_validator, simple_check
from gates.testing import SyntheticStream

GATE = """
[gate]
name = "t"

[[receipt]]
name = "test"
min = 1
max = 100000
step = "unit"
[receipt.schema]
type = "object"
required = ["case"]
properties = { case = { type = "string" }, ms = { type = "integer" } }

[[each]]
receipt = "test"
needs = "result"
on = ["case"]
"""


def lane(steps: int) -> SyntheticStream:
    """``steps`` steps, each with 4 ``test`` receipts and their ``result`` receipts inside."""
    s = SyntheticStream()
    case = 0
    for i in range(steps):
        span = f"unit-{i}"
        s.add("step.start", {"name": "unit", "argv": ["pytest"]}, step=span)
        for _ in range(4):
            case += 1
            s.receipt("test", step=span, case=f"c{case}", ms=case)
            s.receipt("result", step=span, case=f"c{case}")
        s.add("step.end", {"name": "unit", "argv": ["pytest"], "exit_code": 0, "duration_ns": 1}, step=span)
    s.exit(0)
    return s


def counted(monkeypatch: pytest.MonkeyPatch, steps: int) -> dict[str, int]:
    """How often the per-receipt work ran while evaluating ``GATE`` over ``lane(steps)`` (all pass)."""
    calls = {"field": 0, "validate": 0, "span": 0}
    field, errors = engine._field, engine._errors

    def count_field(obj: Any, path: str) -> Any:
        calls["field"] += 1
        return field(obj, path)

    def count_errors(validator: Any, value: Any) -> list[str]:
        calls["validate"] += 1
        return errors(validator, value)

    monkeypatch.setattr(engine, "_field", count_field)
    monkeypatch.setattr(engine, "_errors", count_errors)
    ev = Evidence(lane(steps).events())
    span_of = ev.step_of_span

    def count_span(span: str | None) -> Any:
        calls["span"] += 1
        return span_of(span)

    monkeypatch.setattr(ev, "step_of_span", count_span)
    verdict = engine.evaluate_evidence(parse_gate_text(GATE, "t.toml"), ev)
    assert "pass" == verdict.verdict, verdict.summary
    return calls


def test_work_per_receipt_does_not_grow_with_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten times the receipts is ten times the field lookups, not a hundred (the `each` rule used to
    compare every receipt with every other), and a receipt that fits the quick schema test never
    runs the full validator."""
    small, large = counted(monkeypatch, 20), counted(monkeypatch, 200)
    assert large["field"] <= 12 * small["field"], (small, large)
    assert 0 == large["validate"]
    assert large["span"] <= 12 * small["span"]


def test_each_index_keeps_python_equality() -> None:
    """`on` values that compare equal still match through the index: 1, 1.0 and true; lists; objects."""
    gate = parse_gate_text(
        '[gate]\nname = "t"\n[[each]]\nreceipt = "a"\nneeds = "b"\non = ["k"]\n',
        "t.toml",
    )
    for left, right, expected in [
        (1, 1.0, "pass"),
        (1, True, "pass"),
        ([1, {"x": [2]}], [1, {"x": [2]}], "pass"),
        ({"p": 1, "q": 2}, {"q": 2, "p": 1}, "pass"),
        ([1, 2], [2, 1], "inconclusive"),
        ("1", 1, "inconclusive"),
        ({"p": 1}, {"p": 1, "q": 2}, "inconclusive"),
    ]:
        s = SyntheticStream()
        s.receipt("a", k=left)
        s.receipt("b", k=right)
        s.exit(0)
        assert expected == evaluate(gate, s.events()).verdict, (left, right)


def test_quick_schema_test_only_for_the_simple_shape() -> None:
    """A schema with anything the quick test does not implement gets none (the full validator decides)."""
    assert simple_check({"type": "object", "properties": {"a": {"type": "integer"}}}) is not None
    assert simple_check({"properties": {"a": {}}, "additionalProperties": False, "title": "x"}) is not None
    schemas: list[dict[str, Any]] = [
        {"type": "array"},
        {"properties": {"a": {"type": "integer", "minimum": 0}}},
        {"properties": {"a": {"type": "decimal"}}},
        {"properties": {"a": {"$ref": "#/$defs/x"}}},
        {"patternProperties": {"^a": {}}},
        {"additionalProperties": {"type": "string"}},
        {"required": "a"},
        {"$schema": "https://json-schema.org/draft/2020-12/schema"},
    ]
    for schema in schemas:
        assert simple_check(schema) is None, schema


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 1.5, -2.0]) | st.text(max_size=2),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("abc"), inner, max_size=2),
    max_leaves=4,
)
TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])
PROPERTY = st.fixed_dictionaries({}, optional={"type": TYPES | st.lists(TYPES, min_size=1, max_size=3, unique=True)})
SCHEMA = st.fixed_dictionaries(
    {},
    optional={
        "type": st.just("object"),
        "properties": st.dictionaries(st.sampled_from("abc"), PROPERTY, max_size=3),
        "required": st.lists(st.sampled_from("abcd"), max_size=3, unique=True),
        "additionalProperties": st.booleans(),
        "description": st.text(max_size=3),
    },
)


@settings(max_examples=400, deadline=None)
@given(SCHEMA, JSON | st.dictionaries(st.sampled_from("abcd"), JSON, max_size=4))
def test_quick_schema_test_never_passes_what_the_validator_fails(schema: dict[str, Any], value: Any) -> None:
    """Whenever the quick test says valid, the full validator finds no error; for an object it
    decides exactly as the validator does (a forged receipt cannot pass through the quick path)."""
    check = simple_check(schema)
    assert check is not None
    valid = not list(schema_validator(schema).iter_errors(value))
    if check(value):
        assert valid, (schema, value)
    elif isinstance(value, dict):
        assert not valid, (schema, value)


def test_quick_schema_test_types_as_draft_2020_12() -> None:
    """A bool is no integer nor number; 2.0 is an integer; 2.5 only a number."""
    cases: list[tuple[Any, str, bool]] = [
        (True, "integer", False),
        (True, "number", False),
        (2.0, "integer", True),
        (2.5, "integer", False),
    ]
    cases += [(2.5, "number", True), (None, "null", True), ([], "object", False), ({}, "object", True)]
    for value, name, ok in cases:
        schema = {"properties": {"a": {"type": name}}}
        check = simple_check(schema)
        assert check is not None
        assert ok == check({"a": value}), (value, name)
        assert ok == (not list(schema_validator(schema).iter_errors({"a": value})))
    assert patterns._is_type("array", [])
    assert not patterns._is_type("array", {})
