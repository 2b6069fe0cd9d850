"""Random schemas of combinators (not, oneOf, anyOf, allOf, if/then/else) over keywords of
every type: wherever a schema compiles, the grammar decides each value of a fixed pool of
values of every type as jsonschema does (nothing accepted that is invalid, nothing valid
rejected)."""

from __future__ import annotations

import json

import pytest
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
    st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "^[a-c]+$", "\\.", "^a$", "^x$"])),
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
# A key that requires itself is one required member, not two past maxProperties.
@example(schema={"maxProperties": 1, "dependentRequired": {"a": ["a"]}})
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


def _decides_as_jsonschema(schema, values):
    grammar = grammar_from_schema(schema)
    validator = validator_for_schema(schema)
    return [
        value for value in values
        if grammar.accepts(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) != validator.is_valid(value)
    ]


_KINDS = [f"Kind{i}" for i in range(12)]


def test_a_union_tagged_by_literal_patterns_behind_refs_compiles_as_a_plain_union():
    # Twelve branches kept exclusive by negating the others would expand to far more than
    # the alternatives allowed; the tags (one literal each) tell them apart.
    schema = {
        "type": "object",
        "additionalProperties": {"oneOf": [{"$ref": f"#/definitions/{kind}"} for kind in _KINDS]},
        "definitions": {
            kind: {
                "type": "object",
                "properties": {"type": {"type": "string", "pattern": f"^{kind}$"}, "size": {"type": "integer"}},
                "required": ["type"],
                "additionalProperties": False,
            }
            for kind in _KINDS
        },
    }
    values = [{}, {"m": {"type": "Kind3"}}, {"m": {"type": "Kind11", "size": 2}}, {"m": {"type": "Kind12"}},
              {"m": {"type": "Kind3x"}}, {"m": {"size": 1}}, {"m": {"type": "Kind3", "other": 1}}, {"m": "Kind3"}]
    assert not _decides_as_jsonschema(schema, values)


def test_a_tag_the_enclosing_object_requires_tells_the_branches_apart():
    # The branches leave "kind" optional; the object around them requires it.
    schema = {
        "type": "object",
        "required": ["kind"],
        "allOf": [{"oneOf": [{"type": "object", "properties": {"kind": {"enum": [kind]}, "n": {"type": "integer"}}}
                             for kind in _KINDS]}],
    }
    values = [{"kind": "Kind0"}, {"kind": "Kind7", "n": 1}, {"kind": "Kind7", "n": "x"}, {"kind": "other"}, {}, {"n": 1}]
    assert not _decides_as_jsonschema(schema, values)


def test_branches_an_untagged_object_meets_stay_exclusive():
    # Neither branch requires "kind": {} meets both, so oneOf refuses it.
    schema = {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}},
                        {"type": "object", "properties": {"kind": {"const": "b"}}}]}
    values = [{}, {"kind": "a"}, {"kind": "b"}, {"kind": "c"}, {"other": 1}]
    assert not _decides_as_jsonschema(schema, values)
    assert not grammar_from_schema(schema).accepts("{}")


def test_only_an_anchored_pattern_of_plain_characters_is_one_literal():
    from surecall.schema_flatten import literal_of_pattern

    assert literal_of_pattern("^Abs$") == "Abs"
    assert literal_of_pattern("^a\\.b-c/d$") == "a.b-c/d"
    assert literal_of_pattern("^\\$$") == "$"
    assert literal_of_pattern("^$") == ""
    for pattern in ("^a.b$", "^Abs", "Abs$", "^a|b$", "^\\d$", "^a\\$", "^a+$", "^(a)$", "^[a]$", None, 3):
        assert literal_of_pattern(pattern) is None, pattern


def test_a_ref_cycle_that_never_reaches_a_value_is_refused_at_once():
    # Checking a value against x checks the same value against y, which checks it against
    # x: a validator loops forever. Followed to the depth limit, every level looked through
    # the oneOfs' $refs again, exponentially: this one ran for minutes.
    schema = {
        "$defs": {
            "x": {"oneOf": [{"$ref": "#/$defs/y"}, {"type": "string"}, {"const": 1}]},
            "y": {"oneOf": [{"$ref": "#/$defs/x"}, {"type": "integer"}, {"type": "null"}]},
        },
        "$ref": "#/$defs/x",
    }
    with pytest.raises(UnsupportedSchemaError, match="references nest too deeply"):
        grammar_from_schema(schema)
