"""ChatSurecall end to end on the embedded model: tool choice, streaming, structured output, errors."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from pydantic.v1 import BaseModel as BaseModelV1
from typing_extensions import TypedDict

from surecall.adapters.langchain import ChatSurecall, ToolChoiceError, ToolSchemaError
from surecall.validation import validate_json

pytestmark = pytest.mark.model


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"It is sunny in {city}."


TOOLS = [add, get_weather]
SCHEMAS = {"add": add.tool_call_schema.model_json_schema(), "get_weather": get_weather.tool_call_schema.model_json_schema()}


def _assert_valid_calls(message: AIMessage) -> None:
    assert message.invalid_tool_calls == []
    ids = [call["id"] for call in message.tool_calls]
    assert len(set(ids)) == len(ids) and all(ids)
    for call in message.tool_calls:
        assert call["type"] == "tool_call"
        validate_json(call["args"], SCHEMAS[call["name"]])


def test_required_gives_valid_calls(chat):
    message = chat.bind_tools(TOOLS, tool_choice="any").invoke("What is 2 plus 3?")
    assert message.tool_calls
    _assert_valid_calls(message)
    assert message.response_metadata["model_provider"] == "surecall"
    assert message.response_metadata["finish_reason"] == "stop"
    usage = message.usage_metadata
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0


@tool
def tag_items(ids: list[int], tags: set[str]) -> str:
    """Tag the items with a set of tags."""
    return f"tagged {ids}"


def test_set_arguments_stay_unique_beside_other_tools(chat):
    # A set becomes uniqueItems, which the grammar alone cannot enforce: the run-time check
    # does, for the arguments of the tool the call names.
    message = chat.bind_tools([add, tag_items], tool_choice="any").invoke("Tag items 1, 2 and 3 with red, green, red, green.")
    assert message.invalid_tool_calls == [] and message.tool_calls
    schemas = {**SCHEMAS, "tag_items": tag_items.tool_call_schema.model_json_schema()}
    for call in message.tool_calls:
        validate_json(call["args"], schemas[call["name"]])
        assert call["name"] != "tag_items" or len(set(call["args"]["tags"])) == len(call["args"]["tags"])


def test_named_choice_calls_that_tool_only(chat):
    for choice in ("get_weather", {"type": "function", "function": {"name": "get_weather"}}):
        message = chat.bind_tools(TOOLS, tool_choice=choice).invoke("Add 2 and 3.")
        assert [call["name"] for call in message.tool_calls] and {c["name"] for c in message.tool_calls} == {"get_weather"}
        _assert_valid_calls(message)


def test_none_choice_gives_text_only(chat):
    message = chat.bind_tools(TOOLS, tool_choice="none").invoke("What is the weather in Paris?")
    assert message.tool_calls == [] and message.invalid_tool_calls == []
    assert message.text and "<tool_call>" not in message.text


def test_no_parallel_calls_gives_at_most_one(chat):
    message = chat.bind_tools(TOOLS, tool_choice="any", parallel_tool_calls=False).invoke(
        "Add 1 and 2, add 3 and 4, and tell me the weather in Rome and in Oslo."
    )
    assert len(message.tool_calls) == 1
    _assert_valid_calls(message)


def test_auto_on_user_turn_calls_then_answers_after_the_result(local_model):
    chat = ChatSurecall(model=local_model, max_tokens=40, auto_tool_calls="on_user_turn")
    bound = chat.bind_tools([get_weather])
    question = HumanMessage("What is the weather in Paris?")
    first = bound.invoke([question])
    assert len(first.tool_calls) >= 1
    _assert_valid_calls(first)
    results = [get_weather.invoke(call) for call in first.tool_calls]
    # after the tool results the reply is the answer, never another round of calls
    second = bound.invoke([question, first, *results])
    assert second.tool_calls == [] and second.invalid_tool_calls == []
    assert second.text


def test_stream_merges_to_the_same_calls_as_invoke(chat):
    bound = chat.bind_tools(TOOLS, tool_choice="any")
    prompt = "What is the weather in Paris?"
    invoked = bound.invoke(prompt)
    chunks = list(bound.stream(prompt))
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert isinstance(merged, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [(c["name"], c["args"]) for c in invoked.tool_calls]
    first_chunks: dict[int, dict] = {}
    for chunk in chunks:
        for piece in chunk.tool_call_chunks:
            if piece["index"] not in first_chunks:
                first_chunks[piece["index"]] = piece
                assert piece["name"] and piece["id"]
            else:
                assert piece["name"] is None and piece["id"] is None
    with_usage = [chunk for chunk in chunks if chunk.usage_metadata]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    assert chunks[-1].chunk_position == "last"


def test_text_stream_concatenates_to_the_invoke_text(chat):
    invoked = chat.invoke("Name a color.")
    streamed = "".join(chunk.text for chunk in chat.stream("Name a color."))
    assert streamed == invoked.text


class Person(BaseModel):
    """A person."""

    name: str = Field(description="first name")
    age: int = Field(ge=0, le=150)


class PersonDict(TypedDict):
    name: str
    age: int


class PersonV1(BaseModelV1):
    name: str
    age: int


PERSON_SCHEMA = Person.model_json_schema()
OPENAI_FUNCTION = {"name": "Person", "description": "A person.", "parameters": PERSON_SCHEMA}


def _is_person(result):
    return isinstance(result, Person)


def _is_person_v1(result):
    return isinstance(result, PersonV1)


def _is_person_dict(result):
    return isinstance(result, dict) and set(result) == {"name", "age"}


# every schema kind with the default method, every method with two schema kinds
STRUCTURED_CASES = [
    (Person, "json_schema", _is_person),
    (PersonV1, "json_schema", _is_person_v1),
    (PersonDict, "json_schema", _is_person_dict),
    (PERSON_SCHEMA, "json_schema", _is_person_dict),
    (OPENAI_FUNCTION, "json_schema", _is_person_dict),
    (Person, "function_calling", _is_person),
    (PersonDict, "function_calling", _is_person_dict),
    (Person, "json_mode", _is_person),
    (PERSON_SCHEMA, "json_mode", _is_person_dict),
]


@pytest.mark.parametrize(
    "schema, method, check",
    STRUCTURED_CASES,
    ids=[f"{getattr(s, '__name__', 'dict')}-{m}" for s, m, _ in STRUCTURED_CASES],
)
def test_structured_output_for_each_method_and_schema_kind(chat, schema, method, check):
    result = chat.with_structured_output(schema, method=method).invoke("Alice is 30 years old. Who is she?")
    assert check(result)
    values = result.dict() if isinstance(result, BaseModelV1) else result if isinstance(result, dict) else result.model_dump()
    validate_json(values, PERSON_SCHEMA)


def test_include_raw(chat):
    result = chat.with_structured_output(Person, include_raw=True).invoke("Bob is 41.")
    assert set(result) == {"raw", "parsed", "parsing_error"}
    assert isinstance(result["raw"], AIMessage)
    assert isinstance(result["parsed"], Person)
    assert result["parsing_error"] is None
    assert Person.model_validate_json(result["raw"].text) == result["parsed"]


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}},
        {"type": "json_schema", "schema": PERSON_SCHEMA},
    ],
    ids=["openai", "plain"],
)
def test_response_format_in_bind(chat, response_format):
    message = chat.bind(response_format=response_format).invoke("Carol is 25.")
    validate_json(json.loads(message.text), PERSON_SCHEMA)


def test_response_format_beside_tools_gives_calls_or_the_json_answer(chat):
    bound = chat.bind_tools(TOOLS, tool_choice="auto", response_format={"type": "json_schema", "schema": PERSON_SCHEMA})
    message = bound.invoke("Dave is 52. Describe him.")
    if message.tool_calls:
        _assert_valid_calls(message)
    else:
        validate_json(json.loads(message.text), PERSON_SCHEMA)


def test_unknown_tool_choice_name_is_a_clear_error(chat):
    with pytest.raises(ToolChoiceError, match="'multiply'.*bound tools: add, get_weather"):
        chat.bind_tools(TOOLS, tool_choice="multiply")


def test_schema_the_translator_rejects_is_a_clear_error_at_bind_time(chat):
    bad = {"name": "lookbehind", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}
    with pytest.raises(ToolSchemaError, match="tool 'lookbehind'.*pattern"):
        chat.bind_tools([bad])


def test_image_content_is_refused_clearly(chat):
    message = HumanMessage([{"type": "text", "text": "Describe"}, {"type": "image", "url": "https://example.com/a.png"}])
    with pytest.raises(ValueError, match="reads text only.*'image'"):
        chat.invoke([message])


def test_standard_params_reach_langsmith(chat):
    params = chat._get_ls_params(stop=["x"])
    assert params["ls_provider"] == "surecall"
    assert params["ls_model_name"] == "SmolLM2-135M-Instruct"
    assert params["ls_max_tokens"] == 48
    assert params["ls_stop"] == ["x"]
    assert chat.profile["tool_calling"] and chat.profile["tool_choice"] and chat.profile["structured_output"]
