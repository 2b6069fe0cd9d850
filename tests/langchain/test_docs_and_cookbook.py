"""The LangChain quick start in docs/langchain.md and the LangChain cookbook examples run as written."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]


def quick_start_snippet() -> str:
    text = (ROOT / "docs" / "langchain.md").read_text()
    section = text.split("## Quick start", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_quick_start_is_short():
    assert len(quick_start_snippet().splitlines()) < 20


def test_readme_shows_the_tested_quick_start():
    readme = (ROOT / "README.md").read_text()
    assert quick_start_snippet() in readme.split("## LangChain quick start", 1)[1]


def test_quick_start_runs(local_model):
    namespace: dict = {"__name__": "quick_start"}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(quick_start_snippet(), "docs/langchain.md", "exec"), namespace)
    city_line, answer = output.getvalue().strip().split("\n", 1)
    assert re.fullmatch(r"name='.*' country='.*'", city_line)
    assert answer.strip() and "<tool_" not in answer
    assert namespace["model"].local_model is local_model  # shares the session's model, no second load


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"cookbook_{name}", ROOT / "cookbook" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Pydantic resolves the example's annotations through it
    spec.loader.exec_module(module)
    return module


def test_cookbook_langchain_structured(local_model):
    from surecall.adapters.langchain import ChatSurecall

    example = _example("langchain_structured")
    ticket, ticket_id = example.main(ChatSurecall(model=local_model, max_tokens=64))
    assert isinstance(ticket, example.Ticket)
    example.Ticket.model_validate(ticket.model_dump())
    assert example.TICKET_ID.grammar.accepts(ticket_id)


def test_cookbook_langchain_agent(local_model):
    from surecall.adapters.langchain import ChatSurecall

    example = _example("langchain_agent")
    answer, messages = example.main(ChatSurecall(model=local_model, max_tokens=48))
    assert isinstance(answer, str)
    assert messages[-1].tool_calls[0]["name"] == "final_answer"
