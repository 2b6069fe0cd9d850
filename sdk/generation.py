"""Generation API: prompt + output type -> validated value, on a local model.

This module holds the model-agnostic part (prompt rendering, output types, validation);
decoding is delegated to ``surecall.adapters.transformers.decode``, imported on first use so
that importing surecall does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from surecall.output_types import OutputSpec

if TYPE_CHECKING:
    from surecall.adapters.transformers.decode import DecodeResult
    from surecall.adapters.transformers.loading import LocalModel

__all__ = ["generate", "stream", "generate_batch", "generate_result", "GenerationResult", "render_prompt"]



@dataclass
class GenerationResult:
    """A validated value together with the raw text and decoding statistics."""

    value: Any
    text: str
    decode: "DecodeResult"


def generate(
    model: Any,
    prompt: Any,
    output_type: Any = None,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
) -> Any:
    """Generate one value of ``output_type`` for ``prompt``.

    ``model`` is a ``LocalModel`` or anything ``load_model`` accepts (``None``: the embedded
    model, loaded once). ``prompt`` is a string (used as raw text) or a list of chat messages
    ``{"role": ..., "content": ...}`` rendered with the tokenizer's chat template.

    With a structured output type, ``max_tokens`` is a guarantee: the output is complete and
    valid whenever any valid output fits in that many tokens; otherwise ``TokenBudgetError``
    is raised before generating.
    """
    return generate_result(
        model, prompt, output_type, max_tokens=max_tokens, temperature=temperature,
        top_p=top_p, top_k=top_k, seed=seed, stop=stop,
    ).value


def generate_result(
    model: Any,
    prompt: Any,
    output_type: Any = None,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
) -> GenerationResult:
    """Like ``generate``, also returning the text, token counts and finish reason."""
    return generate_batch_results(
        model, [prompt], [output_type], max_tokens=max_tokens, temperature=temperature,
        top_p=top_p, top_k=top_k, seed=seed, stop=stop,
    )[0]


def stream(
    model: Any,
    prompt: Any,
    output_type: Any = None,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
) -> Iterator[str]:
    """Yield the generated text in pieces as it is produced.

    The concatenated pieces are the same text ``generate`` would parse; once the stream ends
    the whole text has been validated against ``output_type``.
    """
    from surecall.adapters.transformers.decode import iter_decode

    local_model = resolve_model(model)
    spec = OutputSpec.of(output_type)
    request = _request(local_model, prompt, spec, max_tokens, temperature, top_p, top_k, seed, stop)
    events = iter_decode(local_model, [request])
    while True:
        try:
            _, piece = next(events)
        except StopIteration as done:
            result = done.value[0]
            break
        yield piece
    _finish(spec, result)


def generate_batch(
    model: Any,
    prompts: Sequence[Any],
    output_types: Any = None,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
) -> list[Any]:
    """Generate for several prompts in one batched decode; one value per prompt.

    ``output_types`` is one output type for every prompt, or a list with one per prompt
    (they may all differ). With a seed, row ``i`` samples with ``seed + i``.
    """
    results = generate_batch_results(
        model, prompts, output_types, max_tokens=max_tokens, temperature=temperature,
        top_p=top_p, top_k=top_k, seed=seed, stop=stop,
    )
    return [result.value for result in results]


def generate_batch_results(
    model: Any,
    prompts: Sequence[Any],
    output_types: Any = None,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop: Sequence[str] | None = None,
) -> list[GenerationResult]:
    """``generate_batch`` returning ``GenerationResult`` objects."""
    from surecall.adapters.transformers.decode import run_requests

    if isinstance(prompts, (str, Mapping)) or not isinstance(prompts, Sequence):
        raise TypeError("prompts must be a list of prompts (each a string or a list of chat messages)")
    if not prompts:
        return []
    if isinstance(output_types, (list, tuple)):
        if len(output_types) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(output_types)} output types")
        specs = [OutputSpec.of(t) for t in output_types]
    else:
        specs = [OutputSpec.of(output_types)] * len(prompts)

    local_model = resolve_model(model)
    requests = [
        _request(local_model, prompt, spec, max_tokens, temperature, top_p, top_k,
                 None if seed is None else seed + i, stop)
        for i, (prompt, spec) in enumerate(zip(prompts, specs))
    ]
    decoded = run_requests(local_model, requests)
    return [GenerationResult(value=_finish(spec, result), text=result.text, decode=result)
            for spec, result in zip(specs, decoded)]


def render_prompt(tokenizer: Any, prompt: Any) -> list[int]:
    """Token ids for a prompt: raw text as is, chat messages through the chat template."""
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("the prompt is empty")
        return list(tokenizer.encode(prompt))
    if isinstance(prompt, Mapping) or not isinstance(prompt, Sequence) or not prompt:
        raise TypeError(
            "prompt must be a string or a non-empty list of chat messages like "
            "{'role': 'user', 'content': '...'}"
        )
    messages = []
    for message in prompt:
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise TypeError(f"each chat message must be a mapping with 'role' and 'content', got {message!r}")
        messages.append(dict(message))
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template; pass the prompt as a string")
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # The template already contains the special tokens (BOS, role markers).
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def resolve_model(model: Any) -> "LocalModel":
    """A ``LocalModel`` as is; anything else is loaded with ``load_model`` once and kept."""
    from surecall.adapters.transformers.loading import LocalModel, shared_model

    if isinstance(model, LocalModel):
        return model
    if model is not None and not isinstance(model, (str, bytes)) and not hasattr(model, "__fspath__"):
        raise TypeError(
            f"model must be a LocalModel, a model name or path, or None for the embedded model; got {type(model).__name__}"
        )
    return shared_model(model)


def _request(local_model, prompt, spec: OutputSpec, max_tokens, temperature, top_p, top_k, seed, stop):
    from surecall.adapters.transformers.decode import DecodeRequest

    if stop and spec.grammar is not None:
        raise ValueError("stop strings apply to free-text output only; a structured output ends where its grammar ends")
    return DecodeRequest(
        prompt_ids=render_prompt(local_model.tokenizer, prompt),
        constraint=spec.grammar,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        stop=stop,
    )


def _finish(spec: OutputSpec, result: "DecodeResult") -> Any:
    if spec.grammar is not None and result.finish_reason != "stop":
        from surecall.validation import OutputValidationError

        raise OutputValidationError(
            f"generation ended before the output was complete (finish reason {result.finish_reason!r})",
            raw_text=result.text,
        )
    return spec.parse(result.text)
