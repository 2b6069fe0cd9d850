"""Final validation with jsonschema (formats asserted, exact multipleOf)."""

from __future__ import annotations

import pickle

import pydantic
import pytest

from surecall.validation import OutputValidationError, parse_and_validate, validate_json


class User(pydantic.BaseModel):
    name: str
    age: int


def test_valid_value_is_returned():
    assert validate_json({"name": "a", "age": 3}, User) == {"name": "a", "age": 3}


def test_invalid_value_raises_with_raw_text():
    with pytest.raises(OutputValidationError) as info:
        validate_json({"name": "a", "age": "x"}, User, raw_text='{"name": "a", "age": "x"}')
    assert info.value.raw_text == '{"name": "a", "age": "x"}'
    assert "age" in str(info.value)
    assert info.value.errors


def test_formats_are_asserted():
    schema = {"type": "string", "format": "date"}
    assert validate_json("2024-02-29", schema) == "2024-02-29"
    with pytest.raises(OutputValidationError):
        validate_json("2023-02-29", schema)


def test_multiple_of_is_exact():
    assert validate_json(-0.07, {"multipleOf": 0.01}) == -0.07
    with pytest.raises(OutputValidationError):
        validate_json(0.125, {"multipleOf": 0.01})


def test_parse_and_validate_reports_bad_json():
    with pytest.raises(OutputValidationError) as info:
        parse_and_validate('{"name": ', User)
    assert info.value.raw_text == '{"name": '
    assert parse_and_validate('{"name":"b","age":1}', User) == {"name": "b", "age": 1}


def test_error_pickles():
    error = OutputValidationError("bad", raw_text="{}")
    copy = pickle.loads(pickle.dumps(error))
    assert copy.raw_text == "{}" and copy.message == "bad"
