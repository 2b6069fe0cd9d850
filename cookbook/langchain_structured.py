"""LangChain chains with guaranteed structure: a prompt template piped into a step that
returns a validated Pydantic object, and a regular-expression step for a plain string.

Runs on the embedded SmolLM2-135M-Instruct (CPU is fine):

    python cookbook/langchain_structured.py
"""

from __future__ import annotations

from typing import Literal

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, Field

import surecall
from surecall.adapters.langchain import ChatSurecall, enforce


@surecall.output_type
class Ticket(BaseModel):
    """A support ticket triaged from a customer message."""

    summary: str = Field(max_length=60)
    category: Literal["billing", "bug", "feature", "other"]
    urgent: bool


PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Triage the customer message into a support ticket."), ("user", "{message}")]
)
MESSAGE = "I was charged twice for my subscription this month, please refund one payment today."
TICKET_ID = surecall.Regex(r"TCK-[0-9]{4}")


def main(model: ChatSurecall | None = None) -> tuple[Ticket, str]:
    model = ChatSurecall(max_tokens=64) if model is None else model
    triage = PROMPT | model.with_structured_output(Ticket)
    ticket = triage.invoke({"message": MESSAGE})
    print(ticket.model_dump_json())
    ticket_id = (PROMPT | enforce(TICKET_ID, model)).invoke({"message": "Give this ticket an id."})
    print(ticket_id)
    return ticket, ticket_id


if __name__ == "__main__":
    main()
