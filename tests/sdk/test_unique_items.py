"""``uniqueItems`` enforced at run time: ``accepts`` and the matcher's masks reject repeated items."""

from __future__ import annotations

import decimal
import json
import pickle
import random
import re

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine import matcher as matcher_module
from surecall.engine.automaton import DEAD
from surecall.engine.matcher import Matcher, Status
from surecall.engine.trie import unpack_ids, words_for
from surecall.engine.vocab import TokenVocabulary
from surecall.schema import UnsupportedSchemaError, grammar_from_schema
from surecall.schema_unique import canonical

PIECES = [b'["', b'","', b'"]', b'",', b"1,", b"1]", b"1.0", b"true", b"ue", b"tr", b"null", b"e,", b"e]", b"[[", b"]]", b"],[", b'{"', b'":', b"ab", b"a"]
VOCAB = TokenVocabulary([b"<eos>"] + [bytes([b]) for b in range(256)] + PIECES, special_ids={0}, eos_token_ids={0})


def token(piece: bytes) -> int:
    ids = VOCAB.tokenize_bytes(piece)
    assert len(ids) == 1, piece
    return ids[0]


def sample(grammar, seed: int, max_steps: int = 60) -> tuple[bytes, bool]:
    """A random walk through the masks; (text, finished)."""
    rng = random.Random(seed)
    matcher = Matcher(grammar, VOCAB)
    for _ in range(max_steps):
        # The bitmask first: it is checked without the allowed ids, which come after.
        bits = np.zeros(words_for(VOCAB.size), dtype=np.int32)
        matcher.fill_bitmask(bits)
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed, f"no token allowed after {matcher.text_bytes()!r}"
        assert unpack_ids(bits.view(np.uint32), VOCAB.size).tolist() == allowed
        if matcher.is_accepting() and rng.random() < 0.3:
            return matcher.text_bytes(), True
        choices = [t for t in allowed if t not in VOCAB.eos_token_ids] or allowed
        status = matcher.advance(rng.choice(choices))
        assert status is not Status.REJECTED
        if status is Status.FINISHED:
            return matcher.text_bytes(), True
    return matcher.text_bytes(), False


@pytest.mark.parametrize(
    "text,valid",
    [
        ("[1,1]", False), ("[1,1.0]", False), ("[1,2]", True), ("[true,1]", True), ("[0,false]", True),
        ('[{"a":1,"b":2},{"b":2,"a":1}]', False), ('[{"a":1},{"a":2}]', True), ("[[1],[1]]", False), ("[[1,1]]", True),
        ('["a","a"]', False), ('["a","b","a"]', False), ('["a\\"","a\\""]', False), ("[null,null]", False), ("[]", True),
    ],
)
def test_accepts_rejects_repeated_items(text, valid):
    schema = {"type": "array", "uniqueItems": True}
    assert grammar_from_schema(schema).accepts(text) is valid
    assert grammar_from_schema(schema, whitespace="flexible").accepts(text.replace(",", " , ")) is valid


def test_numbers_beyond_decimal_range_compare_by_value():
    grammar = grammar_from_schema({"type": "array", "uniqueItems": True})
    # Exponents past what Decimal holds (about 10**18), and more digits than int() reads.
    assert not grammar.accepts("[0E1843183153432482441,0]")
    assert not grammar.accepts("[1E2000000000000000000,10.0E1999999999999999999]")
    assert grammar.accepts("[1E2000000000000000000,1E2000000000000000001,-1E2000000000000000000,1E-2000000000000000000]")
    big = "1" + "0" * 5000
    assert not grammar.accepts(f"[{big},1E5000]") and grammar.accepts(f"[{big},1E4999]")


def test_canonical_values_follow_json_schema_equality():
    assert canonical(1) == canonical(1.0) and canonical(True) != canonical(1) and canonical(0) != canonical(False)
    assert canonical({"a": [1, {"b": None}]}) == canonical({"a": [1.0, {"b": None}]})


def test_nested_and_recursive_unique_arrays():
    tree = {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "uniqueItems": True}}}}, "$ref": "#/$defs/node"}
    grammar = grammar_from_schema(tree)
    assert grammar.accepts('{"kids":[{"kids":[]},{}]}')
    assert not grammar.accepts('{"kids":[{},{}]}')
    assert not grammar.accepts('{"kids":[{"kids":[{"kids":[]},{"kids":[]}]}]}')
    matrix = grammar_from_schema({"type": "array", "uniqueItems": True, "items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}})
    assert matrix.accepts("[[1,2],[2,1]]") and not matrix.accepts("[[1,2],[1,2]]") and not matrix.accepts("[[1,1]]")
    plain_inner = grammar_from_schema({"type": "array", "items": {"type": "array", "uniqueItems": True}})
    assert plain_inner.accepts("[[1],[1]]") and not plain_inner.accepts("[[1,1]]")


def test_only_arrays_that_must_be_unique_are_checked():
    schema = {"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}, "p": {"type": "array"}}, "additionalProperties": {"allOf": [{"type": "array", "uniqueItems": True}]}}
    grammar = grammar_from_schema(schema, property_order="any")
    assert grammar.accepts('{"p":[1,1],"u":[1,2]}')
    assert not grammar.accepts('{"u":[1,1]}')
    assert not grammar.accepts('{"other":["x","x"]}')


def test_conditional_unique_items_raise_with_pointer():
    with pytest.raises(UnsupportedSchemaError) as info:
        grammar_from_schema({"type": "array", "items": {"anyOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "items": {"type": "integer"}}]}})
    assert info.value.keyword == "uniqueItems" and info.value.pointer == "#/items/anyOf/0"
    with pytest.raises(UnsupportedSchemaError) as info:
        grammar_from_schema({"type": "object", "if": {"required": ["a"]}, "then": {"properties": {"b": {"type": "array", "uniqueItems": True}}}})
    assert info.value.pointer == "#/then/properties/b"


def test_the_only_branch_admitting_arrays_or_objects_is_enforced():
    by_ref = {"$defs": {"list": {"type": "array", "uniqueItems": True}}, "anyOf": [{"type": "string"}, {"$ref": "#/$defs/list"}]}
    inline = {"oneOf": [{"type": "string"}, {"type": "array", "uniqueItems": True}]}
    for schema in (by_ref, inline):
        grammar = grammar_from_schema(schema)
        assert grammar.accepts('"x"') and grammar.accepts("[1,2]") and not grammar.accepts("[1,1]")
    nested = {"type": "array", "items": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"k": {"type": "array", "uniqueItems": True}}}]}}
    grammar = grammar_from_schema(nested, property_order="any")
    assert grammar.accepts('[null,{"k":[1,2]}]') and not grammar.accepts('[null,{"k":[2,2]}]')


def test_masks_drop_tokens_that_complete_a_repeated_item():
    grammar = grammar_from_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    matcher = Matcher(grammar, VOCAB)
    assert matcher.advance_many([token(b'["'), token(b"a"), token(b'","'), token(b"b"), token(b'","'), token(b"a")]) is Status.ACCEPTED
    allowed = set(matcher.allowed_token_ids().tolist())
    assert not {token(b'"'), token(b'"]'), token(b'","'), token(b'",')} & allowed
    assert token(b"b") in allowed and token(b"a") in allowed
    assert matcher.advance(token(b'"]')) is Status.REJECTED
    assert matcher.advance(token(b"b")) is Status.ACCEPTED and matcher.advance(token(b'"]')) is Status.FINISHED


@pytest.mark.parametrize("few_checked", [1024, 0], ids=["by ids", "by packed words"])
def test_masks_inside_a_string_after_a_null_item(few_checked, monkeypatch):
    # A null is seen as ("null",), with no value: the strings seen are read apart from it.
    monkeypatch.setattr(matcher_module, "_FEW_CHECKED", few_checked)
    grammar = grammar_from_schema({"type": "array", "uniqueItems": True})
    matcher = Matcher(grammar, VOCAB)
    assert matcher.advance_many([token(b"["), token(b"null"), token(b","), token(b'"'), token(b"a")]) is Status.ACCEPTED
    assert token(b'"]') in set(matcher.allowed_token_ids().tolist())
    matcher = Matcher(grammar, VOCAB)
    opened = [token(b'["'), token(b"a"), token(b'",'), token(b"null"), token(b","), token(b'"'), token(b"a")]
    assert matcher.advance_many(opened) is Status.ACCEPTED
    allowed = set(matcher.allowed_token_ids().tolist())
    assert token(b'"]') not in allowed and token(b"b") in allowed


def test_masks_drop_repeated_literals_and_numbers():
    grammar = grammar_from_schema({"type": "array", "uniqueItems": True})
    matcher = Matcher(grammar, VOCAB)
    matcher.advance_many([token(b"["), token(b"true"), token(b",")])
    allowed = set(matcher.allowed_token_ids().tolist())
    assert token(b"tr") not in allowed and token(b"t") not in allowed and token(b"true") not in allowed
    assert token(b"n") in allowed and token(b"null") in allowed
    matcher.advance_many([token(b"1,"), token(b"1.0")])
    allowed = set(matcher.allowed_token_ids().tolist())
    assert token(b",") not in allowed and token(b"]") not in allowed
    assert token(b"1") in allowed and token(b"1]") in allowed  # 1.01 is a new value


@pytest.mark.parametrize("few_checked", [1024, 0], ids=["by ids", "by packed words"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_sampled_outputs_are_valid(few_checked, seed):
    # Small masks look the check's candidates up by id, large ones in packed words: both.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matcher_module, "_FEW_CHECKED", few_checked)
        _check_sampled_output(seed)


def _check_sampled_output(seed):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "grid": {"type": "array", "items": {"type": "array", "uniqueItems": True}, "uniqueItems": True}}, "required": ["tags", "grid"], "additionalProperties": False}
    text, finished = sample(grammar_from_schema(schema), seed)
    if finished:
        # Decimal keeps numbers past a float's range apart: 5e+403 and 929e703 are both inf as floats.
        jsonschema.validate(json.loads(text, parse_float=decimal.Decimal), schema)


def test_pickled_grammar_keeps_the_check():
    grammar = pickle.loads(pickle.dumps(grammar_from_schema({"type": "array", "uniqueItems": True})))
    assert grammar.accepts("[1,2]") and not grammar.accepts("[2,2]")


def test_draft7_ignores_unique_items_next_to_ref():
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"list": {"type": "array"}}, "properties": {"a": {"$ref": "#/definitions/list", "uniqueItems": True}, "b": {"type": "array", "uniqueItems": True}}}
    grammar = grammar_from_schema(schema, property_order="any")
    assert grammar.accepts('{"a":[1,1]}') and not grammar.accepts('{"b":[1,1]}')
    assert grammar.accepts('{"a":[1,1]}') == jsonschema.Draft7Validator(schema).is_valid({"a": [1, 1]})


def _frames_of(state) -> tuple:
    return tuple((f.is_array, f.path, f.unique, f.seen, f.index, f.expect_key, f.key, f.start, f.tags) for f in state.frames)


def _tagged(kind, payload: dict, required=None) -> dict:
    properties = {"kind": kind, **payload}
    return {"type": "object", "properties": properties, "required": required or list(properties), "additionalProperties": False}


UNIQUE_TAGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
PLAIN_TAGS = {"type": "array", "items": {"type": "string"}}
# Three ways to spell a discriminated union: const, a one-member enum, a branch behind $ref.
TAGGED_UNION = {
    "$defs": {"plain": _tagged({"enum": ["plain"]}, {"tags": PLAIN_TAGS})},
    "type": "array",
    "items": {"anyOf": [_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}), {"$ref": "#/$defs/plain"}]},
}


def test_a_discriminated_union_enforces_unique_items_in_the_branch_its_first_property_names():
    grammar = grammar_from_schema(TAGGED_UNION)
    assert grammar.accepts('[{"kind":"set","tags":["a","b"]},{"kind":"plain","tags":["a","a"]}]')
    assert not grammar.accepts('[{"kind":"plain","tags":["a","a"]},{"kind":"set","tags":["b","b"]}]')
    assert grammar.accepts('[{"kind":"set","tags":["a"]},{"kind":"set","tags":["a"]}]')  # across objects: no repeat
    exclusive = grammar_from_schema({"oneOf": [_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}), _tagged({"const": "plain"}, {"tags": PLAIN_TAGS})]})
    assert exclusive.accepts('{"kind":"plain","tags":["a","a"]}') and not exclusive.accepts('{"kind":"set","tags":["a","a"]}')


@pytest.mark.parametrize(
    "branches, order",
    [
        # the discriminator is written after the array: the check would not know the branch in time
        ([_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}), _tagged({"const": "plain"}, {"tags": PLAIN_TAGS})], "any"),
        ([{**_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}), "properties": {"tags": UNIQUE_TAGS, "kind": {"const": "set"}}},
          _tagged({"const": "plain"}, {"tags": PLAIN_TAGS})], "schema"),
        # not required, or the same value twice: the text does not tell the branches apart
        ([_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}, required=["tags"]), _tagged({"const": "plain"}, {"tags": PLAIN_TAGS})], "schema"),
        ([_tagged({"const": "set"}, {"tags": UNIQUE_TAGS}), _tagged({"const": "set"}, {"tags": PLAIN_TAGS})], "schema"),
        ([_tagged({"enum": ["set", "bag"]}, {"tags": UNIQUE_TAGS}), _tagged({"const": "plain"}, {"tags": PLAIN_TAGS})], "schema"),
    ],
    ids=["any order", "not first", "not required", "same value", "two values"],
)
def test_unions_the_text_cannot_tell_apart_in_time_still_raise(branches, order):
    with pytest.raises(UnsupportedSchemaError) as info:
        grammar_from_schema({"anyOf": branches}, property_order=order)
    assert info.value.keyword == "uniqueItems"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_sampled_discriminated_unions_are_valid(seed):
    schema = {"type": "array", "items": TAGGED_UNION["items"], "maxItems": 3, "$defs": TAGGED_UNION["$defs"]}
    text, finished = sample(grammar_from_schema(schema), seed, max_steps=120)
    if finished:
        jsonschema.validate(json.loads(text), schema)


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from([b'[[1,2],[2,1],[1,2]]', b'{"a":[1,"x",[1]],"b":[[1],[1]]}', b'[{"k":[1,1]},{"k":[1]}]']),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    branch=st.sampled_from([b"1]", b'"x"],', b"]]", b",[1", b'}],[{"k":']),
)
def test_feeding_in_pieces_matches_whole_text_and_leaves_earlier_states_untouched(text, cuts, branch):
    schema = {"type": ["array", "object"], "items": {"type": "array", "uniqueItems": True},
              "additionalProperties": {"type": "array", "uniqueItems": True}, "uniqueItems": True}
    check = grammar_from_schema(schema).text_check
    state, start = check.initial(), 0
    for cut in sorted({min(cut, len(text)) for cut in cuts} | {len(text)}):
        before = _frames_of(state)
        try:  # a branch not taken must not change the state it started from
            check.feed(state, branch)
        except ValueError:  # text the grammar would never allow here
            pass
        assert _frames_of(state) == before
        state = check.feed(state, text[start:cut])
        start = cut
        if state is None:
            break
    assert (state is not None) == check.accepts(text)


_PIECES = [
    b'"', b'",', b'"]', b'"],', b'a"', b'b",', b'"}', b'"]}', b'\\"', b'\xc3', b'\xa9"', b'a', b'", "', b'",[', b'":', b'\n"',
    b'"1', b'" ,', b'","', b'","a', b'b","', b'","b"', b'"],"', b'"]],"', b'",["', b'", "\\', b'"},"',
    b'\\\\"', b'\\""', b'\\"",', b'a\\"b', b'\\\\",', b'\\"a"]', b'\\',
]


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.text(alphabet='ab\u00e9"\\\n', max_size=3), min_size=1, max_size=5),
    cut=st.integers(0, 60),
    key=st.booleans(),
)
def test_refused_among_answers_as_feeding_each_token(items, cut, key):
    schema = {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}
    check = grammar_from_schema(schema, property_order="any").text_check
    text = b'{"tags":[' + b",".join(json.dumps(item, ensure_ascii=False).encode() for item in items)
    if key:
        text += b'],"'
    _assert_refused_among_as_fed(check, check.feed(check.initial(), text[: min(cut, len(text))] if not key else text))


def _assert_refused_among_as_fed(check, state) -> None:
    if state is None:
        return
    pieces, expected = [], []
    for piece in _PIECES:
        try:  # pieces the grammar would never allow here are left out
            fed = check.feed(state, piece)
        except ValueError:
            continue
        if fed is None:
            expected.append(len(pieces))
        pieces.append(piece)
    assert check.refused_among(state, pieces) == expected


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.lists(st.text(alphabet='ab"', max_size=2), max_size=3), min_size=1, max_size=4),
    cut=st.integers(0, 60),
)
def test_refused_among_answers_as_feeding_each_token_in_nested_unique_arrays(items, cut):
    # Closing an inner array completes an item of the outer unique one.
    inner = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    check = grammar_from_schema({"type": "array", "items": inner, "uniqueItems": True}).text_check
    text = json.dumps(items, separators=(",", ":")).encode()
    _assert_refused_among_as_fed(check, check.feed(check.initial(), text[: min(cut, len(text))]))


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.lists(st.sampled_from(["a", "b", 1, True]), max_size=3), min_size=1, max_size=4),
    piece=st.binary(max_size=6).map(lambda data: bytes(b'"[],{}:1ab\\te'[b % 13] for b in data)),
)
def test_a_token_without_trigger_bytes_is_never_refused(items, piece):
    inner = {"type": "array", "items": {"type": ["string", "integer", "boolean"]}, "uniqueItems": True}
    grammar = grammar_from_schema({"type": "array", "items": inner, "uniqueItems": True})
    check, automaton = grammar.text_check, grammar.automaton
    text = json.dumps(items, separators=(",", ":")).encode()
    for cut in range(len(text) + 1):
        state = check.feed(check.initial(), text[:cut])
        if state is None:
            return  # a repeat already: so are the longer prefixes
        triggers, in_order = check.trigger_bytes(state), check.trigger_in_order(state)
        for added in [*_PIECES, piece]:
            if automaton.step_bytes(automaton.initial, text[:cut] + added) == DEAD:
                continue  # text the grammar never allows here
            if triggers is None or any(byte in added for byte in triggers):
                continue
            if in_order and re.search(b".*?".join(re.escape(bytes([b])) for b in in_order), added):
                continue
            assert check.feed(state, added) is not None, (text[:cut], added)


def test_refused_among_decides_closing_tokens_by_the_closed_string():
    check = grammar_from_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True}).text_check
    state = check.feed(check.initial(), '["caf\u00e9","ca'.encode())
    tokens = [b'f\xc3\xa9",', b'b"]', b'"1', b'f\xc3\xa9","', b'b","x', b'b","x"', b'\\",', b'abc']
    # Twice: the second time each token's split at its quote is the one kept from the first.
    for _ in range(2):
        assert check._quick_verdicts(state, tokens) == [
            False, True, None,
            # A string opened after the closed one and left open completes nothing more.
            False, True, None,
            # An escaped quote does not close the string (nor does a token without a quote).
            True, None,
        ]
    # One after escapes does close it, read as the scan reads it.
    escaped = check.feed(check.initial(), b'["a\\"b","a')
    assert check._quick_verdicts(escaped, [b'\\"b"]', b'\\"c"]']) == [False, True]
    # Outside a string there is no quick verdict.
    assert check._quick_verdicts(check.feed(check.initial(), b'["a",'), [b'"a"]']) is None
    assert check.refused_among(state, [b'f\xc3\xa9",', b'b"]', b'f\xc3\xa9"]', b'\\"']) == [0, 2]
