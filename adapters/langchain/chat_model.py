"""``ChatSurecall``: a LangChain chat model over a local transformers model whose tool
calls and structured answers are enforced by a grammar while decoding."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from operator import itemgetter
from typing import Any, AsyncIterator, Callable, Iterator, Literal, Sequence

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.output_parsers import JsonOutputKeyToolsParser, JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import PydanticToolsParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema
from pydantic import ConfigDict, PrivateAttr, SecretStr

from surecall.tools import ToolSpec, tool_spec, tool_specs

from .batching import scheduler_for
from .messages import render_prompt, template_supports_tools
from .tool_format import (
    FORMATS,
    ArgsDelta,
    CallStart,
    StreamingParser,
    ToolSchemaError,
    TextDelta,
    ToolCallFormat,
    ToolChoice,
    format_for_template,
    json_answer_grammar,
    new_call_id,
    normalize_tool_choice,
    parse_response,
    tool_call_grammar,
)

PROVIDER = "surecall"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"

def shared_model(name: str | None, device: Any = None, dtype: Any = None):
    """The process-wide instance of a model, so every ChatSurecall naming it shares its batches."""
    from surecall.adapters.transformers.loading import shared_model as load_shared

    return load_shared(name, device=device, dtype=dtype)


class ChatSurecall(BaseChatModel):
    """A local chat model with grammar-enforced tool calls and structured output.

    ``ChatSurecall()`` runs the embedded SmolLM2-135M-Instruct; ``model`` may be a Hugging
    Face id, a local folder or ``.gguf`` file, or an already loaded ``LocalModel``.
    ``temperature=0`` (the default) decodes greedily. ``api_key``, ``timeout`` and
    ``max_retries`` are accepted for drop-in compatibility with hosted chat models and
    have nothing to act on locally: generation is bounded by ``max_tokens``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True)

    model: Any = None
    temperature: float = 0.0
    max_tokens: int | None = 512
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    timeout: float | None = None
    max_retries: int = 0
    api_key: SecretStr | None = None
    streaming: bool = False
    device: str | None = None
    dtype: str | None = None
    tool_call_format: str | None = None
    """Override the tool-call syntax (``json_list``, ``hermes``, ``mistral``, ``llama3``);
    by default it is read from the chat template."""
    auto_tool_calls: Literal["model", "on_user_turn"] | None = None
    """How ``tool_choice="auto"`` picks between text and calls. ``"model"``: the model
    decides with its first token. ``"on_user_turn"``: a reply to the user's message holds at
    least one call and a reply to tool results is text (the rhythm of an agent loop, which
    models never tuned on tool calls do not find by themselves; left free, they repeat the
    call they just made).
    Default: ``"model"`` when the chat template defines tool calling, else ``"on_user_turn"``."""

    _local_model: Any = PrivateAttr(default=None)

    # --- model --------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        if self.model is None:
            return EMBEDDED_MODEL_NAME
        if isinstance(self.model, str):
            return self.model
        return getattr(self.model, "name", type(self.model).__name__)

    def _resolve(self, override: Any = None):
        """The ``LocalModel`` to run: a per-call ``model=`` override, else this instance's model."""
        if override is not None and override != self.model and override != self.model_name:
            return override if not isinstance(override, str) else shared_model(override, self.device, self.dtype)
        if self._local_model is None:
            if self.model is not None and not isinstance(self.model, str):
                self._local_model = self.model
            else:
                self._local_model = shared_model(self.model, self.device, self.dtype)
        return self._local_model

    @property
    def local_model(self):
        """The loaded ``LocalModel`` (loaded on first use)."""
        return self._resolve()

    def _resolve_model_profile(self):
        return {
            "text_inputs": True,
            "text_outputs": True,
            "image_inputs": False,
            "audio_inputs": False,
            "pdf_inputs": False,
            "video_inputs": False,
            "tool_calling": True,
            "tool_choice": True,
            "tool_call_streaming": True,
            "structured_output": True,
            "open_weights": True,
        }

    @property
    def _llm_type(self) -> str:
        return "surecall-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any):
        override = kwargs.get("model")
        name = override if isinstance(override, str) else getattr(override, "name", None) or self.model_name
        params = {
            "ls_provider": PROVIDER,
            "ls_model_name": name,
            "ls_model_type": "chat",
            "ls_temperature": kwargs.get("temperature", self.temperature),
        }
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        stop = stop or kwargs.get("stop") or self.stop
        if stop:
            params["ls_stop"] = stop
        return params

    # --- tools and structured output -------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable | Any],
        *,
        tool_choice: str | dict | bool | None = None,
        parallel_tool_calls: bool | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; the grammar enforces ``tool_choice`` while decoding.

        ``tool_choice``: ``"auto"``/``None`` text or calls; ``"any"``/``"required"``/``True``
        at least one call; a tool name or ``{"type": "function", "function": {"name": ...}}``
        that tool; ``"none"`` text only. ``parallel_tool_calls=False`` allows at most one
        call. Arguments always match the tool's schema, so ``strict`` changes nothing.
        """
        specs = tool_specs(tools)
        choice = normalize_tool_choice(tool_choice, [s.name for s in specs])
        for spec in specs:  # reject schemas the translator cannot handle now, not at the first call
            _check_translatable(spec)
        return self.bind(
            tools=[spec.to_openai() for spec in specs],
            tool_choice=_choice_kwarg(choice),
            parallel_tool_calls=parallel_tool_calls,
            **kwargs,
        )

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict | Any]:
        """A runnable that returns ``schema``-shaped output, enforced by the grammar.

        ``schema``: a Pydantic class (v2 or v1), TypedDict, JSON Schema or OpenAI function
        dict. ``method="json_schema"`` (default) constrains the answer to the schema;
        ``"function_calling"`` forces a call of a tool built from the schema;
        ``"json_mode"`` asks for a JSON object (constrained to ``schema`` when given).
        ``include_raw=True`` returns ``{"raw", "parsed", "parsing_error"}``.
        """
        if kwargs:
            raise ValueError(f"unexpected arguments for with_structured_output: {sorted(kwargs)}")
        if schema is None and method != "json_mode":
            raise ValueError(f"method={method!r} needs a schema")
        from surecall.output_types import OutputSpec

        if schema is not None and not _is_json_schema_kind(schema):
            # a Regex or an EBNF Grammar: no JSON, the output type's own parser reads the text
            spec = OutputSpec.of(schema)
            llm = self.bind(grammar=spec.grammar)
            parser: Runnable = RunnableLambda(lambda message: spec.parse(message.text), name=f"parse_{spec.kind}")
        elif method == "function_calling":
            tool = tool_spec(schema)
            llm = self.bind_tools(
                [schema], tool_choice=tool.name, parallel_tool_calls=False, ls_structured_output_format=_ls_format(schema, method, strict)
            )
            parser = (
                PydanticToolsParser(tools=[schema], first_tool_only=True)
                if _is_pydantic_class(schema)
                else JsonOutputKeyToolsParser(key_name=tool.name, first_tool_only=True)
            )
        elif method in ("json_schema", "json_mode"):
            if schema is None:
                llm = self.bind(response_format={"type": "json_object"})
            else:
                bind_kwargs: dict[str, Any] = {
                    "response_format": {"type": "json_schema", "schema": _output_json_schema(schema)},
                    "ls_structured_output_format": _ls_format(schema, method, strict),
                }
                if _is_decorated_output_type(schema):
                    # a class decorated with @surecall.output_type brings its compiled grammar along
                    bind_kwargs["grammar"] = OutputSpec.of(schema).grammar
                llm = self.bind(**bind_kwargs)
            parser = PydanticOutputParser(pydantic_object=schema) if _is_pydantic_class(schema) else JsonOutputParser()
        else:
            raise ValueError(f"unknown method {method!r}: use 'json_schema', 'function_calling' or 'json_mode'")
        if not include_raw:
            return llm | parser
        parse_raw = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        no_parse = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parse_raw.with_fallbacks([no_parse], exception_key="parsing_error")

    # --- generation ------------------------------------------------------------------------

    def _prepare(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict) -> "_Prepared":
        local_model = self._resolve(kwargs.get("model"))
        tokenizer = local_model.tokenizer
        fmt = _format(self.tool_call_format, tokenizer)
        specs = tool_specs(kwargs.get("tools") or [])
        choice = normalize_tool_choice(kwargs.get("tool_choice"), [s.name for s in specs])
        if specs and choice.mode == "auto" and self._calls_on_user_turn(tokenizer):
            # one round of calls per user turn: a model never tuned on tool calls tends to
            # repeat the same call after its result instead of answering
            choice = ToolChoice("required" if _last_turn_is_user(messages) else "none")
        parallel = kwargs.get("parallel_tool_calls")
        answer_schema = _response_format_schema(kwargs.get("response_format"))
        answer_grammar = kwargs.get("grammar")
        if answer_grammar is not None and specs:
            raise ValueError("a grammar cannot be combined with tools; use response_format for a JSON answer beside tools")
        if answer_grammar is not None:
            grammar = answer_grammar
        elif specs:
            grammar = tool_call_grammar(
                fmt, specs, choice, parallel=parallel is not False, answer_schema=answer_schema
            )
        elif answer_schema is not None:
            grammar = json_answer_grammar(answer_schema)
        else:
            grammar = None
        prompt = render_prompt(tokenizer, messages, specs=specs, fmt=fmt, choice=choice, answer_schema=answer_schema)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        stop_sequences = stop if stop is not None else kwargs.get("stop", self.stop)
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        from surecall.adapters.transformers.decode import DecodeRequest

        request = DecodeRequest(
            prompt_ids=list(prompt_ids),
            constraint=grammar,
            max_tokens=max_tokens if max_tokens is not None else 512,
            temperature=kwargs.get("temperature", self.temperature),
            top_p=kwargs.get("top_p", self.top_p),
            top_k=kwargs.get("top_k", self.top_k),
            seed=kwargs.get("seed", self.seed),
            # a stop string could cut a call or a JSON answer in half; it applies to free text only
            stop=list(stop_sequences) if stop_sequences and grammar is None else None,
        )
        return _Prepared(local_model, request, fmt, specs)

    def _calls_on_user_turn(self, tokenizer: Any) -> bool:
        if self.auto_tool_calls is not None:
            return self.auto_tool_calls == "on_user_turn"
        return not template_supports_tools(getattr(tokenizer, "chat_template", None))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.streaming:
            return generate_from_stream(self._stream(messages, stop=stop, run_manager=run_manager, **kwargs))
        scheduler = scheduler_for(self._resolve(kwargs.get("model")))
        with scheduler.announce() as slot:
            prepared = self._prepare(messages, stop, kwargs)
            result = slot.submit(prepared.request)
        message = prepared.to_message(result)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.streaming:
            chunks = [chunk async for chunk in self._astream(messages, stop=stop, run_manager=run_manager, **kwargs)]
            return generate_from_stream(iter(chunks))
        # decoding runs on a worker thread, so concurrent coroutines meet in the scheduler's batches
        return await asyncio.to_thread(self._generate, messages, stop, None, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        slot = scheduler_for(self._resolve(kwargs.get("model"))).announce()
        try:
            prepared = self._prepare(messages, stop, kwargs)
        except BaseException:
            slot.withdraw()
            raise
        deltas: queue.Queue = queue.Queue()
        prepared.request.on_text = deltas.put
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = slot.submit(prepared.request)
            except BaseException as error:  # re-raised in the consuming thread
                outcome["error"] = error
            finally:
                deltas.put(None)

        worker = threading.Thread(target=run, name="surecall-stream", daemon=True)
        worker.start()
        parser = StreamingParser(prepared.fmt)
        ids: dict[int, str] = {}
        while (delta := deltas.get()) is not None:
            for event in parser.feed(delta):
                chunk = _event_chunk(event, ids)
                if run_manager and isinstance(event, TextDelta):
                    run_manager.on_llm_new_token(event.text, chunk=chunk)
                yield chunk
        worker.join()
        if "error" in outcome:
            raise outcome["error"]
        for event in parser.finish():
            yield _event_chunk(event, ids)
        result = outcome["result"]
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=_usage(result),
                response_metadata=prepared.response_metadata(result),
                chunk_position="last",
            )
        )

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        iterator = self._stream(messages, stop, None, **kwargs)
        finished = object()
        while (chunk := await asyncio.to_thread(next, iterator, finished)) is not finished:
            if run_manager and isinstance(chunk.message.content, str) and chunk.message.content:
                await run_manager.on_llm_new_token(chunk.message.content, chunk=chunk)
            yield chunk


class _Prepared:
    """One request ready to decode, with what is needed to read its output back."""

    def __init__(self, local_model: Any, request: Any, fmt: ToolCallFormat, specs: list[ToolSpec]):
        self.local_model = local_model
        self.request = request
        self.fmt = fmt
        self.specs = specs

    def response_metadata(self, result: Any) -> dict:
        return {
            "model_name": self.local_model.name,
            "model_provider": PROVIDER,
            "finish_reason": result.finish_reason,
            "forward_passes": result.forward_passes,
        }

    def to_message(self, result: Any) -> AIMessage:
        content, calls = (parse_response(result.text, self.fmt) if self.specs else (result.text, []))
        valid, invalid = [], []
        parameters = {spec.name: spec.parameters for spec in self.specs}
        for call in calls:
            call_id = new_call_id()
            error = call.error or _argument_error(call.name, call.args, parameters)
            if error is None:
                valid.append(tool_call(name=call.name, args=call.args, id=call_id))
            else:
                invalid.append(invalid_tool_call(name=call.name or None, args=call.raw_args, id=call_id, error=error))
        return AIMessage(
            content=content,
            tool_calls=valid,
            invalid_tool_calls=invalid,
            usage_metadata=_usage(result),
            response_metadata=self.response_metadata(result),
        )


def _last_turn_is_user(messages: Sequence[BaseMessage]) -> bool:
    turns = [m for m in messages if not isinstance(m, SystemMessage)]
    return bool(turns) and isinstance(turns[-1], HumanMessage)


def _argument_error(name: str, args: dict | None, parameters: dict[str, dict]) -> str | None:
    from surecall.validation import OutputValidationError, validate_json

    if name not in parameters:
        return f"unknown tool {name!r}"
    try:
        validate_json(args, parameters[name])
    except OutputValidationError as error:
        return str(error)
    return None


def _event_chunk(event: TextDelta | CallStart | ArgsDelta, ids: dict[int, str]) -> ChatGenerationChunk:
    if isinstance(event, TextDelta):
        return ChatGenerationChunk(message=AIMessageChunk(content=event.text))
    if isinstance(event, CallStart):
        ids[event.index] = new_call_id()
        chunk = tool_call_chunk(name=event.name, args="", id=ids[event.index], index=event.index)
    else:
        chunk = tool_call_chunk(name=None, args=event.text, id=None, index=event.index)
    return ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))


def _usage(result: Any) -> UsageMetadata:
    return UsageMetadata(
        input_tokens=result.prompt_tokens,
        output_tokens=result.completion_tokens,
        total_tokens=result.prompt_tokens + result.completion_tokens,
    )


def _format(name: str | None, tokenizer: Any) -> ToolCallFormat:
    if name is None:
        return format_for_template(getattr(tokenizer, "chat_template", None))
    if name not in FORMATS:
        raise ValueError(f"unknown tool_call_format {name!r}; choose one of {sorted(FORMATS)}")
    return FORMATS[name]


def _choice_kwarg(choice: ToolChoice) -> Any:
    return choice.name if choice.mode == "named" else choice.mode


def _check_translatable(spec: ToolSpec) -> None:
    from surecall.schema import UnsupportedSchemaError, grammar_from_schema

    try:
        grammar_from_schema(spec.parameters)
    except UnsupportedSchemaError as error:
        raise ToolSchemaError(f"tool {spec.name!r}: {error}") from error


def _ls_format(schema: Any, method: str, strict: bool | None) -> dict:
    return {"kwargs": {"method": method, "strict": strict}, "schema": convert_to_json_schema(schema)}


def _is_decorated_output_type(schema: Any) -> bool:
    from surecall import output_types

    return isinstance(schema, type) and output_types._SPEC_ATTRIBUTE in vars(schema)


def _is_json_schema_kind(schema: Any) -> bool:
    from surecall.engine import Grammar
    from surecall.output_types import Regex

    return not isinstance(schema, (Grammar, Regex))


def _is_pydantic_class(obj: Any) -> bool:
    if not isinstance(obj, type):
        return False
    from pydantic import BaseModel
    from pydantic.v1 import BaseModel as BaseModelV1

    return issubclass(obj, (BaseModel, BaseModelV1))


def _output_json_schema(schema: Any) -> dict:
    """The JSON Schema of the answer object for any accepted schema kind."""
    if isinstance(schema, dict):
        if schema.get("type") == "function" and isinstance(schema.get("function"), dict):
            return schema["function"].get("parameters", {"type": "object"})
        if "parameters" in schema and "name" in schema:
            return schema["parameters"]
        if "input_schema" in schema and "name" in schema:
            return schema["input_schema"]
        return schema
    from surecall.schema import to_json_schema

    return to_json_schema(schema)


def _response_format_schema(response_format: Any) -> dict | None:
    """The answer schema of a ``response_format`` (OpenAI shapes, ``{"type", "schema"}``, or a class)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        return _output_json_schema(response_format)
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return response_format.get("schema") or {"type": "object"}
    if kind == "json_schema":
        if "schema" in response_format:
            return response_format["schema"]
        inner = response_format.get("json_schema")
        if isinstance(inner, dict) and "schema" in inner:
            return inner["schema"]
    raise ValueError(
        "unknown response_format: use {'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}, "
        f"{{'type': 'json_schema', 'schema': {{...}}}} or {{'type': 'json_object'}}; got {json.dumps(response_format, default=str)[:200]}"
    )
