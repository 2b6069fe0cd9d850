"""Builds pause the cyclic collector and always leave it as they found it."""

import gc

import pytest

from surecall.engine import Grammar
from surecall.engine.gc_pause import collector_paused


@pytest.fixture
def collector_state():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_is_restored_after_the_block_and_after_an_error(enabled, collector_state):
    (gc.enable if enabled else gc.disable)()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a build failed")
    assert gc.isenabled() is enabled


def test_building_an_automaton_leaves_the_collector_on(collector_state):
    gc.enable()
    grammar = Grammar.from_regex("[a-z]{3,40}(-[0-9]+)*")
    assert grammar.automaton.completion_bound(grammar.automaton.initial) == 3
    assert gc.isenabled()


def test_an_automaton_built_with_the_collector_on_is_old_once_built(collector_state):
    # The first masks after a build would otherwise walk every object of it in their
    # young collections.
    gc.enable()
    automaton = Grammar.from_regex("(ab|c[d-f]){2,9}x").automaton
    young = {id(found) for generation in (0, 1) for found in gc.get_objects(generation)}
    assert id(automaton) not in young and id(automaton._nfa.kind) not in young
    assert id(automaton._nfa.kind) in {id(found) for found in gc.get_objects(2)}


def test_a_build_with_the_collector_off_leaves_it_off_and_collects_nothing(collector_state):
    gc.disable()
    collections = gc.get_stats()[1]["collections"]
    Grammar.from_regex("(ab|c[d-f]){2,11}y").automaton
    assert not gc.isenabled()
    assert gc.get_stats()[1]["collections"] == collections
