"""A multi-step tool-calling agent that always ends.

Every reply is forced to be a tool call (``tool_choice="any"``), so the arguments always
validate; the loop ends through an explicit path: the model calls ``final_answer``, or,
after ``max_steps`` tool rounds, the next reply is forced to be exactly that call.

Runs on the embedded SmolLM2-135M-Instruct (CPU is fine):

    python cookbook/langchain_agent.py
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from surecall.adapters.langchain import ChatSurecall


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def final_answer(answer: str) -> str:
    """Give the final answer to the user and stop."""
    return answer


TOOLS = {t.name: t for t in (multiply, add, final_answer)}
QUESTION = "What is 6 times 7? Use the tools, then give the final answer."


def run_agent(model: ChatSurecall, question: str, *, max_steps: int = 3) -> tuple[str, list[BaseMessage]]:
    messages: list[BaseMessage] = [
        SystemMessage("Solve the task with the tools. Call final_answer with the result when done."),
        HumanMessage(question),
    ]
    working = model.bind_tools(list(TOOLS.values()), tool_choice="any", parallel_tool_calls=False)
    finishing = model.bind_tools(list(TOOLS.values()), tool_choice="final_answer")
    step = 0
    while True:
        reply = (working if step < max_steps else finishing).invoke(messages)
        messages.append(reply)
        call = reply.tool_calls[0]  # the grammar guarantees exactly one valid call
        if call["name"] == "final_answer":
            return call["args"]["answer"], messages
        messages.append(TOOLS[call["name"]].invoke(call))  # a ToolMessage answering the call
        step += 1


def main(model: ChatSurecall | None = None) -> tuple[str, list[BaseMessage]]:
    model = ChatSurecall(max_tokens=48) if model is None else model
    answer, messages = run_agent(model, QUESTION)
    for message in messages[1:]:
        print(f"{message.type}: {message.text or message.tool_calls}")
    print("answer:", answer)
    return answer, messages


if __name__ == "__main__":
    main()
