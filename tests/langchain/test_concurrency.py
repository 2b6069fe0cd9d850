"""Concurrent calls on one ChatSurecall are safe and share batched forward passes."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.tools import tool
from pydantic import BaseModel

from surecall.adapters.langchain import ChatSurecall
from surecall.engine import TokenBudgetError
from surecall.adapters.langchain.batching import scheduler_for
from surecall.validation import validate_json

pytestmark = pytest.mark.model


class Pet(BaseModel):
    name: str
    legs: int


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return "sunny"


def test_threads_with_different_grammars_are_batched_and_each_valid(local_model):
    chat = ChatSurecall(model=local_model, max_tokens=32)
    scheduler = scheduler_for(local_model)
    before = len(scheduler.batches_run)
    start = threading.Barrier(3)
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def call(key, runnable, prompt):
        try:
            start.wait()
            results[key] = runnable.invoke(prompt)
        except BaseException as error:  # surfaced below with the failing thread's traceback
            errors.append(error)

    threads = [
        threading.Thread(target=call, args=("pet", chat.with_structured_output(Pet), "My cat Tom has four legs.")),
        threading.Thread(target=call, args=("tool", chat.bind_tools([get_weather], tool_choice="any"), "Weather in Oslo?")),
        threading.Thread(target=call, args=("text", chat, "Say hello.")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert isinstance(results["pet"], Pet)
    call_message = results["tool"]
    assert call_message.tool_calls and call_message.tool_calls[0]["name"] == "get_weather"
    validate_json(call_message.tool_calls[0]["args"], get_weather.tool_call_schema.model_json_schema())
    assert results["text"].text
    # all three met in the scheduler: fewer decodes than calls, at least one shared batch
    new_batches = scheduler.batches_run[before:]
    assert sum(new_batches) == 3 and max(new_batches) >= 2


def test_batch_matches_sequential_results_in_validity(local_model):
    chat = ChatSurecall(model=local_model, max_tokens=24)
    structured = chat.with_structured_output(Pet)
    prompts = ["Rex is a dog.", "Nemo is a fish.", "Polly is a parrot."]
    scheduler = scheduler_for(local_model)
    before = len(scheduler.batches_run)
    pets = structured.batch(prompts)
    assert all(isinstance(pet, Pet) for pet in pets)
    assert max(scheduler.batches_run[before:]) >= 2


def test_abatch_runs_concurrently(local_model):
    chat = ChatSurecall(model=local_model, max_tokens=16)
    scheduler = scheduler_for(local_model)
    before = len(scheduler.batches_run)
    messages = asyncio.run(chat.abatch(["Hi", "Hello"]))
    assert all(message.text for message in messages)
    assert max(scheduler.batches_run[before:]) == 2


def test_a_bad_request_fails_alone(local_model):
    chat = ChatSurecall(model=local_model, max_tokens=16)
    good = chat.bind(response_format={"type": "json_schema", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}})
    # a budget of one token cannot hold any valid answer: that request fails, the other completes
    too_small = chat.bind(max_tokens=1, response_format={"type": "json_schema", "schema": Pet.model_json_schema()})
    with ThreadPoolExecutor(2) as pool:
        good_future = pool.submit(good.invoke, "A number please.")
        bad_future = pool.submit(too_small.invoke, "A pet.")
        assert isinstance(json.loads(good_future.result().text)["n"], int)
        with pytest.raises(TokenBudgetError):
            bad_future.result()


class _Request:
    def __init__(self, fails: bool = False):
        self.fails = fails

    def validate(self) -> None:
        pass


class _Model:
    def __init__(self):
        self.lock = threading.RLock()


def _fake_decode(decoded: list[int]):
    def run_requests(local_model, requests):
        decoded.append(len(requests))
        if any(request.fails for request in requests):
            raise ValueError("bad request")
        return [f"result {id(request)}" for request in requests]

    return run_requests


def test_runner_waits_for_announced_callers_and_a_failure_stays_alone(monkeypatch):
    import time

    from surecall.adapters.transformers import decode

    decoded: list[int] = []
    monkeypatch.setattr(decode, "run_requests", _fake_decode(decoded))
    model = _Model()  # the scheduler only holds it weakly
    scheduler = scheduler_for(model)
    outcomes: dict[str, object] = {}

    def slow_caller(name: str, request: _Request) -> None:
        with scheduler.announce() as slot:
            time.sleep(0.3)  # a long preparation (prompt rendering, grammar compilation)
            try:
                outcomes[name] = slot.submit(request)
            except ValueError as error:
                outcomes[name] = error

    threads = [threading.Thread(target=slow_caller, args=(n, _Request(fails=n == "bad"))) for n in ("a", "bad")]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    first = _Request()
    outcomes["first"] = scheduler.submit(first)
    for thread in threads:
        thread.join()
    assert decoded[0] == 3  # one batch for all three callers, then each retried alone
    assert sorted(decoded[1:]) == [1, 1, 1]
    assert isinstance(outcomes["bad"], ValueError)
    assert outcomes["first"] == f"result {id(first)}" and isinstance(outcomes["a"], str)
