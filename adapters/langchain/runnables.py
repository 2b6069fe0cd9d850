"""Format-enforcing steps for LangChain chains.

``enforce(output_type, model)`` is a runnable that takes a prompt (a string, messages or
a prompt value, so it drops into ``prompt | ... | parser`` chains) and returns the parsed
value of any surecall output type: a Pydantic class (decorated with
``@surecall.output_type`` or not), a TypedDict or JSON Schema, a ``surecall.Regex`` or an
EBNF ``Grammar``. The output is constrained while decoding, so parsing cannot fail.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableLambda


def enforce(output_type: Any, model: Any = None, **model_kwargs: Any) -> Runnable:
    """A runnable: prompt -> value of ``output_type``, generated under its grammar.

    ``model`` is a ``ChatSurecall`` (default: ``ChatSurecall(**model_kwargs)``, the
    embedded model). For JSON types the schema is also shown to the model, which helps it
    fill sensible values; the grammar alone decides what is valid.
    """
    from surecall.output_types import OutputSpec

    from .chat_model import ChatSurecall

    if model is None:
        model = ChatSurecall(**model_kwargs)
    elif model_kwargs:
        raise ValueError("pass either a model or model settings, not both")
    spec = OutputSpec.of(output_type)
    bind_kwargs: dict[str, Any] = {"grammar": spec.grammar}
    if spec.schema is not None:
        bind_kwargs["response_format"] = {"type": "json_schema", "schema": spec.schema}
    parse = RunnableLambda(lambda message: spec.parse(_text(message)), name=f"parse_{spec.kind}")
    return model.bind(**bind_kwargs) | parse


def _text(message: Any) -> str:
    return message.text if isinstance(message, BaseMessage) else str(message)
