"""LangChain's standard chat-model suites, run offline against the embedded SmolLM2-135M-Instruct."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from surecall.adapters.langchain import ChatSurecall

pytestmark = pytest.mark.model


class TestChatSurecallUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatSurecall]:
        return ChatSurecall

    # test_serdes skips itself ("Model is not serializable"): langchain_core.load revives only
    # classes on its own allow-list of integrations, so no third-party model can round-trip.
    # test_init_from_env skips itself: ChatSurecall reads no settings from the environment.

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def supports_anthropic_inputs(self) -> bool:
        return True


class TestChatSurecallIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatSurecall]:
        return ChatSurecall

    @property
    def chat_model_params(self) -> dict:
        # small budgets keep the suite fast on CPU; the grammar keeps structured answers complete
        return {"max_tokens": 40}

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def supports_anthropic_inputs(self) -> bool:
        return True

    @property
    def supports_model_override(self) -> bool:
        # switching checkpoints per call works (``invoke(..., model=...)``), but the offline
        # test environment holds only the embedded model, so there is nothing to switch to
        return False
