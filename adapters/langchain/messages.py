"""LangChain messages -> a prompt through the model's chat template.

Templates that understand tools (a ``tools`` variable, assistant ``tool_calls`` and a
``tool`` role) get them natively. For the others (SmolLM2's template among them) tools
are described in the system prompt, past calls are written in the tool-call format the
grammar enforces, and tool results come back as user turns wrapped in
``<tool_response>`` tags: the conventions the SmolLM2 family was tuned on.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from surecall.tools import ToolSpec

from .tool_format import TOOL_RESPONSE_OPEN, ToolCallFormat, ToolChoice

_TEXT_BLOCK_TYPES = {"text", "input_text", "output_text"}
# blocks that carry no prompt text of their own: tool calls are rendered from
# ``AIMessage.tool_calls``, reasoning is not fed back to the model
_SILENT_BLOCK_TYPES = {"tool_use", "tool_call", "tool_call_chunk", "function_call", "thinking", "reasoning",
                       "redacted_thinking", "server_tool_call", "server_tool_result"}


class UnsupportedContentError(ValueError):
    """A message holds content this text-only model cannot read (images, audio, files)."""


def content_text(content: Any) -> str:
    """The text of a message's content (a string or a list of content blocks)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, str):
            parts.append(block)
            continue
        kind = block.get("type")
        if kind in _TEXT_BLOCK_TYPES:
            parts.append(block.get("text", ""))
        elif kind in _SILENT_BLOCK_TYPES:
            continue
        elif kind == "non_standard" and isinstance(block.get("value"), dict) and "text" in block["value"]:
            parts.append(block["value"]["text"])
        else:
            raise UnsupportedContentError(
                f"ChatSurecall reads text only; a message contains a {kind!r} content block"
            )
    return "".join(parts)


def template_supports_tools(chat_template: str | None) -> bool:
    template = chat_template or ""
    return "tools" in template and "tool_calls" in template


def tool_instructions(specs: Sequence[ToolSpec], fmt: ToolCallFormat, choice: ToolChoice) -> str:
    """The system prompt that teaches a template without tool support how to call tools."""
    if choice.mode == "none":
        return choice_hint(choice)
    definitions = json.dumps(
        [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs],
        ensure_ascii=False,
    )
    example = fmt.render([("tool_name", {"argument_name": "value"})])
    return "\n".join(
        [
            f"You have access to these tools:\n<tools>{definitions}</tools>",
            f"To use tools, reply with only the calls, in this format:\n{example}",
            "Take the argument values from the user's message. Tool results are given between "
            "<tool_response> and </tool_response>.",
            choice_hint(choice),
        ]
    )


def choice_hint(choice: ToolChoice) -> str:
    if choice.mode == "required":
        return "Call a tool now."
    if choice.mode == "named":
        return f"Call the tool {choice.name} now."
    if choice.mode == "none":
        return "Do not call tools now; answer in plain text."
    return "When a tool fits the request, call it. Once its result is given, answer in plain text."


def answer_schema_hint(schema: dict) -> str:
    return "Reply with JSON only, matching this JSON Schema: " + json.dumps(schema, ensure_ascii=False)


def to_template_messages(
    messages: Sequence[BaseMessage],
    *,
    fmt: ToolCallFormat,
    native_tools: bool,
    system_extra: Sequence[str] = (),
) -> list[dict]:
    """Messages as chat-template dicts; all system text merged into one leading system turn."""
    system_parts: list[str] = []
    turns: list[dict] = []
    for message in messages:
        if isinstance(message, SystemMessage) or (isinstance(message, ChatMessage) and message.role == "system"):
            system_parts.append(content_text(message.content))
        elif isinstance(message, AIMessage):
            turns.append(_assistant_turn(message, fmt, native_tools))
        elif isinstance(message, (ToolMessage, FunctionMessage)):
            turns.append(_tool_turn(message, native_tools))
        elif isinstance(message, HumanMessage):
            turns.append(_named({"role": "user", "content": content_text(message.content)}, message))
        elif isinstance(message, ChatMessage):
            turns.append(_named({"role": message.role, "content": content_text(message.content)}, message))
        else:
            raise TypeError(f"ChatSurecall cannot render a {type(message).__name__}")
    system_parts.extend(part for part in system_extra if part)
    if system_parts:
        turns.insert(0, {"role": "system", "content": "\n\n".join(system_parts)})
    return turns


def _named(turn: dict, message: BaseMessage) -> dict:
    if message.name:
        turn["name"] = message.name
    return turn


def _assistant_turn(message: AIMessage, fmt: ToolCallFormat, native_tools: bool) -> dict:
    text = content_text(message.content)
    calls = message.tool_calls
    if not calls:
        return _named({"role": "assistant", "content": text}, message)
    if native_tools:
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {"id": call.get("id"), "type": "function", "function": {"name": call["name"], "arguments": call["args"]}}
                for call in calls
            ],
        }
    rendered = fmt.render([(call["name"], call["args"]) for call in calls])
    return {"role": "assistant", "content": (text + "\n" if text else "") + rendered}


def _tool_turn(message: ToolMessage | FunctionMessage, native_tools: bool) -> dict:
    text = content_text(message.content)
    if getattr(message, "status", "success") == "error":
        text = f"The tool call failed: {text}"
    if native_tools:
        turn = {"role": "tool", "content": text}
        if isinstance(message, ToolMessage):
            turn["tool_call_id"] = message.tool_call_id
        if message.name:
            turn["name"] = message.name
        return turn
    return {"role": "user", "content": f"{TOOL_RESPONSE_OPEN}\n{text}\n</tool_response>"}


def render_prompt(
    tokenizer: Any,
    messages: Sequence[BaseMessage],
    *,
    specs: Sequence[ToolSpec] = (),
    fmt: ToolCallFormat,
    choice: ToolChoice,
    answer_schema: dict | None = None,
) -> str:
    """The prompt text, generation prompt included, ready to tokenize."""
    chat_template = getattr(tokenizer, "chat_template", None)
    native_tools = template_supports_tools(chat_template)
    extra: list[str] = []
    if specs and not native_tools:
        extra.append(tool_instructions(specs, fmt, choice))
    elif specs and choice.mode != "auto":
        extra.append(choice_hint(choice))
    if answer_schema is not None:
        extra.append(answer_schema_hint(answer_schema))
    turns = to_template_messages(messages, fmt=fmt, native_tools=native_tools, system_extra=extra)
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if specs and native_tools and choice.mode != "none":
        kwargs["tools"] = [spec.to_openai() for spec in specs]
    return tokenizer.apply_chat_template(turns, **kwargs)
