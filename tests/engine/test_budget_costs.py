"""The token budget's costs: completions short, valid and found without searching a plateau;
the states a mask's tokens lead to read without building every token's."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from surecall import grammar_from_schema
from surecall.engine import Grammar
from surecall.engine import automaton as automaton_module
from surecall.engine.errors import GrammarError
from surecall.engine.matcher import DEAD, Matcher

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)
_spec = importlib.util.spec_from_file_location("regex_strategies", Path(__file__).with_name("regex_strategies.py"))
regex_strategies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regex_strategies)

VOCAB = doubles.sample_vocabulary()

# Seven required properties in any order, each a counted pattern: the lower bound leaves
# out the six digits of every pattern (42 bytes), so an exact search expands every
# ordering of the properties that fits within those bytes.
PLATEAU_SCHEMA = {
    "type": "object",
    "properties": {name: {"type": "string", "pattern": "^[0-9]{6}$"} for name in "abcdefg"},
    "required": list("abcdefg"),
    "additionalProperties": False,
}


def _counting_moves(automaton, monkeypatch) -> list[int]:
    expanded = []
    moves = automaton._search_successors

    def counted(config):
        expanded.append(config)
        return moves(config)

    monkeypatch.setattr(automaton, "_search_successors", counted)
    return expanded


def test_completion_goes_on_past_a_plateau_of_the_lower_bound(monkeypatch):
    automaton = grammar_from_schema(PLATEAU_SCHEMA, property_order="any").automaton
    expanded = _counting_moves(automaton, monkeypatch)
    monkeypatch.setattr(automaton_module, "MAX_SEARCH_EXPANSIONS", 3_000)
    completion = automaton.completion(automaton.initial)
    assert automaton.is_accepting(automaton.step_bytes(automaton.initial, completion))
    document = json.loads(completion)
    assert sorted(document) == list("abcdefg")
    assert all(re.fullmatch(r"[0-9]{6}", value) for value in document.values())
    assert len(expanded) < 3_000


def test_an_exact_lower_bound_completes_without_a_search(monkeypatch):
    # Names of its own: compiled automata are shared by equal grammars across tests.
    schema = {
        "type": "object",
        "properties": {"diver": {"type": "string"}, "depth": {"type": "integer"}, "fins": {"type": "array", "items": {"type": "string"}}},
        "required": ["diver", "depth", "fins"],
        "additionalProperties": False,
    }
    automaton = grammar_from_schema(schema).automaton
    expanded = _counting_moves(automaton, monkeypatch)
    completion = automaton.shortest_completion(automaton.initial)
    assert sorted(json.loads(completion)) == ["depth", "diver", "fins"]
    assert len(completion) == len('{"diver":"","depth":0,"fins":[]}')
    assert not expanded  # each byte lowered the bound by one: no configuration was searched


def test_budget_over_a_plateau_still_finishes_inside_it(monkeypatch):
    # Before the weighted search the first cost raised "no valid output can be spelled".
    monkeypatch.setattr(automaton_module, "MAX_SEARCH_EXPANSIONS", 3_000)
    grammar = grammar_from_schema(PLATEAU_SCHEMA, property_order="any")
    needed = Matcher(grammar, VOCAB).min_tokens_to_finish()
    matcher = Matcher(grammar, VOCAB, max_tokens=needed + 5)
    document = json.loads(doubles.walk_randomly_inside_budget(matcher, np.random.default_rng(7)))
    assert sorted(document) == list("abcdefg")


def test_known_completions_are_the_rest_of_a_found_one():
    automaton = grammar_from_schema(PLATEAU_SCHEMA, property_order="any").automaton
    completion = automaton.completion(automaton.initial)
    config = automaton.initial
    for offset, value in enumerate(completion):
        config = automaton.step(config, value)
        rest = automaton.completion(config)
        assert automaton.is_accepting(automaton.step_bytes(config, rest))
        assert len(rest) <= len(completion) - offset - 1


def test_shortest_completion_is_not_a_longer_known_one(monkeypatch):
    # The lower bound leaves out the twenty digits' count: the weighted search (taking over
    # at once here) dives into the digits; the exact search must still find the letters.
    monkeypatch.setattr(automaton_module, "EXACT_COMPLETION_EXPANSIONS", 0)
    schema = {"anyOf": [{"type": "string", "pattern": "^[0-9]{20}$"}, {"type": "string", "pattern": "^abcdefghijklmn$"}]}
    automaton = grammar_from_schema(schema).automaton
    short = automaton.completion(automaton.initial)
    assert automaton.is_accepting(automaton.step_bytes(automaton.initial, short))
    inside = automaton.step(automaton.initial, ord('"'))
    assert automaton.shortest_completion(inside) == b'abcdefghijklmn"'
    assert automaton.shortest_completion(automaton.initial) == b'"abcdefghijklmn"'
    assert automaton.min_bytes_to_accept(automaton.initial) == 16 <= len(short)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex_strategies.regexes, st.lists(st.integers(0, 255), max_size=8), st.data())
def test_completions_finish_and_are_never_shorter_than_the_shortest(patterns, choices, data):
    try:
        automaton = Grammar.from_regex(patterns[0]).automaton
    except GrammarError:
        assume(False)  # a language without any string ([^\\d\\D])
    config = automaton.initial
    for choice in choices:
        following = automaton.next_bytes(config)
        if not following:
            break
        config = automaton.step(config, following[choice % len(following)])
    assert config != DEAD
    # In either order: the exact search first, or the short one first (leaving its path behind).
    if data.draw(st.booleans()):
        shortest = automaton.shortest_completion(config)
        completion = automaton.completion(config)
    else:
        completion = automaton.completion(config)
        shortest = automaton.shortest_completion(config)
    for found in (shortest, completion):
        assert automaton.is_accepting(automaton.step_bytes(config, found))
    assert len(completion) >= len(shortest) == automaton.min_bytes_to_accept(config) == _bytes_to_accept(automaton, config)


def _bytes_to_accept(automaton, config: int) -> int:
    """Breadth first over the configurations: the fewest bytes to an accepting one."""
    level, seen, distance = {config}, {config}, 0
    while not any(automaton.is_accepting(c) for c in level):
        level = {automaton.step(c, b) for c in level for b in automaton.next_bytes(c)} - seen
        seen |= level
        distance += 1
        assert level, "no accepting configuration is reachable"
    return distance


def test_distinct_ends_are_the_states_of_the_allowed_tokens():
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "note": {"type": "string"}},
        "required": ["name", "note"],
        "additionalProperties": False,
    }
    grammar = grammar_from_schema(schema)
    matcher = Matcher(grammar, VOCAB)
    for token_id in VOCAB.tokenize_bytes('{"name":"abc déf","note":"x\\"y z"}'.encode()):
        # Walked with every token's state, as a budget reads it.
        entry = matcher._new_entry(matcher.config, ends=True)
        assert sorted(entry.distinct_ends().tolist()) == sorted(set(entry.ends.tolist()))
        matcher.advance(token_id)
    assert matcher.is_accepting()


def test_tight_budget_masks_match_each_tokens_own_cost():
    # Costs kept with a mask are read again at every step as the budget shrinks.
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    grammar = grammar_from_schema(schema)
    needed = Matcher(grammar, VOCAB).min_tokens_to_finish()
    matcher = Matcher(grammar, VOCAB, max_tokens=needed + 6)
    rng = np.random.default_rng(3)
    while not matcher.is_finished():
        config, remaining = matcher.config, matcher.remaining_tokens
        unbudgeted = matcher._entry(config)
        expected = [
            t for t, end in zip(unbudgeted.ids.tolist(), unbudgeted.ends.tolist()) if matcher._cost(end) <= remaining - 1
        ]
        allowed = [t for t in matcher.allowed_token_ids().tolist() if t not in VOCAB.eos_token_ids]
        assert allowed == expected
        matcher.advance(int(rng.choice(matcher.allowed_token_ids())))
    assert json.loads(matcher.text_bytes())["tags"] is not None


_TIED_COMPLETIONS = """
from surecall.engine import Grammar
automaton = Grammar.from_ebnf(\"\"\"
start ::= 'x' ('ab' | 'cd' | 'ef') 'y' item (',' item)* ;
item ::= 'p' | 'q' | 'r' | '[' item ']' ;
\"\"\").automaton
for prefix in (b"", b"x", b"xab", b"xaby", b"xabyp,", b"xabyp,["):
    config = automaton.step_bytes(automaton.initial, prefix)
    found = automaton.bound_completion(config), automaton.completion(config), automaton.shortest_completion(config)
    print(prefix, *found, all(automaton.is_accepting(automaton.step_bytes(config, tail)) for tail in found))
"""


def test_equally_short_completions_are_chosen_alike_in_every_process():
    # An item set iterates in an order that follows object addresses (``hash(None)``
    # differs between processes): ties between equally short completions, which decide
    # a binding budget's masks, are broken by the items themselves.
    runs = {
        subprocess.run([sys.executable, "-c", _TIED_COMPLETIONS], capture_output=True, text=True, check=True).stdout
        for _ in range(6)
    }
    assert len(runs) == 1
    lines = runs.pop().splitlines()
    assert len(lines) == 6 and all(line.endswith(" True") for line in lines)
