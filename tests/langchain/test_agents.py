"""Agent loops with ChatSurecall and real tools end."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from surecall.adapters.langchain import ChatSurecall

pytestmark = pytest.mark.model

calls: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    calls.append(city)
    return f"It is sunny in {city}."


def _check_run(messages) -> None:
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert tool_messages, "the agent called no tool"
    assert all(m.status == "success" and m.name == "get_weather" for m in tool_messages)
    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert final.text


def test_create_agent_calls_the_tool_and_ends(local_model):
    from langchain.agents import create_agent

    agent = create_agent(ChatSurecall(model=local_model, max_tokens=40), tools=[get_weather])
    calls.clear()
    result = agent.invoke({"messages": [("user", "What is the weather in Paris?")]}, {"recursion_limit": 8})
    _check_run(result["messages"])
    assert calls  # the real tool ran


def test_langgraph_prebuilt_agent_calls_the_tool_and_ends(local_model):
    import warnings

    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # superseded by langchain.agents.create_agent
        agent = create_react_agent(ChatSurecall(model=local_model, max_tokens=40), [get_weather])
    calls.clear()
    result = agent.invoke({"messages": [("user", "What is the weather in Rome?")]}, {"recursion_limit": 8})
    _check_run(result["messages"])
    assert calls
