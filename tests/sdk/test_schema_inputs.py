"""Every kind of schema input goes through JSON Schema to the same grammar."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import ipaddress
import random
from typing import Literal, Optional, TypedDict

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine.matcher import Matcher
from surecall.engine.vocab import TokenVocabulary
from surecall.schema import SchemaInputError, grammar_from_schema, parse_docstring, to_json_schema

BYTES = TokenVocabulary([b"<eos>"] + [bytes([b]) for b in range(256)], special_ids={0}, eos_token_ids={0})


class Point(pydantic.BaseModel):
    x: int
    y: int = 0
    label: Literal["a", "b"] = "a"


class Tree(pydantic.BaseModel):
    value: int
    children: list["Tree"] = []


class Movie(TypedDict):
    title: str
    year: int


@dataclasses.dataclass
class Box:
    width: float
    tags: list[str]


def get_weather(city: str, unit: Literal["C", "F"] = "C", days: Optional[int] = None) -> str:
    """Look up the weather.

    Args:
        city: Name of the city,
            e.g. Paris.
        unit: Temperature unit.
        days: How many days ahead.
    """
    return city


def book(room: int, *, guests: int) -> None:
    """Book a room.

    :param room: room number
    :param guests: number of guests
    """


OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Look up the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_pydantic_v2_model():
    grammar = grammar_from_schema(Point)
    assert grammar.accepts('{"x":1,"y":2,"label":"b"}')
    assert grammar.accepts('{"x":1}')
    assert not grammar.accepts('{"y":2}')
    assert not grammar.accepts('{"x":1,"label":"c"}')


class Invoice(pydantic.BaseModel):
    total: decimal.Decimal
    rate: pydantic.condecimal(max_digits=4, decimal_places=2)
    fee: pydantic.condecimal(ge=0)
    tax: pydantic.confloat(allow_inf_nan=False) = 0.0


@pytest.mark.parametrize(
    "text, accepted",
    [
        ('{"total":12.5,"rate":99.99,"fee":0}', True),
        ('{"total":-3,"rate":-0.5,"fee":1000}', True),
        ('{"total":"12.5","rate":1,"fee":1}', False),  # Pydantic's own schema admits any string here
        ('{"total":"abc","rate":1,"fee":1}', False),
        ('{"total":1,"rate":1.234,"fee":1}', False),  # three decimal places
        ('{"total":1,"rate":100,"fee":1}', False),  # five digits
        ('{"total":1,"rate":1,"fee":-1}', False),
        ('{"total":1e999,"rate":1,"fee":1}', False),  # no finite decimal
        ('{"total":1,"rate":1,"fee":1,"tax":1e999}', False),  # a float that refuses infinity
        ('{"total":1,"rate":1,"fee":1,"tax":-2.5}', True),
    ],
)
def test_decimal_fields_admit_only_what_pydantic_validates(text, accepted):
    _check_verdict(Invoice, text, accepted)


def _check_verdict(model, text: str, accepted: bool) -> None:
    """The grammar's verdict on ``text`` is ``accepted``, and what it accepts Pydantic validates."""
    assert grammar_from_schema(model).accepts(text) is accepted
    if accepted:
        model.model_validate_json(text)


class Link(pydantic.BaseModel):
    url: pydantic.HttpUrl
    every: datetime.timedelta


@pytest.mark.parametrize(
    "url, every, accepted",
    [
        ("http://example.com", "P1D", True),
        ("HTTPS://a-b.example:8080/x?y#z", "PT999999S", True),
        ("ftp://example.com", "P1D", False),  # Pydantic's schema says any URI
        ("https://.com", "P1D", False),  # an empty label
        ("https://xn--abc.com", "P1D", False),  # read as punycode
        ("https://host.5", "P1D", False),  # read as a malformed IPv4 address
        ("http://example.com", "PT9999999S", False),  # overflows Pydantic's duration parser
    ],
)
def test_url_and_timedelta_fields_admit_only_what_pydantic_validates(url, every, accepted):
    _check_verdict(Link, f'{{"url":"{url}","every":"{every}"}}', accepted)


class Host(pydantic.BaseModel):
    net: ipaddress.IPv4Network
    iface: ipaddress.IPv6Interface
    seen: pydantic.NaiveDatetime
    # A field named like a keyword holding instances, with a default holding a format key.
    default: list[ipaddress.IPv4Network] = pydantic.Field(default=[], examples=[{"format": "ipv4network"}])


@pytest.mark.parametrize(
    "net, iface, seen, accepted",
    [
        ("10.0.0.0/8", "::1/64", "2024-02-29T10:00:00", True),
        ("192.168.1.7", "2001:db8::1", "2024-01-01t00:00:00.5", True),
        ("10.0.0.1/8", "::1", "2024-01-01T00:00:00", False),  # host bits set
        ("any text", "::1", "2024-01-01T00:00:00", False),  # a format no JSON Schema validator knows
        ("10.0.0.0/8", "::1/129", "2024-01-01T00:00:00", False),
        ("10.0.0.0/8", "::1", "2024-01-01T00:00:00Z", False),  # naive: no offset
        ("10.0.0.0/8", "::1", "2023-02-29T00:00:00", False),
    ],
)
def test_network_and_naive_datetime_fields_admit_only_what_pydantic_validates(net, iface, seen, accepted):
    _check_verdict(Host, f'{{"net":"{net}","iface":"{iface}","seen":"{seen}"}}', accepted)
    listed = f'{{"net":"10.0.0.0/8","iface":"::1","seen":"2024-01-01T00:00:00","default":["{net}"]}}'
    assert grammar_from_schema(Host).accepts(listed) is (net != "10.0.0.1/8" and net != "any text")
    assert to_json_schema(Host)["properties"]["default"]["examples"] == [{"format": "ipv4network"}]


@pytest.mark.parametrize("model", [Invoice, Link, Host])
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_sampled_fields_validate_with_pydantic(model, seed):
    rng = random.Random(seed)
    matcher = Matcher(grammar_from_schema(model), BYTES, max_tokens=80)
    while not matcher.is_finished() and not (matcher.is_accepting() and rng.random() < 0.2):
        matcher.advance(rng.choice(matcher.allowed_token_ids().tolist()))
    model.model_validate_json(matcher.text_bytes())


def test_recursive_pydantic_model():
    grammar = grammar_from_schema(Tree)
    assert grammar.accepts('{"value":1,"children":[{"value":2,"children":[{"value":3}]}]}')
    assert not grammar.accepts('{"value":1,"children":[{"children":[]}]}')


def test_pydantic_v1_model():
    from pydantic import v1

    class Legacy(v1.BaseModel):
        name: str
        count: int

    schema = to_json_schema(Legacy)
    assert schema["required"] == ["name", "count"]
    grammar = grammar_from_schema(Legacy)
    assert grammar.accepts('{"name":"a","count":3}')
    assert not grammar.accepts('{"name":"a","count":"3"}')


def test_typeddict_and_dataclass():
    assert grammar_from_schema(Movie).accepts('{"title":"Up","year":2009}')
    assert not grammar_from_schema(Movie).accepts('{"title":"Up"}')
    assert grammar_from_schema(Box).accepts('{"width":1.5,"tags":["a"]}')
    assert not grammar_from_schema(Box).accepts('{"width":"wide","tags":[]}')


def test_function_signature_and_google_docstring():
    schema = to_json_schema(get_weather)
    assert schema["description"] == "Look up the weather."
    assert schema["properties"]["city"]["description"] == "Name of the city, e.g. Paris."
    assert schema["properties"]["unit"]["description"] == "Temperature unit."
    assert schema["required"] == ["city"]
    grammar = grammar_from_schema(get_weather)
    assert grammar.accepts('{"city":"Paris","unit":"F"}')
    assert not grammar.accepts('{"city":"Paris","unit":"K"}')


def test_function_with_sphinx_docstring():
    schema = to_json_schema(book)
    assert schema["properties"]["room"]["description"] == "room number"
    assert schema["properties"]["guests"]["description"] == "number of guests"
    assert grammar_from_schema(book).accepts('{"room":1,"guests":2}')


def test_variadic_function_is_rejected_clearly():
    def variadic(*args):
        return args

    with pytest.raises(SchemaInputError, match=r"\*args"):
        to_json_schema(variadic)


def test_docstring_parser_keeps_summary_only():
    summary, params = parse_docstring("Do it.\n\nMore text.\n\nArgs:\n    a: first\n\nReturns:\n    nothing")
    assert summary == "Do it."
    assert params == {"a": "first"}


@pytest.mark.parametrize(
    "tool",
    [
        OPENAI_TOOL,
        OPENAI_TOOL["function"],
        {"name": "get_weather", "description": "d", "input_schema": OPENAI_TOOL["function"]["parameters"]},
    ],
    ids=["openai", "openai-bare-function", "anthropic"],
)
def test_tool_dicts(tool):
    assert to_json_schema(tool) == OPENAI_TOOL["function"]["parameters"]
    grammar = grammar_from_schema(tool)
    assert grammar.accepts('{"city":"Oslo"}')
    assert not grammar.accepts("{}")


def test_json_schema_dicts_both_drafts():
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"id": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"id": {"$ref": "#/definitions/id"}},
        "required": ["id"],
    }
    draft2020 = {"$defs": {"id": {"type": "integer", "minimum": 1}}, "type": "object", "properties": {"id": {"$ref": "#/$defs/id"}}, "required": ["id"]}
    for schema in (draft7, draft2020):
        grammar = grammar_from_schema(schema)
        assert grammar.accepts('{"id":3}')
        assert not grammar.accepts('{"id":0}')


def test_schema_dict_is_not_modified():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    snapshot = repr(schema)
    grammar_from_schema(schema)
    assert repr(schema) == snapshot


def test_langchain_tool():
    from langchain_core.tools import tool

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: first factor
            b: second factor
        """
        return a * b

    schema = to_json_schema(multiply)
    assert set(schema["properties"]) == {"a", "b"}
    grammar = grammar_from_schema(multiply)
    assert grammar.accepts('{"a":2,"b":3}')
    assert not grammar.accepts('{"a":2}')


def test_unknown_object_is_rejected_clearly():
    with pytest.raises(SchemaInputError):
        to_json_schema(object())


@pytest.mark.parametrize("text", ['{"type": "string"}', "abc", b'{"type": "integer"}'])
def test_schema_text_is_refused_with_a_hint_to_parse_it(text):
    # A string is not read as a forward reference to a type: the message says what to pass.
    with pytest.raises(SchemaInputError, match="json.loads"):
        grammar_from_schema(text)
