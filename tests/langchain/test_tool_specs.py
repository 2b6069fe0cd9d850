"""Tool normalisation: every accepted tool description becomes the same ToolSpec."""

from __future__ import annotations

import pytest
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from surecall.tools import ToolDefinitionError, ToolSpec, tool_spec, tool_specs

ADD_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def _plain_properties(spec: ToolSpec) -> dict:
    return {name: {"type": prop["type"]} for name, prop in spec.parameters["properties"].items()}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


class Add(BaseModel):
    """Add two integers."""

    a: int = Field(description="first addend")
    b: int


class AddDict(TypedDict):
    """Add two integers."""

    a: int
    b: int


@tool
def add_tool(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize(
    "tool_input, name",
    [
        (add, "add"),
        (Add, "Add"),
        (AddDict, "AddDict"),
        (add_tool, "add_tool"),
        ({"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_PARAMETERS}}, "add"),
        ({"name": "add", "description": "Add two integers.", "input_schema": ADD_PARAMETERS}, "add"),
        ({"name": "add", "description": "Add two integers.", "parameters": ADD_PARAMETERS}, "add"),
        ({"title": "add", "description": "Add two integers.", **ADD_PARAMETERS}, "add"),
    ],
)
def test_every_tool_kind_gives_the_same_arguments_schema(tool_input, name):
    spec = tool_spec(tool_input)
    assert spec.name == name
    assert spec.description.startswith("Add two integers")
    assert "Args" not in spec.description
    assert _plain_properties(spec) == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert sorted(spec.parameters["required"]) == ["a", "b"]
    assert "title" not in spec.parameters


def test_openai_form_round_trips():
    spec = tool_spec(add)
    assert tool_spec(spec.to_openai()) == spec


def test_tool_without_arguments_has_an_empty_object_schema():
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    spec = tool_spec(ping)
    assert spec.parameters["type"] == "object"
    assert spec.parameters.get("properties", {}) == {}


def test_pydantic_class_without_docstring_has_no_inherited_description():
    class Bare(BaseModel):
        x: int

    assert tool_spec(Bare).description == ""


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"foo": 1}, "cannot read this tool dict"),
        (42, "cannot use 42 as a tool"),
        (lambda x: x, "lambdas have none"),
        ({"name": "has space", "parameters": ADD_PARAMETERS}, "bad tool name"),
        ({"name": "s", "parameters": {"type": "string"}}, "must describe an object"),
    ],
)
def test_bad_tools_give_clear_errors(bad, message):
    with pytest.raises(ToolDefinitionError, match=message):
        tool_spec(bad)


def test_conflicting_names_are_rejected():
    with pytest.raises(ToolDefinitionError, match="two different tools are named 'add'"):
        tool_specs([add, {"name": "add", "parameters": {"type": "object", "properties": {}}}])


def test_the_same_tool_twice_counts_once():
    assert tool_specs([Add, Add.model_json_schema()]) == [tool_spec(Add)]
