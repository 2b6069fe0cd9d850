"""Final validation of every value surecall hands back.

``validate_json`` checks a value against its JSON Schema with ``jsonschema``, formats
asserted (the grammar enforces them, so the check must agree). A failure means the
grammar let something invalid through: it raises :class:`OutputValidationError` carrying
the raw model text so the problem can be reproduced.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

__all__ = ["OutputValidationError", "validate_json", "parse_and_validate", "validator_for_schema", "checked_formats"]


class OutputValidationError(ValueError):
    """Generated output that does not validate; ``raw_text`` is the exact text produced."""

    def __init__(self, message: str, *, raw_text: str, errors: tuple = ()) -> None:
        super().__init__(f"{message}\nraw output: {raw_text!r}")
        self.message = message
        self.raw_text = raw_text
        self.errors = tuple(errors)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.raw_text, self.errors))


def _rebuild(cls, message, raw_text, errors):
    return cls(message, raw_text=raw_text, errors=errors)


def validator_for_schema(schema: dict):
    """A ``jsonschema`` validator for ``schema`` (its declared draft, else 2020-12) that asserts formats.

    ``multipleOf`` is checked in exact decimal arithmetic (as the specification defines it):
    with binary floats, -0.07 would not be a multiple of 0.01.
    """
    import jsonschema
    from jsonschema import validators

    cls = _exact_class(validators.validator_for(schema, default=jsonschema.Draft202012Validator))
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@lru_cache(maxsize=None)
def _exact_class(cls):
    from jsonschema import validators

    return validators.extend(cls, {"multipleOf": _exact_multiple_of})


def _exact_multiple_of(validator, step, instance, schema):
    from decimal import Decimal, InvalidOperation

    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number"):
        return
    try:
        remainder = Decimal(str(instance)) % Decimal(str(step))
    except (InvalidOperation, ArithmeticError):
        return
    if remainder != 0:
        yield ValidationError(f"{instance!r} is not a multiple of {step}")


#: Formats ``jsonschema`` checks only with an optional package surecall does not install
#: (``rfc3987-syntax``, slow to import) and surecall cannot enforce: refused all the same.
_CHECKABLE_ELSEWHERE = frozenset({"iri", "iri-reference"})


@lru_cache(maxsize=1)
def checked_formats() -> frozenset:
    """The formats a schema may use only if surecall enforces them: those ``jsonschema``
    can check in this environment, and those it checks with packages that may be missing."""
    import jsonschema

    return frozenset(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers) | _CHECKABLE_ELSEWHERE


def validate_json(value: Any, schema: Any, *, raw_text: str | None = None) -> Any:
    """Return ``value`` if it is valid under ``schema``; raise :class:`OutputValidationError` otherwise.

    ``schema`` may be anything :func:`surecall.to_json_schema` accepts. ``raw_text`` is the
    text the value was parsed from (defaults to its compact JSON).
    """
    from .schema import to_json_schema

    json_schema = to_json_schema(schema)
    validator = validator_for_schema(json_schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        text = raw_text if raw_text is not None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        details = "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors[:5])
        raise OutputValidationError(f"output does not match the schema: {details}", raw_text=text, errors=tuple(errors))
    return value


def parse_and_validate(text: str, schema: Any) -> Any:
    """Parse JSON ``text`` and validate it; both failures raise :class:`OutputValidationError`."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise OutputValidationError(f"output is not valid JSON: {error}", raw_text=text) from error
    return validate_json(value, schema, raw_text=text)
