"""Per-keyword behaviour of the schema translator, relaxations, whitespace and property order."""

from __future__ import annotations

import functools
import itertools
import json
import re
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surecall.engine import Grammar, GrammarError
from surecall.engine.ir import Intersect
from surecall.engine.automaton import DEAD
from surecall.formats import FORMAT_PATTERNS
from surecall.schema import (
    MAX_WHITESPACE,
    UnsatisfiableSchemaError,
    UnsupportedSchemaError,
    grammar_from_schema,
)
from surecall.schema_numbers import equal_number, multiple_of, number_language, value_compare
from surecall.validation import validator_for_schema


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# (schema, accepted values, rejected values); every value is checked against jsonschema too,
# so the table itself cannot drift from the specification.
CASES = {
    "type array": ({"type": ["string", "null"]}, ["a", None], [1, True, [], {}]),
    "integer": ({"type": "integer"}, [0, -7, 12345678901234567890, 3.0], [1.5, "1", True]),
    "number": ({"type": "number"}, [0, -1.25, 1e-7, 3e20], ["1", None]),
    "enum": ({"enum": ["a", 1, None, [1, 2], {"k": True}]}, ["a", 1, 1.0, None, [1, 2], {"k": True}], ["b", 2, [2, 1], True]),
    "const": ({"const": {"a": [1, "x"]}}, [{"a": [1, "x"]}], [{"a": [1]}, {"a": [1, "x"], "b": 1}]),
    "properties and required": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]},
        [{"a": 1}, {"a": 1, "b": "x"}, {"a": 1, "c": [1]}],
        [{}, {"b": "x"}, {"a": "1"}, {"a": 1, "b": 2}],
    ),
    "additionalProperties false": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"a": 1}],
        [{"b": 1}, {"a": 1, "b": 1}],
    ),
    "additionalProperties schema": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
        [{"a": 1, "z": True}, {"q": False}],
        [{"z": 1}, {"a": True}],
    ),
    "patternProperties": (
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"x-a": 1, "x-b": 2}],
        [{"y": 1}, {"x-a": "s"}],
    ),
    "patternProperties next to other properties": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x-": {"type": "string"}}},
        [{}, {"a": 1, "x-b": "s", "other": [1]}, {"y": None}],
        [{"x-b": 1}, {"a": "s"}],
    ),
    "patternProperties with different schemas": (
        {"type": "object", "patternProperties": {"a": {"type": "integer"}, "b": {"minimum": 3}}, "additionalProperties": {"type": "string"}},
        [{"a": 1, "ab": 3, "b": "x", "c": "y"}],
        [{"ab": 1}, {"c": 1}, {"a": "x"}],
    ),
    "oneOf of closed objects": (
        {"oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False},
        ]},
        [{"a": 1}, {"b": 2}],
        [{}, {"a": 1, "b": 2}, {"c": 1}],
    ),
    "uniqueItems over known values": (
        {"type": "array", "items": {"enum": ["a", "b", 1]}, "uniqueItems": True},
        [[], ["a"], ["b", "a", 1]],
        [["a", "a"], [1, 1.0], ["c"]],
    ),
    "propertyNames": (
        {"type": "object", "propertyNames": {"maxLength": 2}},
        [{}, {"ab": 1}],
        [{"abc": 1}],
    ),
    "min/maxProperties": (
        {"type": "object", "minProperties": 1, "maxProperties": 2},
        [{"a": 1}, {"a": 1, "b": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}],
    ),
    "dependentRequired": (
        {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
        [{}, {"b": 1}, {"a": 1, "b": 2}],
        [{"a": 1}],
    ),
    "items and min/maxItems": (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        [[1], [1, 2, 3]],
        [[], [1, 2, 3, 4], ["a"]],
    ),
    "prefixItems and items false": (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [[], ["a"], ["a", 1]],
        [[1], ["a", 1, 2]],
    ),
    "contains": (
        {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 10}},
        [[10], [1, 2, 11], [12, 1]],
        [[], [1, 2], ["a", 10]],
    ),
    "minLength/maxLength in code points": (
        {"type": "string", "minLength": 2, "maxLength": 3},
        ["ab", "ééé", "a\n", "😀😀"],
        ["a", "abcd", "😀"],
    ),
    "pattern is unanchored": ({"type": "string", "pattern": "b+c"}, ["abbc", "bc", "xbcx"], ["ac", ""]),
    "pattern anchored": ({"type": "string", "pattern": "^[a-z]+$"}, ["abc"], ["", "ab1", "1ab"]),
    "pattern with quote and backslash": ({"type": "string", "pattern": '^a"\\\\$'}, ['a"\\'], ["a", 'a"']),
    "pattern with length (intersection)": (
        {"type": "string", "pattern": "^a", "maxLength": 3},
        ["a", "abc"],
        ["abcd", "ba"],
    ),
    "minimum/maximum integers": ({"type": "integer", "minimum": -5, "maximum": 12}, [-5, 0, 12], [-6, 13, 100]),
    "exclusive bounds decimals": (
        {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 2.25},
        [0.51, 1, 2.2, 2.249],
        [0.5, 0.4, 2.25, 3, -1],
    ),
    "multipleOf integer": ({"type": "integer", "multipleOf": 5}, [0, 5, -10, 1005], [1, 12, -3]),
    "multipleOf decimal": ({"type": "number", "multipleOf": 0.01}, [1, 1.5, 2.25, -0.07], [1.001, 0.125]),
    "multipleOf any integer": ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 1001, 7.0], [1, 10, -15, 7.5]),
    "multipleOf any decimal": ({"type": "number", "multipleOf": 0.25}, [0.25, 1.5, -2.75, 3], [0.1, 1.3, 0.125]),
    "multipleOf with bounds": ({"type": "integer", "multipleOf": 3, "minimum": 10, "maximum": 30}, [12, 30], [9, 33, 13]),
    "multipleOf twice": ({"allOf": [{"multipleOf": 4}, {"multipleOf": 0.3}]}, [0, 12, -24, 1.2e2], [4, 0.3, 6, 18]),
    "allOf merges": (
        {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"a": {"minimum": 3}}}]},
        [{"a": 3}, {"a": 7, "b": 1}],
        [{"a": 2}, {}],
    ),
    "anyOf": ({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer"}]}, ["a", 3], ["ab", 1.5]),
    "oneOf exclusive": (
        {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
        [1, 2.5, -3],
        [2, 3],
    ),
    "not": ({"not": {"type": "string"}}, [1, None, [], {}], ["a"]),
    "not enum": ({"type": ["string", "integer"], "not": {"enum": ["a", 1]}}, ["b", 2, "aa"], ["a", 1]),
    "not oneOf": (
        {"not": {"oneOf": [{"type": "integer"}, {"minimum": 2}, {"type": "string", "maxLength": 1}]}},
        [2, 3, 1.5, "a", ""],
        [1, -3, 2.5, "ab", None, {"a": 1}],
    ),
    "oneOf inside oneOf": (
        {"oneOf": [{"oneOf": [{"type": "integer"}, {"minimum": 2}]}, {"maximum": 0}]},
        [1, 2.5, -0.5],
        [2, -1, "s", None],
    ),
    "not if/then/else": (
        {"not": {"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}}},
        [-1, None, 1.5, []],
        [0, 5, "x"],
    ),
    "not if/then": ({"not": {"if": {"type": "string"}, "then": {"minLength": 2}}}, ["a", ""], ["ab", 1, None]),
    "not multipleOf": ({"not": {"multipleOf": 2}}, [1, 3, 2.5, -1, 0.5], [2, 4, 0, -4, 2.0, "a", None]),
    "oneOf of multipleOfs": ({"oneOf": [{"multipleOf": 2}, {"multipleOf": 0.1}]}, [2.5, 0.3, -1.7], [4, 0, 3.14, "a", 0.05]),
    "not enum of arrays and objects": (
        {"not": {"enum": [[1, {"a": "x"}], {"a": [1], "b": None}, "s"]}},
        [[1, {"a": "y"}], [1, {"a": "x"}, 2], [{"a": "x"}, 1], {"a": [1]}, {"a": [1], "b": None, "c": 1}, {"a": [2], "b": None}, "t", 1],
        [[1.0, {"a": "x"}], {"b": None, "a": [1]}, "s"],
    ),
    "not additionalProperties schema": (
        {"not": {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}},
        [{"b": "x"}, {"a": 1, "c": "y"}],
        [{}, {"a": "x"}, {"b": 1}, 3],
    ),
    "not patternProperties": (
        {"not": {"patternProperties": {"^x-": {"type": "integer"}}}},
        [{"x-a": "s"}, {"b": 1, "x-": None}],
        [{"x-a": 1}, {"b": "s"}, {}, "s"],
    ),
    "not propertyNames": ({"not": {"propertyNames": {"maxLength": 1}}}, [{"ab": 1}, {"a": 1, "bc": 2}], [{"a": 1}, {}, 3]),
    "not propertyNames of listed keys": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "bb": {}}, "not": {"propertyNames": {"pattern": "^a$"}}},
        [{"bb": 1}, {"a": 1, "c": 2}],
        [{"a": 1}, {}, {"a": "x", "bb": 1}],
    ),
    "not dependentRequired": ({"not": {"dependentRequired": {"a": ["b"]}}}, [{"a": 1}, {"a": 1, "c": 2}], [{"a": 1, "b": 2}, {"b": 1}, {}, 3]),
    "not dependentSchemas": (
        {"not": {"dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}}}},
        [{"a": 1, "b": "x"}],
        [{"a": 1}, {"a": 1, "b": 2}, {"b": "x"}, "s"],
    ),
    "two kinds of member wanted": (
        {"allOf": [{"not": {"patternProperties": {"^x-": {"type": "integer"}}}}, {"not": {"additionalProperties": {"type": "string"}}}]},
        [{"x-a": "s", "b": 1}, {"x-a": None}, {"b": 1, "x-c": []}],
        [{"x-a": "s"}, {"b": 1}, {"x-a": 1, "b": 2}, {}],
    ),
    "two contains": (
        {"allOf": [{"contains": {"type": "integer"}}, {"contains": {"type": "string"}}], "maxItems": 3},
        [[1, "a"], ["a", None, 1], [1, "a", 2], 3],
        [[1], ["a", "b"], [], [1, "a", 2, "b"]],
    ),
    "not closed object": (
        {"not": {"properties": {"a": {"type": "integer"}}, "additionalProperties": False}},
        [{"a": "x"}, {"a": 1, "b": 1}, {"b": None}],
        [{"a": 1}, {}, 3, "s"],
    ),
    "if/then/else": (
        {"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}},
        [0, 5, "x"],
        [-1, None],
    ),
    "recursive $ref": (
        {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}, "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
        [{"v": 1}, {"v": 1, "next": {"v": 2, "next": {"v": 3}}}],
        [{"v": 1, "next": {}}, {"next": {"v": 1}}],
    ),
    "draft-07 definitions": (
        {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": {"type": "integer"}}, "items": {"$ref": "#/definitions/n"}, "type": "array"},
        [[1, 2]],
        [["a"]],
    ),
    "format date-time": ({"type": "string", "format": "date-time"}, ["2024-02-29T12:00:00Z", "1999-12-31T23:59:59.5+01:00"], ["2023-02-29T12:00:00Z", "2024-01-01", "x"]),
    "format uuid": ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
    "format ipv4": ({"format": "ipv4"}, ["192.168.0.1", 5], ["256.1.1.1", "01.2.3.4"]),
    "any value": ({}, [None, 1, "x", [1, {"a": []}], {"k": {"l": [None]}}], []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_keyword(name):
    schema, accepted, rejected = CASES[name]
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    for value in accepted:
        assert validator.is_valid(value), f"table error: {value!r} should be valid"
        assert grammar.accepts(dumps(value)), f"{name}: rejected valid {dumps(value)}"
    for value in rejected:
        assert not validator.is_valid(value), f"table error: {value!r} should be invalid"
        assert not grammar.accepts(dumps(value)), f"{name}: accepted invalid {dumps(value)}"


def test_draft4_integers_have_no_fraction():
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    grammar = grammar_from_schema(draft4)
    assert [grammar.accepts(text) for text in ("12", "-7", "0", "12.0", "1e2", "01", "-0.0")] == [
        True, True, True, False, False, False, False,
    ]
    assert grammar_from_schema({"type": "integer"}).accepts("12.0")
    # Unconstrained, the digits alone are one regular language: no product of automata.
    assert not grammar.automaton._nfa.intersections
    bounded = grammar_from_schema({**draft4, "minimum": 0, "maximum": 20})
    assert [bounded.accepts(text) for text in ("0", "20", "3", "3.0", "21", "-1")] == [True, True, True, False, False, False]


def test_escape_counts_as_one_character():
    grammar = grammar_from_schema({"type": "string", "maxLength": 2})
    assert grammar.accepts('"\\n\\""')
    assert grammar.accepts('"\\u001f"')
    assert not grammar.accepts('"\\n\\"a"')


def test_pattern_matches_decoded_string():
    grammar = grammar_from_schema({"type": "string", "pattern": "^\\n$"})
    assert grammar.accepts('"\\n"')
    assert not grammar.accepts('"n"')


# (pattern, whether a length bound goes inside it: one part of varying length, or
# alternatives that each have one); the others are intersected with a counted string.
LENGTH_BOUNDED_PATTERNS = [
    ("^[A-Za-z0-9_][^<>*#.%&:\\\\+?/]*$", True),
    ("^ab", True),
    ("c$", True),
    ("^(ab|cd)x*$", True),
    ("^(ab){2,}$", True),
    ("^\\d{2}-[a-z\u00e9]*$", True),
    ("^[ab]{3,5}$", True),
    ("^(a|b)$|^c*$", True),
    ("^x?y*$", False),
    ("a", False),
    ("^\\d+\\.\\d+.*$", False),
]
LENGTH_BOUNDS = [(0, 0), (0, 3), (2, 5), (3, 3), (4, None), (1, 12)]


@pytest.mark.parametrize(("pattern", "inside"), LENGTH_BOUNDED_PATTERNS)
@pytest.mark.parametrize(("shortest", "longest"), LENGTH_BOUNDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pattern_under_length_bounds_matches_as_both_keywords_do(pattern, inside, shortest, longest, data):
    schema = {"type": "string", "pattern": pattern, "minLength": shortest}
    if longest is not None:
        schema["maxLength"] = longest
    try:
        grammar = _bounded_pattern_grammar(json.dumps(schema))
    except UnsatisfiableSchemaError:
        grammar = None
    else:
        # Where the bound goes inside the pattern, no intersection is left to build states by.
        assert (not grammar.automaton._nfa.intersections) == inside
    alphabet = sorted(set(re.sub(r"[\\^$()?!=|*+{}\[\],0-9]", "", pattern)) | {"a", "b", "c", "x", "1", ".", "\u00e9"})
    text = data.draw(st.text(alphabet=alphabet, max_size=14))
    valid = shortest <= len(text) and (longest is None or len(text) <= longest) and re.search(pattern, text) is not None
    assert (grammar is not None and grammar.accepts(dumps(text))) == valid


@functools.lru_cache(maxsize=None)
def _bounded_pattern_grammar(schema_text: str):
    return grammar_from_schema(json.loads(schema_text))


LOOKAHEAD_PATTERNS = [
    "^(?!@@)[@a-z0-9_-]+$",
    "^(?!tmp_|cache\\.).*",
    "^(?!(False|None|True)$)[A-Za-z_]\\w*$",
    "^(?=.{1,5}$)[a-z]+\\d*$",
    "((?:[^/]*/)*)(?=\\.(ya?ml|json))",
    "a(?!b)",
    "^a*(?!b)$",
    "^(?!.*/)^(.*[^.]+.*)$",
    "^(?!a(?!b))",
    "(?!a(?=b))a.",
    "^(a|b(?!x)c)d",
    "^(https?://|/?.?-?(?!\\w+://)\\w).+\\.ya?ml$",
]


@pytest.mark.parametrize("pattern", LOOKAHEAD_PATTERNS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lookaheads_in_a_pattern_sequence_match_as_ecma_search_does(pattern, data):
    grammar = _pattern_grammar(pattern)
    # Texts built from the pattern's own characters meet its branches often.
    alphabet = sorted(set(re.sub(r"[\\^$()?!=|*+{}\[\]]", "", pattern)) | {"a", "b", "/", ".", "_", "1", "\u00e9"})
    text = data.draw(st.one_of(st.text(alphabet=alphabet, max_size=10), st.sampled_from(
        ["@@x", "tmp_a", "cache.x", "None", "Nonesuch", "x/a.yaml", "a.json", "ab", "abcdef", ""])))
    # ASCII classes and no multi-line '$': the ECMA meaning on texts without newlines.
    assert grammar.accepts(dumps(text)) == (re.search(pattern, text, re.ASCII) is not None)


_PATTERN_GRAMMARS: dict = {}


def _pattern_grammar(pattern: str):
    if pattern not in _PATTERN_GRAMMARS:
        _PATTERN_GRAMMARS[pattern] = grammar_from_schema({"type": "string", "pattern": pattern})
    return _PATTERN_GRAMMARS[pattern]


@pytest.mark.parametrize(
    ("pattern", "detail"),
    [
        ("^((?!x).)*$", "lookahead"),  # inside a quantified group: it looks past each repetition
        ("x(?=a)^a", "'^' after a lookahead"),
        ("a$(?!b)", "'$' before a lookahead"),
        ("(?<=a)b", "lookbehind"),
    ],
)
def test_lookaheads_the_translation_cannot_place_raise(pattern, detail):
    with pytest.raises(UnsupportedSchemaError, match=re.escape(detail)) as info:
        grammar_from_schema({"type": "string", "pattern": pattern})
    assert info.value.keyword == "pattern"


def test_property_names_may_refer_to_a_string_schema():
    schema = {"type": "object", "propertyNames": {"$ref": "#/$defs/name"},
              "$defs": {"name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}}}
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    for value in [{"ab": 1}, {"abcde": 1}, {"A": 1}, {}, {"ab": 1, "cd": [2]}, {"ab": 1, "c-d": 2}]:
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value
    cycle = {"type": "object", "propertyNames": {"$ref": "#/$defs/a"}, "$defs": {"a": {"$ref": "#/$defs/a"}}}
    with pytest.raises(UnsupportedSchemaError, match="nest too deeply"):
        grammar_from_schema(cycle)


UNEVALUATED = {
    # Only the schemas that hold evaluate: an anyOf branch that fails does not, one that
    # holds beside the first does.
    "anyOf": ({"properties": {"a": {"type": "string"}},
               "anyOf": [{"properties": {"b": {"const": 1}}, "required": ["b"]},
                         {"properties": {"c": {"const": 2}}, "required": ["c"]}],
               "unevaluatedProperties": False},
              [{"b": 1}, {"b": 1, "c": 2}, {"b": 1, "c": 3}, {"a": "x", "c": 2}, {"a": "x", "c": 2, "d": 0}, {}]),
    # A sibling's properties are not seen (each unevaluatedProperties reads its own schema).
    "cousins": ({"allOf": [{"properties": {"a": True}}, {"properties": {"b": True}, "unevaluatedProperties": False}]},
                [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}]),
    # Through a $ref and a then that holds; the unevaluated ones take the schema given.
    "ref_and_if": ({"$ref": "#/$defs/base", "if": {"properties": {"t": {"const": "x"}}, "required": ["t"]},
                    "then": {"properties": {"x": {"type": "integer"}}},
                    "unevaluatedProperties": {"type": "boolean"},
                    "$defs": {"base": {"properties": {"t": {"type": "string"}}}}},
                   [{"t": "x", "x": 1}, {"t": "y", "x": 1}, {"t": "y", "x": True}, {"t": "x", "z": False}, {"z": 0}]),
    # A name only a negation lists is still unevaluated.
    # What a negation refers to evaluates nothing either, however many negations deep.
    "double_negation_ref": ({"$defs": {"A": {"properties": {"a": {"type": "integer"}}, "required": ["a"]}},
                            "not": {"not": {"$ref": "#/$defs/A"}}, "unevaluatedProperties": False},
                           [{"a": 1}, {"a": "x"}, {}, 5]),
    # Items: the longest prefixItems among the schemas that hold, all of them under items.
    "items_by_what_holds": ({"prefixItems": [{"const": "a"}],
                             "anyOf": [{"prefixItems": [True, {"const": "b"}]}, {"prefixItems": [True, True, {"const": "c"}]}],
                             "unevaluatedItems": {"type": "integer"}},
                            [["a", "b"], ["a", "b", 1], ["a", "b", "c"], ["a", "b", "c", 2], ["a", "b", "c", "d"],
                             ["a", "x", "c"], ["a", "x", "c", 1.5], ["a"]]),
    "items_cousins": ({"allOf": [{"items": {"type": "string"}}, {"prefixItems": [True], "unevaluatedItems": False}]},
                      [[], ["a"], ["a", "b"], [1]]),
    # An item a contains matches is evaluated; two contains from allOf both count.
    "items_contains": ({"allOf": [{"contains": {"type": "string"}}, {"contains": {"type": "boolean"}}],
                        "unevaluatedItems": {"type": "integer"}},
                       [[1, "a", True], ["a", True, 2], [True, "a", 2.5], [None, True, "b"], ["b", "c", False], [1, "a"], []]),
    "negated_name": ({"not": {"properties": {"a": {"type": "string"}}, "required": ["a"]}, "unevaluatedProperties": {"type": "integer"}},
                     [{"a": 1}, {"a": 1.5}, {"a": "s"}, {}, {"b": 2}]),
}


@pytest.mark.parametrize("name", sorted(UNEVALUATED))
def test_unevaluated_properties_and_items_are_decided_as_jsonschema_decides(name):
    schema, values = UNEVALUATED[name]
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    outcomes = set()
    for value in values:
        outcomes.add(validator.is_valid(value))
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value
    assert outcomes == {True, False}


@pytest.mark.parametrize("value", [[], ["s"], [1], ["s", 1], ["s", 2], [1, 1], ["s", 1, "x"], "x", {"0": "s"}])
def test_negated_prefix_items_are_an_item_the_position_refuses(value):
    schema = {"not": {"prefixItems": [{"type": "string"}, {"const": 1}]}}
    assert grammar_from_schema(schema).accepts(dumps(value)) == validator_for_schema(schema).is_valid(value)


_ITEM_VALUES = st.sampled_from([0, 1, 2, "a", "b", True, None])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.lists(st.sampled_from([{"type": "integer"}, {"type": "string"}, True]), max_size=2),
    items=st.sampled_from([None, {"type": ["integer", "string"]}, False]),
    bounds=st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 5))),
    contains_bounds=st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 3))),
    values=st.lists(st.lists(_ITEM_VALUES, max_size=6), min_size=1, max_size=8),
)
def test_counted_contains_is_decided_as_jsonschema_decides(prefix, items, bounds, contains_bounds, values):
    schema = {"type": "array", "contains": {"type": "integer", "minimum": 1}, "minItems": bounds[0],
              "minContains": contains_bounds[0]}
    if prefix:
        schema["prefixItems"] = prefix
    if items is not None:
        schema["items"] = items
    if bounds[1] is not None:
        schema["maxItems"] = bounds[1]
    if contains_bounds[1] is not None:
        schema["maxContains"] = contains_bounds[1]
    try:
        grammar = grammar_from_schema(schema)
    except UnsatisfiableSchemaError:
        return
    validator = validator_for_schema(schema)
    for value in values:
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), (schema, value)


def test_contains_counted_over_too_many_states_raises():
    schema = {"type": "array", "contains": {"type": "integer"}, "maxContains": 5, "maxItems": 2_000}
    with pytest.raises(UnsupportedSchemaError, match="more than 1024 positions and counts") as info:
        grammar_from_schema(schema)
    assert info.value.keyword == "contains"
    assert grammar_from_schema(schema, lenient=True).relaxations[0].keyword == "contains"


def test_unevaluated_properties_is_an_unknown_word_before_draft_2019_09():
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"a": {}}, "unevaluatedProperties": False}
    assert grammar_from_schema(schema, property_order="any").accepts(dumps({"b": 1}))
    assert validator_for_schema(schema).is_valid({"b": 1})


def test_negating_unevaluated_properties_raises():
    schema = {"not": {"properties": {"a": {}}, "unevaluatedProperties": False}}
    with pytest.raises(UnsupportedSchemaError, match="negating 'unevaluatedProperties'"):
        grammar_from_schema(schema)


def _required_object(count: int, suffix: str = "") -> dict:
    names = [f"p{i}{suffix}" for i in range(count)]
    return {"type": "object", "properties": {name: {"type": "integer"} for name in names}, "required": names}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(10)), dropped=st.one_of(st.none(), st.integers(0, 9)), value=st.sampled_from([1, "x"]))
def test_any_order_objects_track_ten_required_properties(order, dropped, value):
    schema = _REQUIRED_TEN
    members = {f"p{i}": value if i == order[0] else 1 for i in order if i != dropped}
    assert _required_ten_grammar().accepts(dumps(members)) == validator_for_schema(schema).is_valid(members)


_REQUIRED_TEN = _required_object(10)


@functools.lru_cache(maxsize=1)
def _required_ten_grammar():
    return grammar_from_schema(_REQUIRED_TEN, property_order="any")


def test_any_order_tracking_is_bounded_per_object_and_per_schema():
    with pytest.raises(UnsupportedSchemaError, match="tracks at most 12 properties per object"):
        grammar_from_schema(_required_object(13), property_order="any")
    # Three objects of 12: 3 x 4,096 sets of written properties, one rule each.
    schema = {"type": "object", "properties": {f"x{k}": _required_object(12, str(k)) for k in range(3)}}
    with pytest.raises(UnsupportedSchemaError, match="at most 8192 sets of written properties"):
        grammar_from_schema(schema, property_order="any")
    assert grammar_from_schema(schema).accepts(dumps({"x0": {f"p{i}0": 1 for i in range(12)}}))


def test_schema_order_is_the_default_and_any_order_is_available():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    assert grammar_from_schema(schema).accepts('{"a":1,"b":2}')
    assert not grammar_from_schema(schema).accepts('{"b":2,"a":1}')
    assert grammar_from_schema(schema, property_order="any").accepts('{"b":2,"a":1}')


@pytest.mark.parametrize("required", [[], ["id"]])
def test_any_order_objects_reach_the_same_state_after_every_optional_member(required):
    # Masks are cached per parse state: key positions that share one share their masks.
    properties = {name: {"type": "integer"} for name in ("id", "a", "b", "c")}
    schema = {"type": "object", "properties": properties, "required": required}
    automaton = grammar_from_schema(schema, property_order="any").automaton
    after = [automaton.step_bytes(automaton.initial, text.encode()) for text in ('{"id":1,', '{"id":1,"a":2,', '{"id":1,"a":2,"b":3,"c":4,')]
    assert DEAD not in after and len(set(after)) == 1
    assert automaton.is_accepting(automaton.step_bytes(after[0], b'"a":1,"a":2}'))


@pytest.mark.parametrize("additional", [False, True])
def test_any_order_objects_reach_the_same_state_after_every_member_while_a_required_one_is_missing(additional):
    # The members written before a missing required one are a right recursion of the
    # grammar: each round must not be a new level of calls, with new states and masks.
    properties = {name: {"type": "integer"} for name in ("id", "a", "b")}
    schema = {"type": "object", "properties": properties, "required": ["id"], "additionalProperties": additional}
    automaton = grammar_from_schema(schema, property_order="any").automaton
    prefixes = ['{"a":1,', '{"a":1,"b":2,', '{"a":1,"b":2,"a":3,']
    if additional:
        prefixes += ['{"a":1,"x":[1],', '{"a":1,"x":{"y":2},"b":3,']
    after = [automaton.step_bytes(automaton.initial, text.encode()) for text in prefixes]
    assert DEAD not in after and len(set(after)) == 1
    assert not automaton.is_accepting(automaton.step_bytes(after[0], b'"b":1}'))
    assert automaton.is_accepting(automaton.step_bytes(after[-1], b'"id":1}'))


def test_objects_with_hundreds_of_optional_properties_compile():
    names = [f"field_{i}" for i in range(300)]
    properties = {name: {"type": "integer"} for name in names}
    grammar = grammar_from_schema({"type": "object", "properties": properties, "additionalProperties": False})
    chosen = {name: i for i, name in enumerate(names) if i % 7 == 3}
    assert grammar.accepts(json.dumps(chosen, separators=(",", ":")))
    assert grammar.accepts(json.dumps({name: 1 for name in names}, separators=(",", ":")))
    assert not grammar.accepts(json.dumps(dict(reversed(list(chosen.items()))), separators=(",", ":")))
    assert not grammar.accepts('{"field_300":1}')


def test_flexible_whitespace_is_bounded():
    grammar = grammar_from_schema({"type": "object", "properties": {"a": {"type": "array"}}}, whitespace="flexible")
    assert grammar.accepts('{ "a" : [ 1 , 2 ] }')
    assert grammar.accepts('{\n  "a": []\n}')
    assert not grammar.accepts("{" + " " * (2 * MAX_WHITESPACE + 1) + "}")  # at most two runs touch
    assert not grammar_from_schema({"type": "object"}).accepts("{ }")


def test_unsupported_keyword_names_keyword_and_pointer():
    schema = {"type": "object", "properties": {"tags": {"anyOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 3}]}}}
    with pytest.raises(UnsupportedSchemaError) as info:
        grammar_from_schema(schema)
    assert info.value.keyword == "uniqueItems"
    assert info.value.pointer == "#/properties/tags/anyOf/0"


def test_lenient_lists_exactly_what_was_relaxed(caplog):
    tags = {"anyOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 3}]}
    schema = {"type": "object", "properties": {"tags": tags, "w": {"type": "string", "pattern": "(?<=a)a"}}}
    grammar = grammar_from_schema(schema, lenient=True)
    assert sorted(r.keyword for r in grammar.relaxations) == ["pattern", "uniqueItems"]
    assert {r.pointer for r in grammar.relaxations} == {"#/properties/tags/anyOf/0", "#/properties/w/pattern"}
    assert "relaxed schema constraint" in caplog.text
    assert grammar.accepts('{"tags":[1,1]}')
    strict_parts = grammar_from_schema({"type": "array", "maxItems": 1, "uniqueItems": True})
    assert strict_parts.relaxations == ()


def test_a_multiple_of_step_past_the_automaton_limit_raises():
    # 0.123456789 would keep 123456789 remainders times 10 fraction positions, one rule each.
    with pytest.raises(UnsupportedSchemaError, match="multipleOf") as info:
        grammar_from_schema({"type": "number", "multipleOf": 0.123456789})
    assert "remainders" in str(info.value)
    relaxed = grammar_from_schema({"type": "number", "multipleOf": 0.123456789}, lenient=True)
    assert [r.keyword for r in relaxed.relaxations] == ["multipleOf"]


def test_false_schema_is_unsatisfiable():
    with pytest.raises(UnsatisfiableSchemaError):
        grammar_from_schema(False)
    with pytest.raises(UnsatisfiableSchemaError):
        grammar_from_schema({"type": "integer", "minimum": 3, "maximum": 2})


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="whitespace"):
        grammar_from_schema({}, whitespace="pretty")
    with pytest.raises(UnsupportedSchemaError, match="resolve"):
        grammar_from_schema({"$ref": "#/$defs/missing"})


@pytest.mark.parametrize("name", sorted(FORMAT_PATTERNS))
def test_format_expressions_compile(name):
    grammar = grammar_from_schema({"type": "string", "format": name})
    assert not grammar.accepts('""') or name == "uri-reference"


@pytest.mark.parametrize("name", ["iri", "iri-reference", "idn-email", "regex"])
def test_formats_surecall_cannot_enforce_are_refused_whatever_checkers_are_installed(name):
    # iri and iri-reference are checked by jsonschema only with an optional package that is
    # not installed with surecall: they are refused all the same, not silently ignored.
    with pytest.raises(UnsupportedSchemaError, match=name):
        grammar_from_schema({"type": "string", "format": name})
    assert grammar_from_schema({"type": "string", "format": "x-unknown"}).accepts('"anything"')


# -- property tests -----------------------------------------------------------------------

decimals = st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(value=decimals, probes=st.lists(decimals, max_size=4), zeros=st.integers(0, 3), negate=st.booleans())
def test_equal_number_is_both_bounds_at_once(value, probes, zeros, negate):
    # The enum and const language of a number: what >= value and <= value accept together.
    from surecall.engine.ir import Intersect

    direct = Grammar({"start": equal_number(value)})
    both = Grammar({"start": Intersect((value_compare(value, ">=", integer=False), value_compare(value, "<=", integer=False)))})
    assert not direct.automaton._nfa.intersections
    texts = set()
    for probe in [value, *probes]:
        plain = format(probe, "f")
        texts |= {plain, format(probe.normalize(), "f"), plain + ("." if "." not in plain else "") + "0" * zeros}
        texts |= {"-" + text.lstrip("-") if negate else text.lstrip("-") for text in list(texts)}
    for text in texts:
        assert direct.accepts(text) == both.accepts(text), text
        if re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", text):
            assert direct.accepts(text) == (Decimal(text) == value), text


wide_integers = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, 2**63 - 1, -(2**63), 2**64 - 1, 9223372036854776000, 10**19, 10**19 - 1]),
)


@settings(max_examples=60, deadline=None)
@given(low=wide_integers, high=wide_integers, probes=st.lists(wide_integers, min_size=1, max_size=6))
def test_wide_integer_ranges_are_exact(low, high, probes):
    # int64 bounds (9223372036854775807) are common in real schemas; their digit ranges
    # are written in a few rules per digit, not split by every digit's value.
    if low > high:
        low, high = high, low
    language = number_language(integer=True, lower=(Decimal(low), False), upper=(Decimal(high), False))
    accepts = Grammar({"start": language}).accepts
    for probe in [*probes, low - 1, low, low + 1, high - 1, high, high + 1, 0]:
        assert accepts(str(probe)) == (low <= probe <= high), (probe, low, high)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    low=decimals, high=decimals, low_exclusive=st.booleans(), high_exclusive=st.booleans(), integer=st.booleans(),
    plain=st.booleans(), probes=st.lists(decimals, min_size=1, max_size=8),
)
def test_number_bounds_are_exact(low, high, low_exclusive, high_exclusive, integer, plain, probes):
    plain = plain and integer
    language = number_language(
        integer=integer, lower=(low, low_exclusive), upper=(high, high_exclusive), plain_integer=plain
    )
    try:
        grammar = Grammar({"start": language})
        accepts = grammar.accepts
        accepts("0")
    except GrammarError:  # an empty range: then no probe may be inside it
        accepts = lambda text: False  # noqa: E731
    else:
        # Integer ranges are written at once, not as an intersection of the two bounds.
        assert not (integer and grammar.automaton._nfa.intersections)
    near = [bound + step for bound in (low.to_integral_value(), high.to_integral_value()) for step in (-1, 0, 1)]
    for probe in probes + [low, high, Decimal(0), *near]:
        texts = {format(probe, "f"), format(probe.normalize(), "f")}
        texts |= {text + ".0" for text in texts if "." not in text} | {"-" + text for text in texts if Decimal(text) == 0}
        for text in texts:
            value = Decimal(text)
            expected = (value > low if low_exclusive else value >= low) and (value < high if high_exclusive else value <= high)
            if integer:
                expected = expected and value == value.to_integral_value()
            if plain:
                expected = expected and "." not in text
            assert accepts(text) == expected, (text, low, high, low_exclusive, high_exclusive, integer, plain)



@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    excluded=st.lists(decimals, min_size=1, max_size=12), integer=st.booleans(),
    probes=st.lists(decimals, min_size=1, max_size=6),
)
def test_excluded_values_are_exact(excluded, integer, probes):
    # A negated enum of numbers: every spelling of every excluded value is refused, every
    # other number of the type accepted.
    accepts = Grammar({"start": number_language(integer=integer, excluded=tuple(excluded))}).accepts
    for probe in [*probes, *excluded, Decimal(0)]:
        texts = {format(probe, "f"), format(probe.normalize(), "f")}
        texts |= {text + ".0" for text in texts if "." not in text} | {"-" + text for text in texts if Decimal(text) == 0}
        for text in texts:
            value = Decimal(text)
            expected = value not in excluded and (not integer or value == value.to_integral_value())
            assert accepts(text) == expected, (text, excluded, integer)



steps = st.one_of(
    st.integers(1, 120).map(Decimal),
    st.builds(lambda a, p: Decimal(a).scaleb(-p), st.integers(1, 99), st.integers(1, 3)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=steps, integer=st.booleans(), probes=st.lists(decimals, min_size=1, max_size=8),
       multiples=st.lists(st.integers(-300, 300), max_size=4))
def test_multiple_of_any_step_is_exact(step, integer, probes, multiples):
    # Steps dividing no power of ten up to 10^4 add their remainder automaton to the rules.
    rules: dict = {}
    language = multiple_of(step, integer, rules)
    accepts = Grammar({**rules, "start": language}).accepts
    for value in [*probes, *(step * m for m in multiples), Decimal(0)]:
        for text in {format(value, "f"), format(value, "f") + ("" if "." in format(value, "f") else ".0")}:
            exact = Decimal(text)
            expected = exact % step == 0 and (not integer or exact == exact.to_integral_value())
            assert accepts(text) == expected, (text, step, integer)

def test_many_excluded_values_stay_one_operand():
    # A negated enum of 500 numbers is one complement, not 500 operands of the product
    # the automaton steps (which took seconds to compile).
    excluded = tuple(Decimal(3 * i) for i in range(500))
    language = number_language(integer=True, excluded=excluded)
    assert isinstance(language, Intersect) and len(language.items) == 2
    accepts = Grammar({"start": language}).accepts
    assert [accepts(text) for text in ("1", "3", "1497", "1500", "-3", "3.0", "4.0")] == [
        True, False, False, True, True, False, True,
    ]

def _values_for(schema: dict):
    """A hypothesis strategy for values valid under the simple schemas below."""
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "integer":
        return st.integers(schema.get("minimum", -10**6), schema.get("maximum", 10**6))
    if kind == "number":
        # Bounded numbers are written in plain decimal notation (documented restriction).
        return st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False).filter(
            lambda x: "e" not in repr(x)
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(re.compile(schema["pattern"]), fullmatch=True)
        return st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 20))
    if kind == "array":
        return st.lists(_values_for(schema["items"]), min_size=schema.get("minItems", 0), max_size=schema.get("maxItems", 5))
    if kind == "object":
        required = set(schema.get("required", ()))
        props = schema["properties"]
        return st.fixed_dictionaries(
            {k: _values_for(v) for k, v in props.items() if k in required},
            optional={k: _values_for(v) for k, v in props.items() if k not in required},
        ).map(lambda d: {k: d[k] for k in props if k in d})
    raise AssertionError(schema)


SIMPLE_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": -3, "maximum": 250},
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{1,3}$"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 4},
        "kind": {"enum": ["a", "b", 3, None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 3},
    },
    "required": ["id", "code", "kind"],
    "additionalProperties": False,
}
_SIMPLE_GRAMMAR = {}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_values_for(SIMPLE_SCHEMA))
def test_generated_instances_are_accepted(value):
    for order in ("schema", "any"):
        if order not in _SIMPLE_GRAMMAR:
            _SIMPLE_GRAMMAR[order] = grammar_from_schema(SIMPLE_SCHEMA, property_order=order)
        assert validator_for_schema(SIMPLE_SCHEMA).is_valid(value)
        assert _SIMPLE_GRAMMAR[order].accepts(dumps(value)), dumps(value)
    # "spaced": exactly json.dumps's own spacing, one space after each "," and ":"
    if "spaced" not in _SIMPLE_GRAMMAR:
        _SIMPLE_GRAMMAR["spaced"] = grammar_from_schema(SIMPLE_SCHEMA, whitespace="spaced")
    spaced = json.dumps(value, ensure_ascii=False)
    assert _SIMPLE_GRAMMAR["spaced"].accepts(spaced), spaced
    assert not _SIMPLE_GRAMMAR["spaced"].accepts(dumps(value))  # an object of >= 2 members has a separator


def test_if_then_else_apply_from_draft_7_and_are_unknown_words_before():
    conditional = {
        "type": "object",
        "if": {"properties": {"kind": {"const": "action"}}},
        "then": {"required": ["title"]},
    }
    untitled_action = '{"kind":"action"}'
    draft7 = grammar_from_schema({"$schema": "http://json-schema.org/draft-07/schema#", **conditional})
    draft4 = grammar_from_schema({"$schema": "http://json-schema.org/draft-04/schema#", **conditional})
    assert not draft7.accepts(untitled_action)
    assert draft7.accepts('{"kind":"action","title":"t"}')
    assert draft4.accepts(untitled_action)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=12))
def test_string_constants_accept_every_json_spelling_of_the_text(text):
    grammar = grammar_from_schema({"const": text})
    spelled = json.dumps(text, ensure_ascii=False)
    assert grammar.accepts(spelled)
    assert grammar.accepts(spelled.replace("/", "\\/"))
    assert not grammar.accepts(json.dumps(text + "x", ensure_ascii=False))


def _escaping_surrogates(text: str, hex_format: str) -> str:
    return '"' + "".join(("\\u" + format(ord(c), hex_format)) if 0xD800 <= ord(c) <= 0xDFFF else c for c in text) + '"'


@pytest.mark.parametrize("text", ["\ud800", "a\udc00b", "\ud83d\u00e9"])
def test_lone_surrogates_in_constants_and_keys_are_spelled_by_their_escapes(text):
    # A JSON text may escape a lone surrogate, which UTF-8 cannot hold raw: the escape is
    # its one spelling, in either case of hex digits.
    lower, upper = _escaping_surrogates(text, "04x"), _escaping_surrogates(text, "04X")
    assert json.loads(lower) == json.loads(upper) == text
    for schema in ({"const": text}, {"enum": [text, "other"]}):
        grammar = grammar_from_schema(schema)
        assert grammar.accepts(lower) and grammar.accepts(upper)
        assert not grammar.accepts(_escaping_surrogates(text + "x", "04x"))
    keyed = grammar_from_schema({"type": "object", "properties": {text: {"const": 1}}, "required": [text]})
    assert keyed.accepts("{" + lower + ":1}")


_KEY_ALPHABET = st.sampled_from(list("ab/é\"\\\n€😀"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    known=st.lists(st.text(_KEY_ALPHABET, min_size=1, max_size=4), min_size=1, max_size=5, unique=True),
    others=st.lists(st.text(_KEY_ALPHABET, max_size=5), max_size=6),
)
def test_extra_keys_are_exactly_the_keys_not_listed(known, others):
    # The other-key language follows the known keys character by character and leaves them
    # at any other character (ASCII or not): an unlisted key is one, a listed key is not
    # (keys spelled as json.dumps spells them, with "/" escaped or not, see
    # docs/schema-support.md).
    schema = {"type": "object", "properties": {key: {"const": 0} for key in known}, "additionalProperties": {"const": 1}}
    grammar = grammar_from_schema(schema, property_order="any")
    candidates = others + [key[:-1] for key in known] + [key + "b" for key in known]
    for key in known + candidates:
        plain = json.dumps(key, ensure_ascii=False)
        for spelled in {plain, plain.replace("/", "\\/")}:
            listed = key in known
            assert grammar.accepts("{" + spelled + ":0}") == listed, key
            assert grammar.accepts("{" + spelled + ":1}") == (not listed), key


def nested_objects(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def test_subschemas_nest_up_to_a_limit_with_a_clear_error_past_it():
    from surecall.schema import MAX_SCHEMA_NESTING

    deep = MAX_SCHEMA_NESTING - 2
    assert grammar_from_schema(nested_objects(deep)).accepts('{"a":' * deep + "7" + "}" * deep)
    with pytest.raises(UnsupportedSchemaError, match=f"nest more than {MAX_SCHEMA_NESTING} levels"):
        grammar_from_schema(nested_objects(MAX_SCHEMA_NESTING + 5))


def test_references_to_rules_with_no_finite_value_are_dropped_wherever_they_are_shared():
    # ``node`` must hold another ``node`` forever: no finite JSON value, so only the other
    # branch of each anyOf is left (the branches share the reference).
    endless = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}},
               "required": ["next"], "additionalProperties": False}
    schema = {"$defs": {"node": endless}, "type": "object", "additionalProperties": False,
              "properties": {"a": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "integer"}]},
                             "b": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "string"}]}}}
    grammar = grammar_from_schema(schema)
    assert grammar.accepts('{"a":1,"b":"y"}') and grammar.accepts('{"b":"x"}')
    assert not grammar.accepts('{"a":{"next":{}}}') and not grammar.accepts('{"b":{"v":1}}')


# A keyword that constrains one type says nothing about the others, so its negation holds
# only for values of that type (``not: {minLength: 2}`` rejects 3).
TYPED_KEYWORDS = {
    "minLength": {"minLength": 2},
    "maxLength": {"maxLength": 1},
    "pattern": {"pattern": "^a"},
    "format": {"format": "ipv4"},
    "multipleOf": {"multipleOf": 2},
    "minimum": {"minimum": 2},
    "maximum": {"maximum": 2},
    "exclusiveMinimum": {"exclusiveMinimum": 2},
    "exclusiveMaximum": {"exclusiveMaximum": 2},
    "minItems": {"minItems": 2},
    "maxItems": {"maxItems": 1},
    "items": {"items": {"type": "integer"}},
    "contains": {"contains": {"type": "integer"}},
    "minProperties": {"minProperties": 2},
    "maxProperties": {"maxProperties": 1},
    "required": {"required": ["a"]},
    "properties": {"properties": {"a": {"type": "integer"}}},
}
VALUES_OF_EVERY_TYPE = [
    None, True, 0, 3, -1.5, 2.5, "", "a", "ab", "ba", "1.2.3.4", "x\u00e9y", [], [1], ["x"], [1, "x"], [1, 2],
    {}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2},
]


@pytest.mark.parametrize("keyword", sorted(TYPED_KEYWORDS))
@pytest.mark.parametrize("shape", ["not", "oneOf beside a type", "oneOf beside the keyword's type"])
def test_negating_a_typed_keyword_leaves_the_other_types_alone(keyword, shape):
    constraint = TYPED_KEYWORDS[keyword]
    schema = {
        "not": {"not": constraint},
        "oneOf beside a type": {"oneOf": [constraint, {"type": "integer"}]},
        "oneOf beside the keyword's type": {"oneOf": [constraint, {"type": ["string", "array", "object", "number"]}]},
    }[shape]
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    wrong = [dumps(value) for value in VALUES_OF_EVERY_TYPE if grammar.accepts(dumps(value)) != validator.is_valid(value)]
    assert not wrong, f"{schema}: decided differently from jsonschema: {wrong}"



# A oneOf between branches that refer back to the schema: each branch is written with the
# other's negation, whose members refer back to the negated schema again.
RECURSIVE_ONE_OF = {
    "definitions": {
        "node": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 3}},
            "required": ["name"],
            "oneOf": [
                {"properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}, "required": ["children"]},
                {"properties": {"leaves": {"type": "array", "items": {"type": "integer"}}}, "required": ["leaves"]},
            ],
        }
    },
    "$ref": "#/definitions/node",
}
RECURSIVE_ONE_OF_VALUES = [
    {"name": "a", "children": []},
    {"name": "a", "leaves": [1, 2]},
    {"name": "a", "children": [], "leaves": []},
    {"name": "a"},
    {"name": "a", "children": [{"name": "b", "leaves": [3]}]},
    {"name": "a", "children": [{"name": "b", "leaves": [3], "children": []}]},
    {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "leaves": []}]}]},
    {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]},
    {"name": "a", "children": [{"name": "b", "children": [{"name": "toolong", "leaves": []}]}]},
    {"name": "a", "children": [{"name": "b", "leaves": ["x"]}]},
    {"name": "a", "children": 1, "leaves": []},
    {"name": "a", "children": [{"name": "b", "children": "x"}], "leaves": [1]},
]


def test_a_one_of_of_recursive_branches_is_decided_as_jsonschema_decides():
    # Negating a branch that refers back to the schema used to spell the negation out
    # without end (RecursionError, reported as nesting too deeply).
    grammar = grammar_from_schema(RECURSIVE_ONE_OF, property_order="any")
    validator = validator_for_schema(RECURSIVE_ONE_OF)
    for value in RECURSIVE_ONE_OF_VALUES:
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value
    # In the schema's order (for generation) only valid values are accepted.
    ordered = grammar_from_schema(RECURSIVE_ONE_OF)
    accepted = [value for value in RECURSIVE_ONE_OF_VALUES if ordered.accepts(dumps(value))]
    assert accepted and all(validator.is_valid(value) for value in accepted)


def test_a_one_of_of_overlapping_branches_keeps_only_the_conjunctions_some_object_meets():
    # Each branch is conjoined with the other four negated, and a negation is a union of
    # ways to fail (a required name missing, a value refused, ...): 5 x 10^4 forms, most
    # asking a branch's object to lack a name the branch requires or to give a value no
    # value fails. Dropped as they appear, the few left fit the alternatives limit.
    common = [f"c{i}" for i in range(8)]
    schema = {"oneOf": [
        {"type": "object", "required": [*common, f"own{j}"],
         "properties": {**{name: {} for name in common}, f"own{j}": {"type": "string"}}}
        for j in range(5)
    ]}
    grammar = grammar_from_schema(schema)
    validator = validator_for_schema(schema)
    outcomes = set()
    for values in itertools.product([None, "s", 1], repeat=5):
        own = {f"own{j}": value for j, value in enumerate(values) if value is not None}
        # The schema's order: the common names, the matching branch's own, the other owns.
        keys = sorted(own, key=lambda name: not isinstance(own[name], str))
        value = {**dict.fromkeys(common, 1), **{name: own[name] for name in keys}}
        outcomes.add(validator.is_valid(value))
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value
    assert outcomes == {True, False}


# Negations wanting members whose keys no single key can meet at once (one of 1 or 3, one
# of 2 or 5): the forms meeting both match no key, and are dropped rather than failing
# the object (which reported a satisfiable schema as unsatisfiable, or unsupported).
WANTED_DISJOINT_KEYS = {"anyOf": [{"patternProperties": {"^(1|3)$": False}}, {"patternProperties": {"^(2|5)$": False}}]}


@pytest.mark.parametrize("schema", [
    {"type": "object", "patternProperties": {"^[0-9]$": True}, "not": WANTED_DISJOINT_KEYS},
    {"type": "object", "patternProperties": {"^[0-9]$": {"type": "integer"}}, "additionalProperties": False, "not": WANTED_DISJOINT_KEYS},
    {"type": "object", "patternProperties": {"^[0-9]$": True}, "additionalProperties": False, "maxProperties": 2,
     "not": {"anyOf": [*WANTED_DISJOINT_KEYS["anyOf"], {"patternProperties": {"^(1|2)$": False}}]}},
])
def test_negations_wanting_members_no_one_key_meets_at_once(schema):
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    for value in [{"1": 1, "2": 2}, {"3": 1, "5": 2}, {"1": 1}, {"1": 1, "2": 2, "7": 3}, {"2": 1, "1": "x"}, {"x": 1, "3": 1, "2": 1}, {}]:
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value


def test_all_of_objects_with_the_same_patterns_merge_exactly():
    # Both sides have the same patternProperties, one of them additionalProperties too: a
    # key matches the same patterns on each side, so the merge is exact (it used to raise).
    schema = {"allOf": [
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False},
        {"patternProperties": {"^x": {"minimum": 2}}, "properties": {"y": {"type": "string"}}},
    ]}
    grammar = grammar_from_schema(schema, property_order="any")
    validator = validator_for_schema(schema)
    for value in [{"xa": 2}, {"xa": 1}, {"xa": 2.5}, {"y": "s"}, {"z": 1}, {"xa": 3, "xb": 4}, {}, {"xa": "s"}]:
        assert grammar.accepts(dumps(value)) == validator.is_valid(value), value

NEGATED_STRING_SCHEMAS = [
    {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
    {"type": "string", "not": {"pattern": "[0-9]{2}"}},
    {"type": "string", "maxLength": 4, "not": {"anyOf": [{"pattern": "^ab"}, {"format": "ipv4"}]}},
    {"not": {"format": "date"}},
    {"enum": ["a", "ab", "b", "c"], "not": {"pattern": "a|^c"}},
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(NEGATED_STRING_SCHEMAS) - 1),
    text=st.one_of(
        st.text(alphabet="ab0129.-\"\\\u00e9\u4e2d", max_size=7),
        st.sampled_from(["1.2.3.4", "2024-02-29", "2023-02-29", "ab", "ba", "b", "a"]),
    ),
)
def test_negated_patterns_and_formats_decide_strings_as_jsonschema_does(index, text):
    schema = NEGATED_STRING_SCHEMAS[index]
    grammar = grammar_from_schema(schema, property_order="any")
    assert grammar.accepts(dumps(text)) == validator_for_schema(schema).is_valid(text)


def test_generation_under_a_negated_pattern_writes_only_strings_that_do_not_match():
    schema = {"type": "string", "not": {"pattern": "^[a-c]+$"}, "maxLength": 3}
    grammar = grammar_from_schema(schema)
    validator = validator_for_schema(schema)
    automaton = grammar.automaton
    # Every string of a, b, c and d up to three long, written as the generator spells it.
    for length in range(4):
        for letters in __import__("itertools").product("abcd", repeat=length):
            text = "".join(letters)
            config = automaton.step_bytes(automaton.initial, dumps(text).encode())
            reached = config != DEAD and automaton.is_accepting(config)
            assert reached == validator.is_valid(text), text


@pytest.mark.parametrize("index", range(len(NEGATED_STRING_SCHEMAS)))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_sampled_strings_under_negations_validate(index, seed):
    import random

    from surecall.engine.matcher import Matcher
    from surecall.engine.vocab import TokenVocabulary

    schema = NEGATED_STRING_SCHEMAS[index]
    tokens = [b"<eos>"] + [bytes([b]) for b in range(256)] + [b'"ab', b"ab", b'1.2.', b"3.4", b'"2024-', b"02-29", b'b"']
    vocab = TokenVocabulary(tokens, special_ids={0}, eos_token_ids={0})
    rng = random.Random(seed)
    matcher = Matcher(grammar_from_schema(schema), vocab, max_tokens=24)
    while not matcher.is_finished() and not (matcher.is_accepting() and rng.random() < 0.3):
        matcher.advance(rng.choice(matcher.allowed_token_ids().tolist()))
    assert matcher.is_accepting()
    assert validator_for_schema(schema).is_valid(json.loads(matcher.text_bytes()))


def test_schemas_nesting_past_the_stack_are_refused_clearly():
    deep: dict = {}
    for _ in range(3000):
        deep = {"type": "array", "items": deep}
    with pytest.raises(UnsupportedSchemaError, match="nest"):
        grammar_from_schema(deep)
    with pytest.raises(UnsupportedSchemaError, match="pattern"):
        grammar_from_schema({"type": "string", "pattern": "(?:" * 500 + "a" + ")" * 500})


def test_large_enums_keep_the_values_the_other_keywords_allow():
    values = [f"v{i}" for i in range(3000)] + [1, 1.0, True]
    grammar = grammar_from_schema({"enum": values, "maxLength": 3, "allOf": [{"enum": values[:2000] + [1]}]})
    assert grammar.accepts('"v99"') and grammar.accepts("1")
    assert not grammar.accepts('"v100"')  # longer than maxLength
    assert not grammar.accepts('"v2500"') and not grammar.accepts("true")  # outside the allOf's enum


def test_objects_with_the_same_key_patterns_keep_their_own_values():
    # Their key classes are explored once; each object still gives its keys its own values.
    def shaped(value: dict) -> dict:
        return {"type": "object", "properties": {"id": {"type": "integer"}}, "patternProperties": {"^x_": value, "_y$": {"type": "boolean"}}}

    grammar = grammar_from_schema({
        "type": "object",
        "properties": {"a": shaped({"type": "string"}), "b": shaped({"type": "integer"})},
        "additionalProperties": False,
    })
    assert grammar.accepts('{"a":{"id":1,"x_1":"s"},"b":{"x_1":2,"z_y":true}}')
    assert not grammar.accepts('{"a":{"x_1":2}}') and not grammar.accepts('{"b":{"x_1":"s"}}')
    assert not grammar.accepts('{"b":{"x_y":"s"}}')  # both patterns: an integer and a boolean at once
