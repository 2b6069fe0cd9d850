"""Fixtures for the LangChain integration tests: one shared embedded model for every ChatSurecall."""

import pytest


@pytest.fixture(scope="session")
def chat(local_model):
    """A greedy ChatSurecall with a small token budget (the tests run on CPU)."""
    from surecall.adapters.langchain import ChatSurecall

    return ChatSurecall(model=local_model, max_tokens=48)
