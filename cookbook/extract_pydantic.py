"""Structured extraction: a Pydantic model in, a validated instance out.

Runs on the embedded SmolLM2-135M-Instruct (CPU is fine):

    python cookbook/extract_pydantic.py
"""

from typing import Literal, Optional

from pydantic import BaseModel, Field

import surecall


@surecall.output_type
class Contact(BaseModel):
    """A contact extracted from an email signature."""

    name: str = Field(max_length=40)
    role: Optional[str] = Field(default=None, max_length=40)
    company: str = Field(max_length=40)
    email: str = Field(pattern=r"^[a-z.]{1,20}@[a-z]{1,20}\.(com|org|io)$")
    preferred_contact: Literal["email", "phone"]


SIGNATURE = """Thanks again for the demo!
--
Maria Gonzalez, Head of Data at Northwind Traders
maria.gonzalez@northwind.com - please email rather than call."""


def main(model=None) -> Contact:
    model = surecall.load_model() if model is None else model
    messages = [
        {"role": "system", "content": "Extract the contact details as JSON: the person's name, their role, "
                                      "the company, the email address and how they prefer to be contacted."},
        {"role": "user", "content": SIGNATURE},
    ]
    contact = surecall.generate(model, messages, Contact, max_tokens=96)
    print(contact.model_dump_json(indent=2))
    return contact


if __name__ == "__main__":
    main()
