"""Output types: what a generation must produce, and how its text becomes the returned value.

Accepted wherever an output type is asked for:

* a Pydantic model class (decorated with ``@output_type`` or not): returns a validated instance;
* anything ``grammar_from_schema`` accepts (JSON Schema dict, TypedDict, dataclass, function,
  tool dict, ...): returns the parsed JSON value, validated against the schema;
* a ``Grammar``: returns the text, checked against the grammar;
* ``Regex(pattern)``: returns the text, checked against the pattern (full match);
* ``None`` or ``str``: free text.

``OutputSpec.of(output_type)`` turns any of these into a grammar and a parse function. Every
value is validated before it is handed back, so a bug anywhere upstream surfaces as an
``OutputValidationError`` instead of a silently wrong value.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from surecall.engine import Grammar

__all__ = ["Regex", "output_type", "OutputSpec"]

_SPEC_ATTRIBUTE = "__surecall_output_spec__"


class Regex:
    """A regular expression output type (full-match semantics); the result is the matched text."""

    __slots__ = ("pattern", "_grammar", "_lock")

    def __init__(self, pattern: str):
        if not isinstance(pattern, str):
            raise TypeError(f"Regex pattern must be a string, got {type(pattern).__name__}")
        self.pattern = pattern
        self._grammar: Grammar | None = None
        self._lock = threading.Lock()

    @property
    def grammar(self) -> Grammar:
        if self._grammar is None:
            with self._lock:
                if self._grammar is None:
                    self._grammar = Grammar.from_regex(self.pattern)
        return self._grammar

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(("Regex", self.pattern))

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


@dataclass(frozen=True)
class OutputSpec:
    """The grammar for an output type and the function turning generated text into its value.

    ``grammar`` is None for free text. ``parse`` raises ``OutputValidationError`` when the text
    does not form a valid value.
    """

    grammar: Grammar | None
    parse: Callable[[str], Any]
    kind: str
    schema: dict | None = None

    @classmethod
    def of(cls, output_type: Any) -> "OutputSpec":
        if isinstance(output_type, OutputSpec):
            return output_type
        if output_type is None or output_type is str:
            return _FREE_TEXT
        if isinstance(output_type, Grammar):
            return cls(grammar=output_type, parse=_grammar_checker(output_type, "grammar"), kind="grammar")
        if isinstance(output_type, Regex):
            return cls(
                grammar=output_type.grammar,
                parse=_grammar_checker(output_type.grammar, f"regular expression {output_type.pattern!r}"),
                kind="regex",
            )
        if isinstance(output_type, type):
            cached = output_type.__dict__.get(_SPEC_ATTRIBUTE)
            if cached is not None:
                return cached
            if _is_pydantic_model(output_type):
                return _class_spec_cache(output_type)
        return _schema_spec(output_type)


def output_type(cls: type | None = None, *, whitespace: str = "compact"):
    """Class decorator: compile a Pydantic model's grammar once and keep it on the class.

    The decorated class is used directly as an output type (``generate(model, prompt, Person)``);
    schema problems surface at class definition instead of at the first generation::

        @surecall.output_type
        class Person(BaseModel):
            name: str
            age: int
    """

    def decorate(model_class: type) -> type:
        if not _is_pydantic_model(model_class):
            raise TypeError(
                f"@output_type expects a Pydantic model class, got {model_class!r}; "
                "other schemas can be passed to generate() directly"
            )
        setattr(model_class, _SPEC_ATTRIBUTE, _pydantic_spec(model_class, whitespace=whitespace))
        return model_class

    if cls is None:
        return decorate
    return decorate(cls)


def _validation_error(message: str, text: str) -> Exception:
    from surecall.validation import OutputValidationError

    return OutputValidationError(message, raw_text=text)


def _free_text(text: str) -> str:
    return text


_FREE_TEXT = OutputSpec(grammar=None, parse=_free_text, kind="text")


def _grammar_checker(grammar: Grammar, what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not grammar.accepts(text):
            raise _validation_error(f"the output does not match the {what}", text)
        return text

    return check


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise _validation_error(f"the output is not complete JSON ({error.msg} at position {error.pos})", text) from None


def _schema_spec(schema_like: Any, *, whitespace: str = "compact") -> OutputSpec:
    from surecall.schema import grammar_from_schema, to_json_schema
    from surecall.validation import validate_json

    schema = to_json_schema(schema_like)
    grammar = grammar_from_schema(schema, whitespace=whitespace)

    def parse(text: str) -> Any:
        value = _parse_json(text)
        validate_json(value, schema, raw_text=text)
        return value

    return OutputSpec(grammar=grammar, parse=parse, kind="json", schema=schema)


def _pydantic_spec(model_class: type, *, whitespace: str = "compact") -> OutputSpec:
    from pydantic import ValidationError

    from surecall.schema import grammar_from_schema, to_json_schema
    from surecall.validation import validate_json

    schema = to_json_schema(model_class)
    grammar = grammar_from_schema(schema, whitespace=whitespace)

    def parse(text: str) -> Any:
        value = _parse_json(text)
        validate_json(value, schema, raw_text=text)
        try:
            return model_class.model_validate(value)
        except ValidationError as error:
            raise _validation_error(f"the output does not validate as {model_class.__name__}: {error}", text) from None

    return OutputSpec(grammar=grammar, parse=parse, kind="pydantic", schema=schema)


_undecorated_specs: "weakref.WeakKeyDictionary[type, OutputSpec]" = weakref.WeakKeyDictionary()
_undecorated_lock = threading.Lock()


def _class_spec_cache(model_class: type) -> OutputSpec:
    """Specs of undecorated Pydantic classes, compiled on first use and kept while the class lives."""
    spec = _undecorated_specs.get(model_class)
    if spec is None:
        spec = _pydantic_spec(model_class)
        with _undecorated_lock:
            _undecorated_specs[model_class] = spec
    return spec


def _is_pydantic_model(candidate: Any) -> bool:
    if not isinstance(candidate, type):
        return False
    try:
        from pydantic import BaseModel
    except ImportError:
        return False
    return issubclass(candidate, BaseModel)
