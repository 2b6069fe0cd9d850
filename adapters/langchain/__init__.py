"""LangChain integration: ``ChatSurecall``, a local chat model with grammar-enforced tool
calls and structured output, and ``enforce``, a format-enforcing step for chains."""

from .chat_model import ChatSurecall
from .runnables import enforce
from .tool_format import ToolChoiceError, ToolSchemaError

__all__ = ["ChatSurecall", "ToolChoiceError", "ToolSchemaError", "enforce"]
