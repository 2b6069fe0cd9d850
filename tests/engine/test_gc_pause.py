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
