"""Message history goes through the chat template: roles, tool calls, tool results, system text."""

from __future__ import annotations

import copy
import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from surecall.adapters.langchain.messages import UnsupportedContentError, content_text, render_prompt
from surecall.adapters.langchain.tool_format import HERMES, JSON_LIST, ToolChoice
from surecall.tools import ToolSpec

ADD = ToolSpec(
    "my_adder_tool",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)
HISTORY = [
    SystemMessage("Be brief."),
    HumanMessage("What is 1 + 2", name="example_user"),
    AIMessage(
        [{"type": "text", "text": "Let me add."}, {"type": "tool_use", "id": "abc", "name": "my_adder_tool", "input": {"a": 1, "b": 2}}],
        tool_calls=[{"name": "my_adder_tool", "args": {"a": 1, "b": 2}, "id": "abc", "type": "tool_call"}],
    ),
    ToolMessage(json.dumps({"result": 3}), tool_call_id="abc", name="my_adder_tool"),
    ToolMessage("Missing argument 'b'.", tool_call_id="abd", status="error"),
    SystemMessage("Answer in English."),
]


def test_history_without_template_tool_support(smollm2_tokenizer):
    prompt = render_prompt(smollm2_tokenizer, HISTORY, specs=[ADD], fmt=JSON_LIST, choice=ToolChoice("auto"))
    assert prompt.count("<|im_start|>system") == 1  # all system text merged into the leading turn
    system = prompt.split("<|im_end|>")[0]
    assert "Be brief." in system and "Answer in English." in system and '"my_adder_tool"' in system
    assert JSON_LIST.render([("my_adder_tool", {"a": 1, "b": 2})]) in prompt
    assert "Let me add." in prompt
    assert '<tool_response>\n{"result": 3}\n</tool_response>' in prompt
    assert "The tool call failed: Missing argument 'b'." in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_choice_is_stated_in_the_prompt(smollm2_tokenizer):
    named = render_prompt(smollm2_tokenizer, HISTORY[:2], specs=[ADD], fmt=JSON_LIST, choice=ToolChoice("named", "my_adder_tool"))
    assert "Call the tool my_adder_tool now." in named
    none = render_prompt(smollm2_tokenizer, HISTORY[:2], specs=[ADD], fmt=JSON_LIST, choice=ToolChoice("none"))
    assert "<tools>" not in none and "plain text" in none


TOOL_TEMPLATE = (
    "{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}{% endif %}"
    "{% if m.tool_call_id %}(for {{ m.tool_call_id }}){% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


def test_templates_with_tool_support_get_tools_natively(smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = TOOL_TEMPLATE
    prompt = render_prompt(tokenizer, HISTORY, specs=[ADD], fmt=HERMES, choice=ToolChoice("auto"))
    assert prompt.startswith("TOOLS:[")
    call = prompt.split("<tool_call>")[1].split("</tool_call>")[0]
    assert json.loads(call) == {"name": "my_adder_tool", "arguments": {"a": 1, "b": 2}}
    assert "[tool]" in prompt and "(for abc)" in prompt
    assert "<tools>" not in prompt  # no duplicate instructions in the system prompt


def test_list_content_keeps_text_and_drops_tool_use_blocks():
    blocks = [{"type": "text", "text": "a"}, "b", {"type": "tool_use", "id": "x", "name": "f", "input": {}}, {"type": "thinking", "thinking": "t"}]
    assert content_text(blocks) == "ab"


@pytest.mark.parametrize("block_type", ["image", "image_url", "audio", "file"])
def test_non_text_blocks_are_refused(block_type):
    with pytest.raises(UnsupportedContentError, match=block_type):
        content_text([{"type": block_type}])
