"""Every cookbook example runs on the embedded model and returns values that validate."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

COOKBOOK = Path(__file__).resolve().parents[1] / "cookbook"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"cookbook_{name}", COOKBOOK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Pydantic resolves annotations through the module registry.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_extract_pydantic(local_model, capsys):
    example = _example("extract_pydantic")
    contact = example.main(local_model)
    assert isinstance(contact, example.Contact)
    example.Contact.model_validate(contact.model_dump())
    assert example.Contact.model_validate_json(capsys.readouterr().out) == contact


def test_regex_phone(local_model):
    example = _example("regex_phone")
    number = example.main(local_model)
    assert example.PHONE.grammar.accepts(number)


def test_ebnf_grammar(local_model):
    example = _example("ebnf_grammar")
    program = example.main(local_model)
    assert example.COMMANDS.accepts(program)
    assert 1 <= len(program.split("; ")) <= 3


def test_batch_mixed(local_model):
    from surecall.validation import validate_json

    example = _example("batch_mixed")
    sentiment, city, answer = example.main(local_model)
    assert isinstance(sentiment, example.Sentiment)
    validate_json(city, example.CITY)
    assert answer in {"yes", "no"}


def test_budget_guarantee(local_model, capsys):
    from surecall.validation import validate_json

    example = _example("budget_guarantee")
    value = example.main(local_model)
    validate_json(value, example.REVIEW)
    plain_line = capsys.readouterr().out.splitlines()[0]
    truncated_text = plain_line.split(": ", 1)[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(truncated_text)
