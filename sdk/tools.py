"""Tool specifications.

Every way of describing a tool (a plain function, a Pydantic class, a TypedDict, a JSON
Schema, an OpenAI or Anthropic tool dict, a LangChain tool) is normalised to one
``ToolSpec(name, description, parameters)`` where ``parameters`` is the JSON Schema of
the arguments object. The LangChain adapter builds its tool-call grammar from these.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class ToolDefinitionError(ValueError):
    """A tool could not be understood (unknown shape, bad name, duplicate name)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict = field(hash=False)

    def to_openai(self) -> dict:
        """The OpenAI ``{"type": "function", "function": {...}}`` form (what chat templates expect)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def tool_spec(tool: Any) -> ToolSpec:
    """Normalise one tool description to a :class:`ToolSpec`."""
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, dict):
        name, description, parameters = _from_dict(tool)
    elif _is_langchain_tool(tool):
        name, description, parameters = _from_langchain_tool(tool)
    elif isinstance(tool, type):
        name = tool.__name__
        description = _docstring_summary(tool)
        parameters = _schema_of(tool)
    elif callable(tool):
        name = getattr(tool, "__name__", None)
        if not name or name == "<lambda>":
            raise ToolDefinitionError("a tool function needs a name (lambdas have none); use a def or a dict")
        description = _docstring_summary(tool)
        parameters = _schema_of(tool)
    else:
        raise ToolDefinitionError(
            f"cannot use {tool!r} as a tool: expected a function, a Pydantic class, a TypedDict, "
            "a JSON Schema dict, an OpenAI/Anthropic tool dict or a LangChain tool"
        )
    return _checked(name, description, parameters)


def tool_specs(tools: Iterable[Any]) -> list[ToolSpec]:
    """Normalise several tools; the same tool given twice (say, as a class and as its schema)
    counts once, two different tools may not share a name."""
    specs: dict[str, ToolSpec] = {}
    for spec in map(tool_spec, tools):
        known = specs.get(spec.name)
        if known is None:
            specs[spec.name] = spec
        elif known.parameters != spec.parameters or known.description != spec.description:
            raise ToolDefinitionError(f"two different tools are named {spec.name!r}; tool names must be unique")
    return list(specs.values())


def _checked(name: Any, description: Any, parameters: Any) -> ToolSpec:
    if not isinstance(name, str) or not _NAME_PATTERN.match(name):
        raise ToolDefinitionError(
            f"bad tool name {name!r}: use 1-128 letters, digits, '_', '.', ':' or '-'"
        )
    if not isinstance(parameters, dict):
        raise ToolDefinitionError(f"tool {name!r}: parameters must be a JSON Schema object, got {parameters!r}")
    parameters = _strip_metadata(parameters)
    if parameters.get("type", "object") != "object":
        raise ToolDefinitionError(
            f"tool {name!r}: the arguments schema must describe an object, got type {parameters.get('type')!r}"
        )
    parameters.setdefault("type", "object")
    if "properties" not in parameters and not any(k in parameters for k in ("anyOf", "oneOf", "allOf", "$ref")):
        parameters["properties"] = {}
    return ToolSpec(name, (description or "").strip(), parameters)


def _strip_metadata(schema: dict) -> dict:
    """Drop the top-level title: it names the tool, which is already ``ToolSpec.name``."""
    return {key: value for key, value in schema.items() if key != "title"}


def _from_dict(tool: dict) -> tuple[Any, Any, Any]:
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        function = tool["function"]
        return function.get("name"), function.get("description", ""), function.get("parameters", {"type": "object"})
    if "name" in tool and "input_schema" in tool:  # Anthropic
        return tool["name"], tool.get("description", ""), tool["input_schema"]
    if "name" in tool and "parameters" in tool:  # OpenAI function (legacy, unwrapped)
        return tool["name"], tool.get("description", ""), tool["parameters"]
    if "title" in tool and ("properties" in tool or tool.get("type") == "object"):  # JSON Schema
        return tool["title"], tool.get("description", ""), tool
    raise ToolDefinitionError(
        "cannot read this tool dict: expected an OpenAI tool ({'type': 'function', 'function': {...}}), "
        "an Anthropic tool ({'name', 'input_schema'}), a function dict ({'name', 'parameters'}) or a JSON "
        f"Schema with a 'title'; got keys {sorted(tool)}"
    )


def _is_langchain_tool(obj: Any) -> bool:
    try:
        from langchain_core.tools import BaseTool
    except ImportError:  # LangChain is optional for the sdk
        return False
    return isinstance(obj, BaseTool)


def _from_langchain_tool(tool: Any) -> tuple[Any, Any, Any]:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        parameters = schema
    elif schema is None:
        parameters = {"type": "object", "properties": {}}
    else:
        parameters = _schema_of(schema)
    return tool.name, tool.description or "", parameters


def _schema_of(obj: Any) -> dict:
    from surecall.schema import to_json_schema

    return to_json_schema(obj)


def _docstring_summary(obj: Any) -> str:
    """The docstring up to the first section header (Args:, Returns:, ...)."""
    if isinstance(obj, type):
        # only the class's own docstring: an inherited one (BaseModel's) describes nothing here
        doc = inspect.cleandoc(obj.__dict__.get("__doc__") or "")
    else:
        doc = inspect.getdoc(obj) or ""
    lines = []
    for line in doc.splitlines():
        if re.match(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?)\s*:?\s*$", line):
            break
        lines.append(line)
    return "\n".join(lines).strip()
