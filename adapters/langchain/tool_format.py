"""Tool-call syntax: how calls look in the model's output, the grammar that enforces it,
and the parsers (whole text and streaming) that read calls back.

A format is described by a few literals around JSON call objects
``{"name": ..., "<arguments_key>": {...}}``. The grammar is built from exactly these
literals, so what the model emits is what the parsers expect.

Formats:

* ``json_list`` (the default, and SmolLM2's convention):
  ``<tool_call>[{"name":"add","arguments":{"a":1}},{...}]</tool_call>``
* ``hermes`` (Hermes, Qwen and other templates that mention ``<tool_call>``):
  one ``<tool_call>\\n{...}\\n</tool_call>`` block per call, separated by newlines
* ``mistral``: ``[TOOL_CALLS][{...},{...}]``
* ``llama3``: a bare ``{"name": ..., "parameters": {...}}`` object (Llama 3.1/3.2 JSON tool calls)
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterator, Literal, Sequence

from surecall.engine import ir
from surecall.engine.grammar import CheckedGrammar
from surecall.tools import ToolSpec


class ToolChoiceError(ValueError):
    """``tool_choice`` names no bound tool or has an unknown shape."""


class ToolSchemaError(ValueError):
    """A tool's argument schema uses something the schema translator does not support."""


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    marker: str  # output starts with this exactly when it is a tool call; plain text never contains it
    prefix: str  # before the first call
    call_open: str  # before each call object
    call_close: str  # after each call object
    separator: str  # between two calls
    suffix: str  # after the last call
    arguments_key: str = "arguments"

    def render(self, calls: Sequence[tuple[str, dict]]) -> str:
        """Calls as the model would write them (used for conversation history)."""
        parts = [self.call_open + _call_json(name, args, self.arguments_key) + self.call_close for name, args in calls]
        return self.prefix + self.separator.join(parts) + self.suffix


JSON_LIST = ToolCallFormat("json_list", "<tool_call>", "<tool_call>[", "", "", ",", "]</tool_call>")
HERMES = ToolCallFormat("hermes", "<tool_call>", "", "<tool_call>\n", "\n</tool_call>", "\n", "")
MISTRAL = ToolCallFormat("mistral", "[TOOL_CALLS]", "[TOOL_CALLS][", "", "", ",", "]")
TOOL_RESPONSE_OPEN = "<tool_response>"  # how tool results are shown to templates without a tool role
LLAMA3 = ToolCallFormat("llama3", '{"name":', "", "", "", "", "", arguments_key="parameters")
FORMATS = {f.name: f for f in (JSON_LIST, HERMES, MISTRAL, LLAMA3)}


def format_for_template(chat_template: str | None) -> ToolCallFormat:
    """The tool-call syntax a chat template teaches its model; ``json_list`` when it defines none."""
    template = chat_template or ""
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template or "<|eom_id|>" in template:
        return LLAMA3
    return JSON_LIST


def _call_json(name: str, args: dict, arguments_key: str) -> str:
    # the spacing models see in their training data; the grammar allows any bounded whitespace
    return json.dumps({"name": name, arguments_key: args}, ensure_ascii=False)


# --- tool choice -------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["auto", "required", "none", "named"]
    name: str | None = None


def normalize_tool_choice(tool_choice: Any, tool_names: Sequence[str]) -> ToolChoice:
    """Map every accepted ``tool_choice`` spelling to a :class:`ToolChoice`, checking names."""
    if tool_choice is None or tool_choice == "auto" or tool_choice is False:
        return ToolChoice("auto")
    if tool_choice in ("any", "required") or tool_choice is True:
        return ToolChoice("required")
    if tool_choice == "none":
        return ToolChoice("none")
    if isinstance(tool_choice, ToolChoice):
        name = tool_choice.name
        if tool_choice.mode != "named":
            return tool_choice
    elif isinstance(tool_choice, str):
        name = tool_choice
    elif isinstance(tool_choice, dict):
        name = _name_from_choice_dict(tool_choice)
    else:
        raise ToolChoiceError(f"unknown tool_choice {tool_choice!r}")
    if name not in tool_names:
        raise ToolChoiceError(
            f"tool_choice names {name!r}, which is not a bound tool; bound tools: {', '.join(tool_names) or '(none)'}"
        )
    return ToolChoice("named", name)


def _name_from_choice_dict(choice: dict) -> str:
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("function"), dict) and "name" in choice["function"]:
        return choice["function"]["name"]
    if kind == "tool" and "name" in choice:  # Anthropic
        return choice["name"]
    if kind in ("any", "required", "auto", "none"):
        raise ToolChoiceError(f"write tool_choice={kind!r} as a string, not {choice!r}")
    if "name" in choice:
        return choice["name"]
    raise ToolChoiceError(f"unknown tool_choice {choice!r}")


# --- grammar -------------------------------------------------------------------------------

_RESPONSE_RULE = "surecall_response"
_CALLS_RULE = "surecall_tool_calls"
_TEXT_RULE = "surecall_text"


def call_schema(specs: Sequence[ToolSpec], arguments_key: str = "arguments") -> dict:
    """JSON Schema of one call object, ``anyOf`` over the tools; nested ``$defs`` hoisted to the root."""
    definitions: dict[str, Any] = {}
    alternatives = []
    for spec in specs:
        parameters = close_objects(_hoist_definitions(spec, definitions))
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": spec.name}, arguments_key: parameters},
                "required": ["name", arguments_key],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    if definitions:
        schema = {**schema, "$defs": {name: close_objects(d) for name, d in definitions.items()}}
    # A draft is read at the root only: one the tools all declare moves there (up to draft 4,
    # an "integer" is written without a fraction).
    drafts = {spec.parameters.get("$schema") for spec in specs}
    if len(drafts) == 1 and isinstance(next(iter(drafts)), str):
        schema = {"$schema": drafts.pop(), **schema}
    return schema


_SUBSCHEMA_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LIST_KEYS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_VALUE_KEYS = ("items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames")


def close_objects(schema: Any, *, close_here: bool = True) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that leaves it open.

    JSON Schema lets unlisted properties through by default; a small model takes that as
    an invitation to invent arguments. Tools and answers name the properties they read,
    so the grammar admits exactly those. ``allOf`` branches stay open themselves (closing
    each would reject the properties the other branches add); their insides are closed.
    """
    if not isinstance(schema, dict):
        return schema
    closed = dict(schema)
    if isinstance(closed.get("allOf"), list):
        closed["allOf"] = [close_objects(sub, close_here=False) for sub in closed["allOf"]]
    for key in _SUBSCHEMA_KEYS:
        if isinstance(closed.get(key), dict):
            closed[key] = {name: close_objects(sub) for name, sub in closed[key].items()}
    for key in _SUBSCHEMA_LIST_KEYS:
        if isinstance(closed.get(key), list):
            closed[key] = [close_objects(sub) for sub in closed[key]]
    for key in _SUBSCHEMA_VALUE_KEYS:
        if isinstance(closed.get(key), dict):
            closed[key] = close_objects(closed[key])
    describes_object = closed.get("type") == "object" or "properties" in closed
    open_ended = any(k in closed for k in ("additionalProperties", "unevaluatedProperties", "patternProperties", "allOf"))
    if close_here and describes_object and "properties" in closed and not open_ended:
        closed["additionalProperties"] = False
    return closed


def _hoist_definitions(spec: ToolSpec, definitions: dict) -> dict:
    """Move the tool's ``$defs``/``definitions`` to the envelope root under tool-prefixed names."""
    parameters = dict(spec.parameters)
    local: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        for def_name, definition in (parameters.pop(key, None) or {}).items():
            local[f"#/{key}/{def_name}"] = (f"{spec.name}__{def_name}", definition)
    self_name = f"{spec.name}__arguments"
    uses_root = _mentions_ref(parameters, "#")

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    if value in local:
                        value = f"#/$defs/{local[value][0]}"
                    elif value == "#":
                        value = f"#/$defs/{self_name}"
                out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    for new_name, definition in local.values():
        definitions[new_name] = rewrite(definition)
    parameters = rewrite(parameters)
    if uses_root:
        definitions[self_name] = parameters
        return {"$ref": f"#/$defs/{self_name}"}
    return parameters


def _mentions_ref(node: Any, target: str) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == target or any(_mentions_ref(v, target) for v in node.values())
    if isinstance(node, list):
        return any(_mentions_ref(v, target) for v in node)
    return False


def tool_call_grammar(
    fmt: ToolCallFormat,
    specs: Sequence[ToolSpec],
    choice: ToolChoice,
    *,
    parallel: bool = True,
    answer_schema: dict | None = None,
):
    """The grammar of a whole response under ``choice``.

    ``auto``: plain text (never containing the format's marker) or one or more calls;
    ``required``/``named``: calls only (``named``: of that tool only); ``none``: plain text.
    With ``answer_schema``, the non-call alternative is JSON matching it instead of free text.
    ``parallel=False`` allows at most one call.
    """
    key = json.dumps(
        [fmt.name, [[s.name, s.parameters] for s in specs], choice.mode, choice.name, parallel, answer_schema],
        sort_keys=True,
        default=str,
    )
    return _cached_grammar(key, fmt, tuple(specs), choice, parallel, _freeze(answer_schema))


def _freeze(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if value is not None else None


@lru_cache(maxsize=128)
def _cached_grammar(_key: str, fmt: ToolCallFormat, specs: tuple, choice: ToolChoice, parallel: bool, answer_json):
    answer_schema = json.loads(answer_json) if answer_json is not None else None
    rules: dict[str, ir.Node] = {}
    alternatives: list[ir.Node] = []
    calls_schema = answer_check_schema = None
    if choice.mode != "none" and specs:
        chosen = [s for s in specs if choice.mode != "named" or s.name == choice.name]
        calls_grammar = _translate_calls(chosen, fmt)
        if calls_grammar.text_check is not None:
            calls_schema = calls_grammar.json_schema
        call_start = _embed(rules, calls_grammar, "call")
        one_call = ir.seq(fmt.call_open, ir.Ref(call_start), fmt.call_close)
        more = ir.star(ir.seq(fmt.separator, one_call)) if parallel else ir.EMPTY
        rules[_CALLS_RULE] = ir.seq(fmt.prefix, one_call, more, fmt.suffix)
        alternatives.append(ir.Ref(_CALLS_RULE))
    calls_only = choice.mode in ("required", "named") and specs
    if not calls_only:
        if answer_schema is not None:
            answer_grammar = json_answer_grammar(answer_schema)
            if answer_grammar.text_check is not None:
                answer_check_schema = answer_grammar.json_schema
            alternatives.append(ir.Ref(_embed(rules, answer_grammar, "answer")))
        else:
            rules[_TEXT_RULE] = ir.Except(_text_exclusions(fmt), None)
            alternatives.append(ir.Ref(_TEXT_RULE))
    rules[_RESPONSE_RULE] = ir.alt(*alternatives)
    check = None
    if calls_schema is not None or answer_check_schema is not None:
        check = response_check(fmt.marker, fmt.prefix.endswith("["), calls_schema, answer_check_schema)
    return CheckedGrammar(rules, _RESPONSE_RULE, text_check=check)


# The states of ``ResponseCheck``: (what the text is known to be, the state of its check).
_UNDECIDED, _CALLS, _ANSWER, _UNCHECKED = range(4)


class ResponseCheck:
    """The text check of a whole response (``uniqueItems`` in tool arguments or in the
    answer): the check of the calls over a response that starts with the format's marker,
    the answer's check over one that does not (plain text is left alone). The calls'
    check reads the whole response, markup included: the markup around the call objects
    holds no quote or brace, and outside JSON values the check only keeps track of
    brackets."""

    def __init__(self, marker: bytes, calls, answer, rebuild: tuple) -> None:
        self._marker = marker
        self._checks = {_CALLS: calls, _ANSWER: answer}
        self._rebuild = rebuild

    def __reduce__(self):
        return self._rebuild

    def initial(self) -> tuple:
        return (_UNDECIDED, b"")

    def accepts(self, text: bytes) -> bool:
        return self.feed(self.initial(), text) is not None

    def feed(self, state: tuple, data: bytes) -> tuple | None:
        kind, held = state
        if kind == _UNCHECKED:
            return state
        if kind != _UNDECIDED:
            after = self._checks[kind].feed(held, data)
            return None if after is None else (kind, after)
        head = held + data
        marker = self._marker
        if len(head) < len(marker) and marker.startswith(head):
            return (_UNDECIDED, head)
        kind = _CALLS if head.startswith(marker) else _ANSWER
        check = self._checks[kind]
        if check is None:
            return (_UNCHECKED, None)
        after = check.feed(check.initial(), head)
        return None if after is None else (kind, after)

    def _undecided_checks(self) -> list:
        return [check for check in self._checks.values() if check is not None]

    def trigger_bytes(self, state: tuple) -> bytes | None:
        kind, held = state
        if kind == _UNCHECKED:
            return None
        if kind != _UNDECIDED:
            return self._checks[kind].trigger_bytes(held)
        triggers = [check.trigger_bytes(check.initial()) for check in self._undecided_checks()]
        # A token that can fail either check: an empty set of triggers lets every token through to feed.
        return b"" if any(not found for found in triggers) else bytes(sorted(set(b"".join(triggers))))

    def trigger_in_order(self, state: tuple) -> bytes | None:
        kind, held = state
        if kind in (_CALLS, _ANSWER):
            in_order = getattr(self._checks[kind], "trigger_in_order", None)
            return in_order(held) if in_order is not None else None
        if kind == _UNDECIDED:
            orders = set()
            for check in self._undecided_checks():
                in_order = getattr(check, "trigger_in_order", None)
                orders.add(in_order(check.initial()) if in_order is not None else None)
            return orders.pop() if len(orders) == 1 else None
        return None

    def refused_among(self, state: tuple, datas: list[bytes]) -> list[int]:
        kind, held = state
        refused_among = getattr(self._checks.get(kind), "refused_among", None)
        if refused_among is not None:
            return refused_among(held, datas)
        return [index for index, data in enumerate(datas) if self.feed(state, data) is None]


def response_check(marker: str, calls_in_list: bool, calls_schema: dict | None, answer_schema: dict | None) -> ResponseCheck:
    """The ``ResponseCheck`` of a response whose calls start with ``marker`` and follow
    ``calls_schema`` (one call object; ``calls_in_list``: written as items of one JSON list)
    and whose JSON answer follows ``answer_schema``; either schema may be None (nothing to
    check there)."""
    from surecall.schema import unique_items_check

    calls = unique_items_check(calls_schema, items=calls_in_list) if calls_schema is not None else None
    answer = unique_items_check(answer_schema) if answer_schema is not None else None
    recipe = (response_check, (marker, calls_in_list, calls_schema, answer_schema))
    return ResponseCheck(marker.encode("utf-8"), calls, answer, recipe)


def json_answer_grammar(schema: dict):
    """The grammar of a JSON answer matching ``schema`` (objects closed, natural whitespace)."""
    return _cached_answer_grammar(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=128)
def _cached_answer_grammar(schema_json: str):
    return _translate(close_objects(json.loads(schema_json)))


def _text_exclusions(fmt: ToolCallFormat) -> tuple[bytes, ...]:
    """Markup plain text may not contain: the call marker, and tool tags (``<tool_response>``
    and look-alikes) a small model would otherwise echo from the conversation."""
    return tuple(dict.fromkeys(m.encode("utf-8") for m in (fmt.marker, "<tool_", "</tool_")))


def _translate(schema: dict, whitespace: str = "flexible"):
    from surecall.schema import grammar_from_schema

    return grammar_from_schema(schema, whitespace=whitespace)


def _translate_calls(specs: Sequence[ToolSpec], fmt: ToolCallFormat):
    from surecall.schema import UnsupportedSchemaError

    # Where the marker is the start of the call object itself (``{"name":``), whitespace
    # inside it would make a call that neither the parsers nor plain text's exclusion
    # recognise: such calls are spaced as json.dumps spaces them, as the model has seen.
    whitespace = "spaced" if not fmt.prefix and not fmt.call_open else "flexible"
    try:
        return _translate(call_schema(specs, fmt.arguments_key), whitespace)
    except UnsupportedSchemaError as error:
        for spec in specs:  # name the tool whose schema the translator rejects
            try:
                _translate(spec.parameters)
            except UnsupportedSchemaError as tool_error:
                raise ToolSchemaError(f"tool {spec.name!r}: {tool_error}") from error
        raise ToolSchemaError(f"tools {', '.join(s.name for s in specs)}: {error}") from error


def _embed(rules: dict, grammar, namespace: str) -> str:
    """Copy a translated grammar's rules into ``rules`` under ``namespace``; returns its start rule's new name."""
    renamed = {name: f"{namespace}::{name}" for name in grammar.rules}

    def rename(node: ir.Node) -> ir.Node:
        if isinstance(node, ir.Ref):
            return ir.Ref(renamed.get(node.name, node.name))
        if isinstance(node, (ir.Seq, ir.Alt, ir.Intersect)):
            return type(node)(tuple(rename(item) for item in node.items))
        if isinstance(node, ir.Repeat):
            return ir.Repeat(rename(node.item), node.min, node.max)
        if isinstance(node, ir.Complement):
            return ir.Complement(rename(node.item))
        return node

    for name, node in grammar.rules.items():
        rules[renamed[name]] = rename(node)
    return renamed[grammar.start]


# --- parsing -------------------------------------------------------------------------------


@dataclass
class ParsedCall:
    name: str
    args: dict | None
    raw_args: str
    error: str | None = None


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_response(text: str, fmt: ToolCallFormat) -> tuple[str, list[ParsedCall]]:
    """Split a finished response into (text content, calls). Text without the marker has no calls."""
    stripped = text.lstrip()
    if not stripped.startswith(fmt.marker):
        return text, []
    calls: list[ParsedCall] = []
    decoder = json.JSONDecoder()
    position = _expect(stripped, 0, fmt.prefix)
    while position is not None and position < len(stripped):
        start = _expect(stripped, position, fmt.call_open)
        if start is None:
            break
        try:
            value, end = decoder.raw_decode(stripped, _skip_space(stripped, start))
        except json.JSONDecodeError as error:
            calls.append(ParsedCall("", None, stripped[start:], f"unparsable tool call: {error.msg}"))
            break
        calls.append(_call_from_object(value, stripped[start:end], fmt.arguments_key))
        position = _expect(stripped, end, fmt.call_close)
        if position is None:
            break
        after_separator = _expect(stripped, position, fmt.separator) if fmt.separator else position
        if after_separator is None or _expect(stripped, position, fmt.suffix) == len(stripped.rstrip()):
            break
        position = after_separator
    if not calls:
        return text, []
    return "", calls


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _expect(text: str, position: int, literal: str) -> int | None:
    if not literal:
        return position
    if text.startswith(literal, position):
        return position + len(literal)
    compact = _skip_space(text, position)
    if text.startswith(literal.strip(), compact) and literal.strip():
        return compact + len(literal.strip())
    return None


def _call_from_object(value: Any, raw: str, arguments_key: str) -> ParsedCall:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ParsedCall("", None, raw, "a tool call must be an object with a string 'name'")
    args = value.get(arguments_key, {})
    if not isinstance(args, dict):
        return ParsedCall(value["name"], None, json.dumps(args), f"'{arguments_key}' must be an object")
    return ParsedCall(value["name"], args, json.dumps(args, ensure_ascii=False))


# --- streaming -----------------------------------------------------------------------------


@dataclass
class TextDelta:
    text: str


@dataclass
class CallStart:
    index: int
    name: str


@dataclass
class ArgsDelta:
    index: int
    text: str


class StreamingParser:
    """Turns text deltas into text deltas and tool-call events as they arrive.

    The response is a call block exactly when it starts with the marker (the grammar
    guarantees plain text never contains it), so text is held back only while it is
    still a prefix of the marker. Inside a call block the parser tracks JSON structure:
    a call's name is announced once complete, then its arguments stream verbatim.
    """

    def __init__(self, fmt: ToolCallFormat):
        self.fmt = fmt
        self._pending = ""
        self._mode: Literal["undecided", "text", "calls"] = "undecided"
        self._calls = 0
        # call-block scanner state
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._string = ""
        self._last_key: str | None = None
        self._expect_value_of: str | None = None
        self._args_depth: int | None = None
        self._args_pending_start = False

    def feed(self, text: str) -> Iterator[TextDelta | CallStart | ArgsDelta]:
        if self._mode == "text":
            if text:
                yield TextDelta(text)
            return
        if self._mode == "undecided":
            self._pending += text
            stripped = self._pending.lstrip()
            if stripped.startswith(self.fmt.marker):
                self._mode = "calls"
                text, self._pending = self._pending, ""
            elif self.fmt.marker.startswith(stripped):
                return
            else:
                self._mode = "text"
                text, self._pending = self._pending, ""
                yield TextDelta(text)
                return
        yield from self._scan(text)

    def finish(self) -> Iterator[TextDelta]:
        if self._mode == "undecided" and self._pending:
            yield TextDelta(self._pending)
        self._pending = ""

    def _scan(self, text: str) -> Iterator[CallStart | ArgsDelta]:
        args_chunk = []
        for char in text:
            if self._args_depth is not None:
                if not args_chunk and self._args_pending_start and char in " \t\r\n":
                    continue
                self._args_pending_start = False
                args_chunk.append(char)
                self._track_json(char)
                closes_call = self._depth < self._args_depth
                next_member = char == "," and self._depth == self._args_depth and not self._in_string
                if closes_call or next_member:
                    # the arguments value ended with the previous character
                    args_chunk.pop()
                    self._args_depth = None
                    self._expect_value_of = None
                    if args_chunk:
                        yield ArgsDelta(self._calls - 1, "".join(args_chunk))
                    args_chunk = []
                continue
            if self._depth == 0:
                if char == "{":
                    self._depth = 1
                    self._last_key = None
                    self._expect_value_of = None
                continue
            event = self._scan_call_object(char)
            if event is not None:
                yield event
        if args_chunk and self._args_depth is not None:
            yield ArgsDelta(self._calls - 1, "".join(args_chunk))

    def _track_json(self, char: str) -> None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif char == "\\":
                self._escape = True
            elif char == '"':
                self._in_string = False
            return
        if char == '"':
            self._in_string = True
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1

    def _scan_call_object(self, char: str) -> CallStart | None:
        """Inside a call object (depth 1), outside its arguments value."""
        if self._in_string:
            if self._escape:
                self._escape = False
                self._string += char
            elif char == "\\":
                self._escape = True
            elif char == '"':
                self._in_string = False
                return self._string_done(self._string)
            else:
                self._string += char
            return None
        if char == '"':
            self._in_string = True
            self._string = ""
        elif char == ":":
            self._expect_value_of = self._last_key
            if self._expect_value_of == self.fmt.arguments_key:
                self._args_depth = self._depth
                self._args_pending_start = True
        elif char == "}":
            self._depth = 0
        return None

    def _string_done(self, value: str) -> CallStart | None:
        if self._expect_value_of == "name":
            self._expect_value_of = None
            self._calls += 1
            return CallStart(self._calls - 1, value)
        if self._expect_value_of is None:
            self._last_key = value
        return None

