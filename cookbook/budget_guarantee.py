"""max_tokens is a guarantee, not a cut-off: a tight budget still yields complete, valid JSON.

Plain masking stops mid-string when the budget runs out; surecall's matcher knows how many
tokens every state still needs and steers the model to finish in time.

    python cookbook/budget_guarantee.py
"""

from __future__ import annotations

import json

import surecall
from surecall.adapters.transformers.decode import decode
from surecall.engine import Matcher
from surecall.generation import render_prompt

REVIEW = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "pros": {"type": "array", "items": {"type": "string"}}},
    "required": ["summary", "pros"],
    "additionalProperties": False,
}


def main(model=None) -> dict:
    model = surecall.load_model() if model is None else model
    grammar = surecall.grammar_from_schema(REVIEW)
    minimum = Matcher(grammar, model.vocabulary).min_tokens_to_finish()
    budget = minimum + 6
    prompt = render_prompt(model.tokenizer, [{"role": "user", "content": "Review the new phone in great detail."}])

    plain = decode(model, prompt, Matcher(grammar, model.vocabulary), max_tokens=budget)
    print(f"plain masking, {budget} tokens ({plain.finish_reason}): {plain.text}")

    value = surecall.generate(model, [{"role": "user", "content": "Review the new phone in great detail."}],
                              REVIEW, max_tokens=budget)
    print(f"with the budget, {budget} tokens: {json.dumps(value)}")
    return value


if __name__ == "__main__":
    main()
