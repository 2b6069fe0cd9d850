"""The generation API on the embedded model: every returned value validates, whatever the schema."""

from __future__ import annotations

import json
import random
from enum import Enum
from pathlib import Path
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, Field

import surecall
from surecall.output_types import OutputSpec

BFCL = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bfcl" / "BFCL_v4_simple_python.jsonl"
if not BFCL.exists():
    BFCL = Path("/work/shared/datasets/bfcl/BFCL_v4_simple_python.jsonl")


class Colour(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)


class Address(BaseModel):
    street: str = Field(max_length=30)
    city: str = Field(max_length=20)
    postcode: Optional[str] = Field(default=None, pattern=r"^[0-9]{5}$")


class Order(BaseModel):
    order_id: int
    paid: bool
    colour: Colour
    items: list[str] = Field(max_length=3)
    ship_to: Address


class Rating(BaseModel):
    verdict: Literal["good", "bad", "mixed"]
    score: float = Field(ge=0, le=10)


PYDANTIC_CASES = [
    (Person, "Extract the person: Ada Lovelace was 36 years old."),
    (Order, "Order 1234 was paid, in blue: 2 mugs to 12 Rose Street, Leeds."),
    (Rating, "The film was fine, I'd say seven out of ten."),
]


def _messages(text: str) -> list[dict]:
    return [{"role": "system", "content": "Answer with JSON only."}, {"role": "user", "content": text}]


def _json_schema_from_bfcl(parameters: dict) -> dict:
    """BFCL writes Python type names (dict, float, tuple, any); map them to JSON Schema."""
    names = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer",
             "str": "string", "bool": "boolean", "String": "string", "Array": "array", "Boolean": "boolean"}

    def convert(node):
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        converted = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, str):
                if value == "any":
                    continue
                converted[key] = names.get(value, value)
            elif key == "optional":
                continue
            else:
                converted[key] = convert(value)
        return converted

    return convert(parameters)


def _bfcl_sample(count: int) -> list[tuple[str, dict, str]]:
    """A fixed sample of BFCL function parameter schemas that compile, with their questions."""
    lines = BFCL.read_text(encoding="utf-8").splitlines()
    random.Random(5).shuffle(lines)
    chosen = []
    for line in lines:
        entry = json.loads(line)
        function = entry["function"][0]
        schema = _json_schema_from_bfcl(function["parameters"])
        try:
            surecall.grammar_from_schema(schema)
        except (surecall.UnsupportedSchemaError, surecall.GrammarError):
            continue
        chosen.append((function["name"], schema, entry["question"][0][-1]["content"]))
        if len(chosen) == count:
            break
    return chosen


BFCL_CASES = _bfcl_sample(10)


@pytest.mark.model
@pytest.mark.parametrize("model_class,question", PYDANTIC_CASES, ids=[c[0].__name__ for c in PYDANTIC_CASES])
@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 11)], ids=["greedy", "sampled"])
def test_pydantic_outputs_validate(local_model, model_class, question, temperature, seed):
    value = surecall.generate(local_model, _messages(question), model_class, max_tokens=72,
                              temperature=temperature, seed=seed)
    assert isinstance(value, model_class)
    model_class.model_validate(value.model_dump())


@pytest.mark.model
@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 3)], ids=["greedy", "sampled"])
def test_bfcl_parameter_schemas_validate(local_model, temperature, seed):
    from surecall.validation import validate_json

    assert len(BFCL_CASES) == 10
    prompts = [_messages(f"Call {name} for: {question}") for name, _, question in BFCL_CASES]
    schemas = [schema for _, schema, _ in BFCL_CASES]
    from surecall.generation import generate_batch_results

    results = generate_batch_results(
        local_model, prompts, schemas, max_tokens=80, temperature=temperature, seed=seed
    )
    for schema, result in zip(schemas, results):
        assert result.decode.finish_reason == "stop"
        validate_json(result.value, schema)
        assert json.loads(result.text) == result.value


NEGATED_SCHEMAS = [
    {"type": "object", "properties": {
        "code": {"type": "string", "not": {"pattern": "^[A-Z]"}, "maxLength": 12},
        "n": {"type": "integer", "not": {"multipleOf": 2}, "minimum": 0, "maximum": 99},
    }, "required": ["code", "n"], "additionalProperties": False},
    {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
        {"type": "object", "properties": {"kind": {"type": "string", "pattern": "^b"}, "y": {"type": "string"}}, "required": ["kind", "y"]},
    ]},
]


@pytest.mark.model
@pytest.mark.parametrize("schema", NEGATED_SCHEMAS, ids=["not pattern and multipleOf", "oneOf with a pattern"])
@pytest.mark.parametrize("temperature,seed", [(0.0, None), (1.0, 5)], ids=["greedy", "sampled"])
def test_negated_keywords_validate_end_to_end(local_model, schema, temperature, seed):
    from surecall.validation import validate_json

    value = surecall.generate(local_model, _messages("Give me a product code in lower case and an odd number, as JSON."),
                              schema, max_tokens=60, temperature=temperature, seed=seed)
    validate_json(value, schema)


@pytest.mark.model
def test_regex_and_ebnf_outputs_match(local_model):
    phone = surecall.Regex(r"\+44 [0-9]{4} [0-9]{6}")
    text = surecall.generate(local_model, _messages("Give me a UK phone number."), phone, max_tokens=24)
    assert phone.grammar.accepts(text)
    assert text.startswith("+44 ")

    grammar = surecall.Grammar.from_ebnf(
        """
        start ::= answer ' because ' reason '.';
        answer ::= 'yes' | 'no';
        reason ::= #'[a-z ]{1,30}';
        """
    )
    text = surecall.generate(local_model, _messages("Is water wet?"), grammar, max_tokens=24, temperature=1.0, seed=2)
    assert grammar.accepts(text)
    assert text.split(" because ")[0] in {"yes", "no"}


@pytest.mark.model
def test_stream_pieces_form_the_generated_text(local_model):
    prompt = _messages("Extract the person: Grace Hopper, aged 85.")
    pieces = list(surecall.stream(local_model, prompt, Person, max_tokens=48))
    assert len(pieces) > 1
    joined = "".join(pieces)
    assert Person.model_validate_json(joined) == surecall.generate(local_model, prompt, Person, max_tokens=48)


@pytest.mark.model
def test_generate_batch_with_mixed_output_types(local_model):
    prompts = [_messages("Extract the person: Alan Turing, 41."), _messages("Yes or no: is fire hot?"),
               "The capital of France is"]
    yes_no = surecall.Regex("yes|no")
    values = surecall.generate_batch(local_model, prompts, [Person, yes_no, None], max_tokens=32)
    assert isinstance(values[0], Person)
    assert values[1] in {"yes", "no"}
    assert isinstance(values[2], str) and values[2]


def test_output_type_decorator_compiles_once_and_is_used_directly():
    @surecall.output_type
    class City(BaseModel):
        name: str
        population: int

    spec = OutputSpec.of(City)
    assert spec is OutputSpec.of(City)
    assert spec.kind == "pydantic"
    assert spec.grammar.accepts('{"name":"Oslo","population":700000}') or spec.grammar.accepts(
        '{"name": "Oslo", "population": 700000}'
    )
    assert spec.parse('{"name": "Oslo", "population": 700000}') == City(name="Oslo", population=700000)
    with pytest.raises(surecall.OutputValidationError):
        spec.parse('{"name": "Oslo"}')
    with pytest.raises(surecall.OutputValidationError):
        spec.parse('{"name": "Oslo", "population": ')
    with pytest.raises(TypeError):
        surecall.output_type(dict)


def test_output_specs_validate_what_they_return():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}, "required": ["n"]}
    spec = OutputSpec.of(schema)
    assert spec.parse('{"n": 4}') == {"n": 4}
    with pytest.raises(surecall.OutputValidationError):
        spec.parse('{"n": 1}')
    regex = OutputSpec.of(surecall.Regex("[0-9]+"))
    assert regex.parse("123") == "123"
    with pytest.raises(surecall.OutputValidationError):
        regex.parse("12a")
    assert OutputSpec.of(None).grammar is None and OutputSpec.of(None).parse("anything") == "anything"


@pytest.mark.model
def test_bad_arguments_raise_clear_errors(local_model):
    with pytest.raises(ValueError, match="stop strings"):
        surecall.generate(local_model, "Hi", Person, stop=["}"])
    with pytest.raises(TypeError, match="chat message must be"):
        surecall.generate(local_model, [{"content": "no role"}], None)
    with pytest.raises(TypeError, match="model must be"):
        surecall.generate(3.5, "Hi", None)
    with pytest.raises(surecall.TokenBudgetError):
        surecall.generate(local_model, _messages("Who?"), Order, max_tokens=5)
