"""The completion bound: a completion known from static distances alone, which lets a
token budget that is far from binding admit tokens without searching for completions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from surecall import grammar_from_schema
from surecall.engine import Grammar
from surecall.engine import automaton as automaton_module
from surecall.engine import native
from surecall.engine.errors import GrammarError, TokenBudgetError
from surecall.engine.matcher import DEAD, Matcher
from surecall.engine.vocab import TokenVocabulary


def _helper(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


doubles, regex_strategies = _helper("automaton_doubles"), _helper("regex_strategies")

VOCAB = doubles.sample_vocabulary()

# Each reaches the bound's cases: counted repetitions owing iterations (minLength past the
# unrolled range), intersections (integers, a format with a length limit), calls
# (recursion), alternatives and optional properties.
SCHEMAS = {
    "counted": {
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 40, "maxLength": 60}, "n": {"type": "integer"}},
        "required": ["code", "n"],
        "additionalProperties": False,
    },
    "intersections": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 10, "maximum": 5000},
            "code": {"type": "string", "pattern": "^[a-z]+[0-9]*$", "minLength": 3, "maxLength": 8},
            "ratio": {"type": "number", "minimum": -2.5, "maximum": 1000},
        },
        "required": ["count", "code", "ratio"],
        "additionalProperties": False,
    },
    "recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["name", "children"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "thread": {
        "$defs": {
            "comment": {
                "type": "object",
                "properties": {
                    "author": {"type": "string"},
                    "score": {"type": "integer"},
                    "replies": {"type": "array", "items": {"$ref": "#/$defs/comment"}},
                },
                "required": ["author"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/comment",
    },
    "choices": {
        "anyOf": [
            {"type": "array", "items": {"type": "integer"}, "minItems": 2},
            {"type": "object", "properties": {"a": {"enum": ["x", "yy"]}, "b": {"type": "boolean"}}, "required": ["b"]},
        ]
    },
}


def _random_config(automaton, choices) -> int:
    config = automaton.initial
    for choice in choices:
        following = automaton.next_bytes(config)
        if not len(following):
            break
        config = automaton.step(config, int(following[choice % len(following)]))
    assert config != DEAD
    return config


def _check_bound_leads_to_acceptance(automaton, config: int) -> None:
    """The bound is a completion's length: a byte lowers it by one until acceptance."""
    bound = automaton.completion_bound(config)
    assume(bound < float("inf"))
    assert bound >= automaton.min_bytes_to_accept(config)
    for _ in range(int(bound)):
        if automaton.is_accepting(config):
            break
        current = automaton.completion_bound(config)
        lower = [value for value in automaton.next_bytes(config) if automaton.completion_bound(automaton.step(config, value)) <= current - 1]
        assert lower, "some byte lowers the bound by one"
        config = automaton.step(config, int(lower[0]))
    assert automaton.is_accepting(config)
    assert automaton.completion_bound(config) == 0


def _check_bound_completion(automaton, config: int) -> None:
    bound = automaton.completion_bound(config)
    completion = automaton.bound_completion(config)
    if bound == float("inf"):
        assert completion is None
        return
    assert len(completion) == bound
    assert automaton.is_accepting(automaton.step_bytes(config, completion))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex_strategies.regexes, st.lists(st.integers(0, 255), max_size=8))
def test_bound_of_a_regex_is_a_completion(patterns, choices):
    try:
        automaton = Grammar.from_regex(patterns[0]).automaton
    except GrammarError:
        assume(False)  # a language without any string ([^\d\D])
    config = _random_config(automaton, choices)
    # Regular languages without except! or any!: every item's way is known.
    assert automaton.completion_bound(config) < float("inf")
    _check_bound_completion(automaton, config)
    _check_bound_leads_to_acceptance(automaton, config)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(choices=st.lists(st.integers(0, 255), max_size=60))
def test_bound_of_a_schema_is_a_completion(name, choices):
    automaton = grammar_from_schema(SCHEMAS[name]).automaton
    config = _random_config(automaton, choices)
    _check_bound_completion(automaton, config)
    _check_bound_leads_to_acceptance(automaton, config)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(walks=st.lists(st.lists(st.integers(0, 255), max_size=60), min_size=1, max_size=4))
def test_native_bounds_are_the_python_ones(name, walks):
    # Native bounds read the same distances, owed iterations and callers' continuations
    # as the item loop in Python; a configuration holding an intersection is handed back
    # to it. Also over bytes that leave some ways out (no digits: integers have none).
    automaton = grammar_from_schema(SCHEMAS[name], property_order="any").automaton
    # DEAD included: no completion.
    configs = [_random_config(automaton, choices) for choices in walks] + [DEAD]
    no_digits = automaton_module.ALL_BYTES_MASK & ~sum(1 << value for value in b"0123456789")
    for spellable in (automaton_module.ALL_BYTES_MASK, no_digits):
        native_bounds = automaton.completion_bounds(configs + configs[:1], spellable)
        python_tables = automaton_module._RealizableDistances(automaton._nfa, spellable)
        python_bounds = [automaton._item_bound(python_tables, config) for config in configs + configs[:1]]
        assert native_bounds == python_bounds
        assert [type(bound) for bound in native_bounds] == [type(bound) for bound in python_bounds]


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_bounds_hand_intersections_back_to_python(monkeypatch):
    # Built anew: grammars share automata (and their bounds) through a cache.
    automaton = automaton_module.ByteAutomaton(grammar_from_schema(SCHEMAS["intersections"]).automaton._nfa)
    handed_back = []
    item_bound = automaton_module.ByteAutomaton._item_bound

    def recording(self, tables, config):
        handed_back.append(config)
        return item_bound(self, tables, config)

    monkeypatch.setattr(automaton_module.ByteAutomaton, "_item_bound", recording)
    # Inside the code: a pattern under a length limit, an intersection.
    config = automaton.step_bytes(automaton.initial, b'{"count":12,"code":"ab')
    assert automaton.completion_bounds([config]) == [len('c","ratio":0}')]
    assert handed_back == [config]


def test_bound_counts_the_iterations_a_counted_repetition_owes():
    automaton = grammar_from_schema(SCHEMAS["counted"]).automaton
    config = automaton.step_bytes(automaton.initial, b'{"code":"abc')
    # 37 more characters, the closing quote, then ,"n":0}
    assert automaton.completion_bound(config) == automaton.min_bytes_to_accept(config) == 37 + 1 + len(',"n":0}')


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_loose_budget_masks_as_no_budget_without_searching(name, monkeypatch):
    grammar = grammar_from_schema(SCHEMAS[name])
    automaton = grammar.automaton

    def no_search(config):
        raise AssertionError("a budget far from binding searched for a completion")

    monkeypatch.setattr(automaton, "completion", no_search)
    monkeypatch.setattr(automaton, "shortest_completion", no_search)
    budgeted = Matcher(grammar, VOCAB, max_tokens=2_000)
    free = Matcher(grammar, VOCAB)
    rng = np.random.default_rng(11)
    for _ in range(120):
        if free.is_finished():
            break
        allowed = budgeted.allowed_token_ids()
        assert np.array_equal(allowed, free.allowed_token_ids())
        token_id = int(rng.choice(allowed))
        assert budgeted.advance(token_id) == free.advance(token_id)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("slack", [0, 2, 7])
def test_budget_near_its_minimum_still_finishes_inside_it(name, slack):
    # The cost of a state is the fewer of a found completion's tokens and the bound's bytes:
    # tokens admitted by either must leave a way to finish.
    grammar = grammar_from_schema(SCHEMAS[name])
    matcher = Matcher(grammar, VOCAB, max_tokens=Matcher(grammar, VOCAB).min_tokens_to_finish() + slack)
    text = doubles.walk_randomly_inside_budget(matcher, np.random.default_rng(slack))
    jsonschema.validate(json.loads(text), SCHEMAS[name])


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_tight_budget_masks_hold_exactly_the_tokens_advance_takes(name):
    # The mask reads costs kept per token, advancing checks the one state: both must
    # count the bound's completion.
    grammar = grammar_from_schema(SCHEMAS[name])
    matcher = Matcher(grammar, VOCAB, max_tokens=Matcher(grammar, VOCAB).min_tokens_to_finish() + 3)
    rng = np.random.default_rng(5)
    while not matcher.is_finished():
        allowed = set(matcher.allowed_token_ids().tolist())
        unbudgeted = matcher._entry(matcher.config).ids.tolist()
        assert {t for t in unbudgeted if matcher.is_allowed(t)} == allowed - set(VOCAB.eos_token_ids)
        matcher.advance(int(rng.choice(sorted(allowed))))


def test_cost_is_the_bound_where_the_found_completion_is_longer(monkeypatch):
    # The weighted search would dive into the twenty digits (22 bytes) while the letters
    # finish in 16: a budget of 16 must admit the opening quote, in the mask (whose costs
    # are read per token, as the token '"1' is too long for the bound) as when advancing.
    monkeypatch.setattr(automaton_module, "EXACT_COMPLETION_EXPANSIONS", 0)
    schema = {"anyOf": [{"type": "string", "pattern": "^[0-9]{20}$"}, {"type": "string", "pattern": "^abcdefghijklmn$"}]}
    grammar = grammar_from_schema(schema)
    vocab = TokenVocabulary([b"<|endoftext|>"] + [bytes([b]) for b in range(256)] + [b'"1'], special_ids={0}, eos_token_ids={0})
    matcher = Matcher(grammar, vocab, max_tokens=16)
    quote = vocab.tokenize_bytes(b'"')[0]
    assert quote in matcher.allowed_token_ids().tolist()
    assert matcher.is_allowed(quote)
    while not matcher.is_finished():
        allowed = matcher.allowed_token_ids()
        assert len(allowed)
        assert all(matcher.is_allowed(t) for t in allowed.tolist())
        matcher.advance(int(allowed[0]))
    assert json.loads(matcher.text_bytes()) == "abcdefghijklmn"


def test_bound_spells_only_bytes_that_are_tokens_by_themselves():
    automaton = Grammar.from_regex("a|bb").automaton
    assert automaton.completion_bound(automaton.initial) == 1
    without_a = automaton_module.ALL_BYTES_MASK & ~(1 << ord("a"))
    assert automaton.completion_bound(automaton.initial, without_a) == 2
    # "a" is no token here (only inside "ab"): one token cannot finish, and the budget
    # check must say so instead of admitting a start it cannot complete.
    vocab = TokenVocabulary([b"<|endoftext|>", b"b", b"ab"], special_ids={0}, eos_token_ids={0})
    with pytest.raises(TokenBudgetError):
        Matcher(Grammar.from_regex("a|bb"), vocab, max_tokens=1)
    matcher = Matcher(Grammar.from_regex("a|bb"), vocab, max_tokens=2)
    assert matcher.allowed_token_ids().tolist() == [1]


NESTED = {
    "recursive": {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": []}]}, {"name": "d", "children": []}]},
    "thread": {"author": "kim", "score": 3, "replies": [{"author": "lee", "replies": [{"author": "x", "score": 1}]}, {"author": "ola"}]},
}


@pytest.mark.parametrize("property_order", ["schema", "any"])
@pytest.mark.parametrize("name", sorted(NESTED))
def test_bound_completion_returns_through_nested_callers(name, property_order):
    # Inside nested calls the bound adds up the callers' continuations; its path must
    # climb back out through each of them (in any order, also through callers in the
    # same configuration: a property may come after the nested one).
    automaton = grammar_from_schema(SCHEMAS[name], property_order=property_order).automaton
    config = automaton.initial
    document = json.dumps(NESTED[name], separators=(",", ":")).encode()
    for value in document:
        _check_bound_completion(automaton, config)
        assert automaton.completion_bound(config) >= automaton.min_bytes_to_accept(config)
        config = automaton.step(config, value)
    assert automaton.is_accepting(config)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    low=st.integers(0, 30), extra=st.integers(0, 30), before=st.integers(0, 40),
    body=st.sampled_from(['[^"\\\\]', "([a-z]|é)", "(ab|c)"]), tail=st.sampled_from(['"', '"x?', '",[0-9]{2,5}']),
)
def test_a_count_further_on_is_bounded_by_the_count_it_counts_on_from(low, extra, before, body, tail):
    # What a budget reads for the members of a chain it leaves unmade: between a counted
    # repetition's bounds, a configuration with its counts further on has a completion
    # bound no larger than the one it counts on from (it owes no more iterations).
    automaton = Grammar.from_regex(f'"{body}{{{low},{low + extra + 1}}}{tail}').automaton
    spell = VOCAB.single_byte_tokens
    config = automaton.step_bytes(automaton.initial, b'"')
    piece = b"c" if body == "(ab|c)" else b"a"
    for _ in range(before):
        following = automaton.step_bytes(config, piece)
        if following == DEAD:
            break
        config = following
    assume(config != DEAD)
    successor = automaton.step_bytes(config, piece)
    span = automaton.count_shift_span(config, successor)
    assume(span > 0)
    bound = automaton.completion_bound(successor, spell)
    for shift in range(1, span + 1):
        assert automaton.completion_bound(automaton.count_shifted(successor, shift), spell) <= bound
