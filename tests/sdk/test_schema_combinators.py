"""Random schemas of combinators (not, oneOf, anyOf, allOf, if/then/else) over keywords of
every type: wherever a schema compiles, the grammar decides each value of a fixed pool of
values of every type as jsonschema does (nothing accepted that is invalid, nothing valid
rejected)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from surecall.schema import UnsupportedSchemaError, grammar_from_schema
from surecall.validation import validator_for_schema

VALUES = [
    None, True, False, 0, 1, 2, 3, -1, 2.5, -0.5, "", "a", "ab", "abc", "ba", "1.2.3.4", "2024-01-31", "é",
    [], [1], ["a"], [1, "a"], [1, 1], [[]], {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}, {"c": []},
    {"ab": "x", "c": 1}, {"b": "y", "a": 2},
]

_counts = st.integers(0, 2)
_numbers = st.sampled_from([0, 1, 2, 2.5])

_leaf_keywords = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "number", "array", "object", "null", ["string", "null"]])),
    st.builds(lambda v: {"enum": v}, st.lists(st.sampled_from([None, 1, 2.5, "a", "ab", True, [1], [1, "a"], {"a": 1}, {}]), min_size=1, max_size=3)),
    st.builds(lambda k, n: {k: n}, st.sampled_from(["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]), _counts),
    st.builds(lambda k, n: {k: n}, st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), _numbers),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "^[a-c]+$", "\\."])),
    st.builds(lambda m: {"multipleOf": m}, st.sampled_from([2, 5, 0.1])),
    st.builds(lambda f: {"format": f}, st.sampled_from(["ipv4", "date"])),
    st.builds(lambda names: {"required": names}, st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)),
    st.builds(lambda t: {"additionalProperties": {"type": t}}, st.sampled_from(["integer", "string"])),
    st.builds(lambda p, t: {"patternProperties": {p: {"type": t}}}, st.sampled_from(["^a", "b"]), st.sampled_from(["integer", "string"])),
    st.builds(lambda key, names: {"dependentRequired": {key: names}}, st.sampled_from(["a", "b"]), st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)),
    st.builds(lambda names: {"propertyNames": names}, st.sampled_from([{"maxLength": 1}, {"pattern": "^a"}, {"enum": ["a", "c"]}])),
)


def _with_children(children):
    return st.one_of(
        st.builds(lambda s: {"not": s}, children),
        st.builds(lambda ss: {"oneOf": ss}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda ss: {"anyOf": ss}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda ss: {"allOf": ss}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda c, t, e: {"if": c, "then": t, "else": e}, children, children, children),
        st.builds(lambda s: {"items": s}, children),
        st.builds(lambda s: {"contains": s}, children),
        st.builds(lambda name, s: {"properties": {name: s}}, st.sampled_from(["a", "b"]), children),
        st.builds(lambda s, extra: {"properties": {"a": s}, "additionalProperties": extra}, children, st.one_of(st.just(False), children)),
        st.builds(lambda s: {"patternProperties": {"^[ab]": s}}, children),
        st.builds(lambda s: {"dependentSchemas": {"a": s}}, children),
    )


schemas = st.recursive(
    st.lists(_leaf_keywords, min_size=1, max_size=2).map(lambda parts: {k: v for part in parts for k, v in part.items()}),
    _with_children,
    max_leaves=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(schema=schemas)
# Negated keywords narrow types the validator's schemas do not spell: enum values must meet them.
@example(schema={"oneOf": [{"items": {"type": "integer"}}, {"items": {"enum": [1]}}]})
@example(schema={"items": {"enum": [1, 2.5, "a"]}, "not": {"items": {"type": "integer"}}})
def test_random_combinator_schemas_decide_values_as_jsonschema_does(schema):
    try:
        grammar = grammar_from_schema(schema, property_order="any")
    except UnsupportedSchemaError:
        return  # reported, never relaxed: nothing to decide
    validator = validator_for_schema(schema)
    wrong = [
        value for value in VALUES
        if grammar.accepts(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) != validator.is_valid(value)
    ]
    assert not wrong, f"{json.dumps(schema)} decides {wrong} differently from jsonschema"
