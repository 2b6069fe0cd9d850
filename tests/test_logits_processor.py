"""SurecallLogitsProcessor inside transformers' generate(): greedy, sampling, beam search, batches."""

from __future__ import annotations

import json

import pytest
import torch

from surecall.adapters.transformers.logits_processor import SurecallLogitsProcessor

pytestmark = pytest.mark.model

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer", "minimum": -99, "maximum": 99}, "y": {"type": "integer", "minimum": -99, "maximum": 99}},
    "required": ["x", "y"],
    "additionalProperties": False,
}
PET = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog", "fish"]}, "name": {"type": "string", "maxLength": 12}},
    "required": ["kind", "name"],
    "additionalProperties": False,
}
FLAGS = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}

MAX_TOKENS = 30


def _encode_chat(local_model, texts: list[str]) -> dict:
    tokenizer = local_model.tokenizer
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        for text in texts
    ]
    tokenizer.padding_side = "left"
    batch = tokenizer(rendered, return_tensors="pt", padding=True, add_special_tokens=False)
    return {key: value.to(local_model.device) for key, value in batch.items()}


def _completions(local_model, inputs: dict, output_ids: torch.Tensor) -> list[str]:
    vocabulary = local_model.vocabulary
    prompt_length = inputs["input_ids"].shape[1]
    texts = []
    for row in output_ids[:, prompt_length:].tolist():
        tokens = []
        for token in row:
            if token in vocabulary.eos_token_ids or token == local_model.tokenizer.pad_token_id:
                break
            tokens.append(token)
        texts.append(vocabulary.decode(tokens).decode("utf-8"))
    return texts


def _generate(local_model, texts, constraints, **kwargs):
    inputs = _encode_chat(local_model, texts)
    processor = SurecallLogitsProcessor(constraints, local_model.vocabulary, max_tokens=MAX_TOKENS)
    with torch.inference_mode():
        output = local_model.model.generate(
            **inputs,
            logits_processor=[processor],
            max_new_tokens=MAX_TOKENS + 1,
            pad_token_id=local_model.tokenizer.pad_token_id,
            **kwargs,
        )
    return _completions(local_model, inputs, output)


def _check(text: str, schema: dict) -> None:
    from surecall.validation import validate_json

    validate_json(json.loads(text), schema)


def test_greedy_generate_follows_the_grammar(local_model):
    from surecall import grammar_from_schema

    [text] = _generate(local_model, ["Give a point with x=3 and y=-4 as JSON."], grammar_from_schema(POINT), do_sample=False)
    _check(text, POINT)


def test_sampled_generate_follows_the_grammar(local_model):
    from surecall import grammar_from_schema

    torch.manual_seed(0)
    texts = _generate(local_model, ["Describe a pet as JSON."], grammar_from_schema(PET),
                      do_sample=True, temperature=1.0, top_k=0, num_return_sequences=3)
    assert len(texts) == 3
    for text in texts:
        _check(text, PET)


def test_beam_search_follows_the_grammar_in_every_beam(local_model):
    from surecall import grammar_from_schema

    texts = _generate(local_model, ["Describe a pet as JSON."], grammar_from_schema(PET),
                      do_sample=False, num_beams=3, num_return_sequences=3)
    assert len(texts) == 3
    for text in texts:
        _check(text, PET)


def test_batch_of_three_rows_with_three_schemas(local_model):
    from surecall import grammar_from_schema

    schemas = [POINT, PET, FLAGS]
    texts = _generate(
        local_model,
        ["Give a point as JSON.", "Describe a pet called Rex as JSON.", "List some booleans as a JSON array."],
        [grammar_from_schema(schema) for schema in schemas],
        do_sample=False,
    )
    for text, schema in zip(texts, schemas):
        _check(text, schema)


def test_batch_of_rows_with_beam_search_and_different_schemas(local_model):
    from surecall import grammar_from_schema

    schemas = [POINT, PET]
    texts = _generate(
        local_model,
        ["Give a point as JSON.", "Describe a dog as JSON."],
        [grammar_from_schema(schema) for schema in schemas],
        do_sample=False, num_beams=2, num_return_sequences=2,
    )
    for index, text in enumerate(texts):
        _check(text, schemas[index // 2])


def test_row_count_must_fit_the_constraints(local_model):
    from surecall import grammar_from_schema

    grammar = grammar_from_schema(POINT)
    processor = SurecallLogitsProcessor([grammar, grammar], local_model.vocabulary)
    scores = torch.zeros((3, local_model.logits_size))
    with pytest.raises(ValueError, match="multiple"):
        processor(torch.zeros((3, 4), dtype=torch.long), scores)
