"""One batched decode for several prompts, each with its own output type.

    python cookbook/batch_mixed.py
"""

from pydantic import BaseModel, Field

import surecall


class Sentiment(BaseModel):
    label: str = Field(pattern=r"^(positive|negative|neutral)$")
    confidence: float = Field(ge=0, le=1)


CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def main(model=None) -> list:
    model = surecall.load_model() if model is None else model
    prompts = [
        [{"role": "user", "content": "Sentiment of: 'The update made everything faster, love it.'"}],
        [{"role": "user", "content": "Where is the Eiffel Tower? Answer as JSON."}],
        [{"role": "user", "content": "Is 17 a prime number? Answer yes or no."}],
    ]
    values = surecall.generate_batch(model, prompts, [Sentiment, CITY, surecall.Regex("yes|no")], max_tokens=48)
    for value in values:
        print(repr(value))
    return values


if __name__ == "__main__":
    main()
