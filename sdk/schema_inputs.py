"""Everything surecall accepts as a schema, turned into a JSON Schema dict.

Pydantic v2 classes, ``pydantic.v1`` models, TypedDicts, dataclasses and other annotated
types go through Pydantic; a Python function becomes the object schema of its parameters
with descriptions from its docstring; tool dicts (OpenAI, Anthropic) give their parameter
schema; a LangChain tool gives its tool-call schema (LangChain is imported only when such
an object is passed).
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
from typing import Any, get_type_hints

from .formats import NAIVE_DATE_TIME, PYDANTIC_FORMAT_PATTERNS


class SchemaInputError(TypeError):
    """The object cannot be turned into a JSON Schema."""


def to_json_schema(obj: Any) -> dict:
    """The JSON Schema (a new dict) describing the values ``obj`` stands for."""
    if isinstance(obj, bool):
        return {} if obj else {"not": {}}
    if isinstance(obj, (str, bytes)):
        # Pydantic would read a string as the name of a type not defined yet.
        raise SchemaInputError(
            f"cannot derive a JSON Schema from the {type(obj).__name__} {_shortened(obj)}: pass a JSON Schema "
            "as a dict (json.loads the text first), or a Pydantic model, TypedDict, dataclass, function, "
            "tool dict or LangChain tool (a regular expression as surecall.Regex(pattern))"
        )
    if isinstance(obj, dict):
        return copy.deepcopy(_schema_of_dict(obj))
    if _is_langchain_tool(obj):
        return _schema_of_langchain_tool(obj)
    if isinstance(obj, type):
        return _schema_of_type(obj)
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return _schema_of_function(obj)
    try:
        return _schema_of_type(obj)
    except SchemaInputError:
        raise
    except Exception as error:
        raise SchemaInputError(
            f"cannot derive a JSON Schema from {obj!r}: expected a Pydantic model, TypedDict, dataclass, "
            "function, JSON Schema dict, OpenAI/Anthropic tool dict or LangChain tool"
        ) from error


def _shortened(text: str | bytes, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _schema_of_dict(schema: dict) -> dict:
    if schema.get("type") == "function" and isinstance(schema.get("function"), dict):
        return _parameters(schema["function"])
    if "name" in schema and "input_schema" in schema:
        return _checked_dict(schema["input_schema"], "input_schema")
    if "name" in schema and "parameters" in schema and "properties" not in schema:
        return _parameters(schema)
    return schema


def _parameters(function: dict) -> dict:
    parameters = function.get("parameters")
    if parameters is None:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return _checked_dict(parameters, "parameters")


def _checked_dict(value: Any, where: str) -> dict:
    if isinstance(value, bool):
        return {} if value else {"not": {}}
    if not isinstance(value, dict):
        raise SchemaInputError(f"the tool's {where} must be a JSON Schema object, got {type(value).__name__}")
    return value


def _is_langchain_tool(obj: Any) -> bool:
    return any(
        cls.__name__ == "BaseTool" and cls.__module__.startswith("langchain_core")
        for cls in type(obj).__mro__
    )


def _schema_of_langchain_tool(tool: Any) -> dict:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return copy.deepcopy(convert_to_openai_tool(tool)["function"].get("parameters", {"type": "object"}))


def _pydantic_v1_model(obj: Any) -> bool:
    try:
        from pydantic import v1
    except ImportError:
        return False
    return isinstance(obj, type) and issubclass(obj, v1.BaseModel)


def _schema_of_type(obj: Any) -> dict:
    import pydantic

    if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel):
        return obj.model_json_schema(schema_generator=_validated_json_schema())
    if _pydantic_v1_model(obj):
        return obj.schema()
    obj = _portable_typeddict(obj)
    try:
        return pydantic.TypeAdapter(obj).json_schema(schema_generator=_validated_json_schema())
    except pydantic.PydanticSchemaGenerationError as error:
        raise SchemaInputError(f"cannot derive a JSON Schema from {obj!r}: {error}") from error
    except pydantic.PydanticUserError as error:
        raise SchemaInputError(f"cannot derive a JSON Schema from {obj!r}: {error}") from error


@functools.cache
def _validated_json_schema():
    """Pydantic's JSON Schema generator, except where its schema admits values Pydantic's
    validation refuses, so that what a grammar lets through validates:

    * a ``Decimal`` (number or any string, says Pydantic) is a JSON number, its
      ``decimal_places`` a ``multipleOf`` and, with them, its ``max_digits`` a bound;
    * it and a float that refuses infinities (``allow_inf_nan=False``) stay below 1e308
      (bounded numbers are written without an exponent, so none reads as infinite);
    * a URL limited to some schemes (``HttpUrl``) starts with one and a plain host name;
    * a ``timedelta``'s numbers have at most 6 digits (longer ones overflow Pydantic's parser);
    * a ``NaiveDatetime`` has no offset (Pydantic says ``date-time``, which has one);
    * the formats Pydantic names for IP networks and interfaces, which no validator knows
      (any string passes), get patterns of values Pydantic takes.
    """
    from pydantic.json_schema import GenerateJsonSchema

    class ValidatedJsonSchema(GenerateJsonSchema):
        def float_schema(self, schema):
            json_schema = super().float_schema(schema)
            if schema.get("allow_inf_nan") is False:
                _finite(json_schema, 1e308)
            return json_schema

        def decimal_schema(self, schema):
            json_schema = super().decimal_schema(schema)
            if self.mode != "validation" or "anyOf" not in json_schema:
                return json_schema
            number = dict(json_schema["anyOf"][0])
            places, digits = schema.get("decimal_places"), schema.get("max_digits")
            bound = 1e308
            if places is not None:
                number["multipleOf"] = float(f"1e-{places}")
                if digits is not None:
                    bound = float(10 ** (digits - places))
            _finite(number, bound)
            return number

        def url_schema(self, schema):
            json_schema = super().url_schema(schema)
            schemes = schema.get("allowed_schemes")
            if schemes:
                spelled = "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in scheme) for scheme in schemes)
                # Hosts as plain dotted labels, no "--" (which would be read as punycode),
                # the last starting with a letter (one of digits makes the host an IPv4
                # address): Pydantic's URL parser refuses empty labels, undecodable names
                # and malformed addresses.
                label = "[A-Za-z0-9]+(-[A-Za-z0-9]+)*"
                last = "[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)*"
                json_schema["pattern"] = f"^({spelled})://({label}[.])*{last}(:[0-9]{{1,4}})?([/?#].*)?$"
            return json_schema

        def generate(self, schema, mode="validation"):
            json_schema = super().generate(schema, mode)
            _pattern_for_pydantic_formats(json_schema)
            return json_schema

        def datetime_schema(self, schema):
            json_schema = super().datetime_schema(schema)
            if schema.get("tz_constraint") == "naive" and json_schema.get("format") == "date-time":
                json_schema = {key: value for key, value in json_schema.items() if key != "format"}
                json_schema["pattern"] = f"^{NAIVE_DATE_TIME}$"
            return json_schema

        def timedelta_schema(self, schema):
            json_schema = super().timedelta_schema(schema)
            if json_schema.get("format") == "duration":
                json_schema["pattern"] = "^[^0-9]*([0-9]{1,6}[^0-9]+)*$"
            return json_schema

    return ValidatedJsonSchema


def _finite(number: dict, bound: float) -> None:
    """Keep a number schema strictly between -``bound`` and ``bound`` (bounded numbers are also
    written without an exponent, so none reads as infinite)."""
    number["exclusiveMaximum"] = min(number.get("exclusiveMaximum", bound), bound)
    number["exclusiveMinimum"] = max(number.get("exclusiveMinimum", -bound), -bound)


# Keywords whose values are instances, not schemas; and those naming schemas by key.
_INSTANCE_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _pattern_for_pydantic_formats(schema: Any) -> None:
    """Give every schema in ``schema`` whose format only Pydantic knows the pattern of its values."""
    if isinstance(schema, list):
        for item in schema:
            _pattern_for_pydantic_formats(item)
        return
    if not isinstance(schema, dict):
        return
    found = PYDANTIC_FORMAT_PATTERNS.get(schema.get("format")) if isinstance(schema.get("format"), str) else None
    if found is not None and "pattern" not in schema:
        schema["pattern"] = f"^{found}$"
    for key, value in schema.items():
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            for named in value.values():
                _pattern_for_pydantic_formats(named)
        elif key not in _INSTANCE_KEYWORDS:
            _pattern_for_pydantic_formats(value)


def _portable_typeddict(obj: Any) -> Any:
    """``typing.TypedDict`` before Python 3.12 lacks what Pydantic needs: rebuild it with typing_extensions."""
    import sys
    import typing

    import typing_extensions

    if sys.version_info >= (3, 12) or not typing.is_typeddict(obj) or type(obj) is type(typing_extensions.TypedDict("_Probe", {})):
        return obj
    hints = get_type_hints(obj, include_extras=True)
    optional = getattr(obj, "__optional_keys__", frozenset())
    fields = {name: typing_extensions.NotRequired[hint] if name in optional else hint for name, hint in hints.items()}
    rebuilt = typing_extensions.TypedDict(obj.__name__, fields)
    rebuilt.__doc__ = obj.__doc__
    return rebuilt


_GOOGLE_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_GOOGLE_PARAM = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Raises|Yields|Examples?|Notes?|See Also)\s*:?\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary of a docstring and the description of each parameter (Google or Sphinx style)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    args_indent = 0
    for line in lines:
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            in_args = False
            continue
        if _GOOGLE_SECTION.match(line):
            in_args, current = True, None
            args_indent = len(line) - len(line.lstrip())
            continue
        if _OTHER_SECTION.match(line):
            in_args, current = False, None
            continue
        if in_args:
            indent = len(line) - len(line.lstrip())
            google = _GOOGLE_PARAM.match(line)
            if google and indent > args_indent and (current is None or indent <= param_indent):
                current = google.group(1).lstrip("*")
                param_indent = indent
                params[current] = google.group(2).strip()
            elif current is not None and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
            continue
        if current is not None and line.strip() and line[:1].isspace():
            params[current] = f"{params[current]} {line.strip()}".strip()
            continue
        current = None
        if not params:
            summary_lines.append(line)
    summary = " ".join(part.strip() for part in "\n".join(summary_lines).strip().split("\n\n")[0].splitlines())
    return summary, params


def _schema_of_function(function: Any) -> dict:
    import pydantic

    signature = inspect.signature(function)
    try:
        hints = get_type_hints(function, include_extras=True)
    except Exception:
        hints = {}
    summary, descriptions = parse_docstring(inspect.getdoc(function))
    fields: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if name in ("self", "cls") and parameter.annotation is inspect.Parameter.empty:
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise SchemaInputError(
                f"function {function.__name__!r}: *{name} / **{name} parameters cannot be described by a schema"
            )
        annotation = hints.get(name, Any)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, pydantic.Field(default, description=descriptions.get(name)))
    model = pydantic.create_model(function.__name__, **fields)
    schema = model.model_json_schema(schema_generator=_validated_json_schema())
    if summary:
        schema["description"] = summary
    else:
        schema.pop("description", None)
    return schema
