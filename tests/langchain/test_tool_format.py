"""Tool-call syntax: the grammar enforces each tool_choice mode; parsers read back what it allows."""

from __future__ import annotations

import json
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.adapters.langchain.tool_format import (
    FORMATS,
    HERMES,
    JSON_LIST,
    ArgsDelta,
    CallStart,
    StreamingParser,
    TextDelta,
    ToolChoice,
    ToolCallFormat,
    ToolChoiceError,
    ToolSchemaError,
    call_schema,
    close_objects,
    format_for_template,
    normalize_tool_choice,
    parse_response,
    tool_call_grammar,
)
from surecall.engine.matcher import Matcher, Status
from surecall.engine.vocab import TokenVocabulary
from surecall.tools import ToolSpec
from surecall.validation import validate_json

ADD = ToolSpec(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)
WEATHER = ToolSpec(
    "get_weather",
    "Weather at a place.",
    {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)
TOOLS = [ADD, WEATHER]

ONE_CALL = JSON_LIST.render([("add", {"a": 1, "b": 2})])
TWO_CALLS = JSON_LIST.render([("add", {"a": 1, "b": 2}), ("get_weather", {"location": "Paris"})])
WEATHER_CALL = JSON_LIST.render([("get_weather", {"location": "Paris"})])

TAG = ToolSpec(
    "tag",
    "Tag items with a set of tags.",
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}, "required": ["tags"]},
)
LOG = ToolSpec(
    "log",
    "Log tags, repeats allowed.",
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}, "required": ["tags"]},
)
BYTE_VOCAB = TokenVocabulary([b"<eos>"] + [bytes([b]) for b in range(256)], special_ids={0}, eos_token_ids={0})


@pytest.mark.parametrize(
    "choice, parallel, accepted, rejected",
    [
        (ToolChoice("auto"), True, ["It is sunny.", ONE_CALL, TWO_CALLS], ["See <tool_call> below", "<tool_response>x"]),
        (ToolChoice("required"), True, [ONE_CALL, TWO_CALLS], ["It is sunny.", ""]),
        (ToolChoice("named", "get_weather"), True, [WEATHER_CALL], [ONE_CALL, TWO_CALLS, "It is sunny."]),
        (ToolChoice("none"), True, ["It is sunny."], [ONE_CALL]),
        (ToolChoice("required"), False, [ONE_CALL, WEATHER_CALL], [TWO_CALLS]),
    ],
)
def test_grammar_enforces_tool_choice(choice, parallel, accepted, rejected):
    grammar = tool_call_grammar(JSON_LIST, TOOLS, choice, parallel=parallel)
    for text in accepted:
        assert grammar.accepts(text), text
    for text in rejected:
        assert not grammar.accepts(text), text


def test_grammar_rejects_arguments_that_break_the_schema():
    grammar = tool_call_grammar(JSON_LIST, TOOLS, ToolChoice("required"))
    assert not grammar.accepts(JSON_LIST.render([("add", {"a": "one", "b": 2})]))
    assert not grammar.accepts(JSON_LIST.render([("add", {"a": 1})]))
    assert not grammar.accepts(JSON_LIST.render([("subtract", {"a": 1, "b": 2})]))


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=list(FORMATS))
def test_each_format_grammar_accepts_its_own_rendering(fmt):
    grammar = tool_call_grammar(fmt, TOOLS, ToolChoice("required"))
    assert grammar.accepts(fmt.render([("add", {"a": 1, "b": 2})]))
    assert grammar.accepts(fmt.render([("add", {"a": 1, "b": 2}), ("get_weather", {"location": "x"})]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), fmt=st.sampled_from(list(FORMATS.values())))
def test_every_response_the_grammar_allows_parses_to_valid_calls(seed, fmt):
    # Random walks through the masks: whatever the grammar lets through, whitespace included,
    # the parser must read back as calls whose arguments validate.
    rng = random.Random(seed)
    matcher = Matcher(tool_call_grammar(fmt, [ADD, WEATHER, TAG], ToolChoice("required")), BYTE_VOCAB, max_tokens=160)
    while not matcher.is_finished() and not (matcher.is_accepting() and rng.random() < 0.1):
        matcher.advance(rng.choice(matcher.allowed_token_ids().tolist()))
    content, calls = parse_response(matcher.text_bytes().decode("utf-8"), fmt)
    assert content == "" and calls
    specs = {spec.name: spec for spec in (ADD, WEATHER, TAG)}
    for call in calls:
        assert call.error is None
        validate_json(call.args, specs[call.name].parameters)


def test_answer_schema_replaces_free_text_beside_tools():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    grammar = tool_call_grammar(JSON_LIST, TOOLS, ToolChoice("auto"), answer_schema=schema)
    assert grammar.accepts('{"answer":"sunny"}')
    assert grammar.accepts(ONE_CALL)
    assert not grammar.accepts("It is sunny.")


def test_nested_definitions_of_several_tools_do_not_collide():
    def tool_with_item(name, item_type):
        return ToolSpec(
            name,
            "",
            {
                "type": "object",
                "properties": {"item": {"$ref": "#/$defs/Item"}},
                "required": ["item"],
                "$defs": {"Item": {"type": "object", "properties": {"v": {"type": item_type}}, "required": ["v"]}},
            },
        )

    specs = [tool_with_item("first", "integer"), tool_with_item("second", "string")]
    schema = call_schema(specs)
    assert set(schema["$defs"]) == {"first__Item", "second__Item"}
    grammar = tool_call_grammar(JSON_LIST, specs, ToolChoice("required"))
    assert grammar.accepts(JSON_LIST.render([("first", {"item": {"v": 1}})]))
    assert grammar.accepts(JSON_LIST.render([("second", {"item": {"v": "x"}})]))
    assert not grammar.accepts(JSON_LIST.render([("first", {"item": {"v": "x"}})]))


CUSTOM = ToolCallFormat("custom", "<<call>>", "<<call>>[", "", "", ",", "]")


@pytest.mark.parametrize("fmt", [*FORMATS.values(), CUSTOM], ids=[*FORMATS, "custom"])
@pytest.mark.parametrize("specs", [[TAG], [TAG, LOG, ADD]], ids=["one tool", "three tools"])
def test_unique_items_in_tool_arguments_are_enforced_in_every_call(fmt, specs):
    grammar = tool_call_grammar(fmt, specs, ToolChoice("required"))
    unique = ("tag", {"tags": ["a", "b"]})
    assert grammar.accepts(fmt.render([unique]))
    assert not grammar.accepts(fmt.render([("tag", {"tags": ["a", "a"]})]))
    if len(specs) > 1:  # only the arguments of the tool that asks for it
        assert grammar.accepts(fmt.render([("log", {"tags": ["a", "a"]}), unique]))
        assert not grammar.accepts(fmt.render([("log", {"tags": ["a"]}), ("tag", {"tags": ["b", "c", "b"]})]))


def test_a_draft_the_tools_declare_applies_to_their_arguments():
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    draft4 = ToolSpec("count", "", {"$schema": "http://json-schema.org/draft-04/schema#", **parameters})
    grammar = tool_call_grammar(JSON_LIST, [draft4], ToolChoice("required"))
    assert grammar.accepts(JSON_LIST.render([("count", {"n": 1})]))
    assert not grammar.accepts('<tool_call>[{"name":"count","arguments":{"n":1.0}}]</tool_call>')
    latest = tool_call_grammar(JSON_LIST, [ToolSpec("count", "", parameters)], ToolChoice("required"))
    assert latest.accepts('<tool_call>[{"name":"count","arguments":{"n":1.0}}]</tool_call>')


def test_unique_items_check_leaves_plain_text_alone_and_checks_a_json_answer():
    grammar = tool_call_grammar(HERMES, [TAG], ToolChoice("auto"))
    assert grammar.accepts('Repeats are fine in text: ["a","a"]')
    answer = {"type": "object", "properties": {"labels": TAG.parameters["properties"]["tags"]}, "required": ["labels"]}
    grammar = tool_call_grammar(HERMES, [ADD], ToolChoice("auto"), answer_schema=answer)
    assert grammar.accepts('{"labels": ["a", "b"]}') and not grammar.accepts('{"labels": ["a", "a"]}')
    assert grammar.accepts(HERMES.render([("add", {"a": 1, "b": 1})]))


def _advanced(grammar, text: bytes) -> Matcher:
    matcher = Matcher(grammar, BYTE_VOCAB)
    for byte in text:
        assert matcher.advance(BYTE_VOCAB.tokenize_bytes(bytes([byte]))[0]) is Status.ACCEPTED
    return matcher


def test_plain_text_beside_checked_tools_asks_the_check_nothing(monkeypatch):
    grammar = tool_call_grammar(JSON_LIST, [TAG], ToolChoice("auto"))
    matcher = _advanced(grammar, b'Sure: ["a","a')

    def refuse(*_args):
        raise AssertionError("the check was asked about plain text")

    monkeypatch.setattr(type(grammar.text_check), "refused_among", refuse)
    assert BYTE_VOCAB.tokenize_bytes(b'"')[0] in set(matcher.allowed_token_ids().tolist())


def test_tool_call_masks_drop_the_token_that_repeats_an_item_and_the_check_pickles():
    vocab = BYTE_VOCAB
    grammar = pickle.loads(pickle.dumps(tool_call_grammar(JSON_LIST, [TAG, LOG], ToolChoice("required"))))
    matcher = _advanced(grammar, b'<tool_call>[{"name":"tag","arguments":{"tags":["a","a')
    allowed = set(matcher.allowed_token_ids().tolist())
    quote, letter = vocab.tokenize_bytes(b'"')[0], vocab.tokenize_bytes(b"b")[0]
    assert quote not in allowed and letter in allowed
    assert matcher.advance(quote) is Status.REJECTED


def test_schema_the_translator_rejects_names_the_tool():
    weird = ToolSpec("weird", "", {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}})
    with pytest.raises(ToolSchemaError, match="weird"):
        tool_call_grammar(JSON_LIST, [ADD, weird], ToolChoice("auto"))


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, ToolChoice("auto")),
        ("auto", ToolChoice("auto")),
        ("any", ToolChoice("required")),
        ("required", ToolChoice("required")),
        (True, ToolChoice("required")),
        ("none", ToolChoice("none")),
        ("add", ToolChoice("named", "add")),
        ({"type": "function", "function": {"name": "add"}}, ToolChoice("named", "add")),
        ({"type": "tool", "name": "add"}, ToolChoice("named", "add")),
    ],
)
def test_tool_choice_spellings(value, expected):
    assert normalize_tool_choice(value, ["add", "get_weather"]) == expected


@pytest.mark.parametrize("value", ["subtract", {"type": "function", "function": {"name": "nope"}}, 3.5])
def test_unknown_tool_choice_is_a_clear_error(value):
    with pytest.raises(ToolChoiceError):
        normalize_tool_choice(value, ["add"])


def test_template_decides_the_format():
    assert format_for_template("{% for m in messages %}{{ m.content }}{% endfor %}") is JSON_LIST
    assert format_for_template("{%- if tools %}<tool_call>{{ tool_call | tojson }}</tool_call>{% endif %}") is HERMES
    assert format_for_template(None) is JSON_LIST


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
call_lists = st.lists(
    st.tuples(st.sampled_from(["add", "get_weather", "x.y-z"]), st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(calls=call_lists, fmt_name=st.sampled_from(sorted(FORMATS)), piece=st.integers(1, 9))
def test_rendered_calls_parse_back_whole_and_streamed(calls, fmt_name, piece):
    fmt = FORMATS[fmt_name]
    text = fmt.render(calls)
    content, parsed = parse_response(text, fmt)
    assert content == ""
    assert [(c.name, c.args) for c in parsed] == [(name, args) for name, args in calls]

    parser = StreamingParser(fmt)
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += list(parser.finish())
    assert not any(isinstance(e, TextDelta) for e in events)
    streamed: dict[int, list] = {}
    for event in events:
        if isinstance(event, CallStart):
            streamed[event.index] = [event.name, ""]
        elif isinstance(event, ArgsDelta):
            streamed[event.index][1] += event.text
    assert [(name, json.loads(args)) for name, args in streamed.values()] == [(name, args) for name, args in calls]


@given(text=st.text(min_size=1, max_size=40).filter(lambda t: "<tool_call>" not in t), piece=st.integers(1, 7))
def test_plain_text_streams_unchanged(text, piece):
    parser = StreamingParser(JSON_LIST)
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += list(parser.finish())
    assert all(isinstance(e, TextDelta) for e in events)
    assert "".join(e.text for e in events) == text
    assert parse_response(text, JSON_LIST) == (text, [])


def test_objects_are_closed_except_where_allof_combines_them():
    schema = {
        "type": "object",
        "properties": {"p": {"type": "array", "items": {"type": "object", "properties": {"q": {}}}}},
    }
    closed = close_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["p"]["items"]["additionalProperties"] is False
    combined = close_objects({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}], "properties": {"c": {}}})
    assert "additionalProperties" not in combined
    assert all("additionalProperties" not in branch for branch in combined["allOf"])
    assert close_objects({"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}})["additionalProperties"] == {"type": "integer"}


def test_hundreds_of_tools_make_one_grammar():
    # A plain union of many tools grows with them; only unions multiplied together are bounded.
    specs = [
        ToolSpec(f"tool_{i}", "d", {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]})
        for i in range(300)
    ]
    grammar = tool_call_grammar(HERMES, specs, normalize_tool_choice("required", [s.name for s in specs]))
    call = '<tool_call>\n{"name": "tool_299", "arguments": {"q": "x", "n": 3}}\n</tool_call>'
    assert grammar.accepts(call)
    assert not grammar.accepts(call.replace("tool_299", "tool_300"))
    assert not grammar.accepts(call.replace('"n": 3', '"n": "3"'))
