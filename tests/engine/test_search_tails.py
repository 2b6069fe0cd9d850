"""Searches (``X* body X*``, a JSON Schema ``pattern`` unanchored at both ends): once the
tail holds a match, the parses still looking for ``body`` are dropped. The language must
not change, and the configuration after a match must read any unit back into itself."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from surecall.engine import automaton as automaton_module
from surecall.engine import native
from surecall.engine.automaton import DEAD, ByteAutomaton, build_nfa
from surecall.engine.errors import GrammarError
from surecall.engine.ir import Ref, alt, chars, literal, repeat, seq, star
from surecall.engine.regex import regex_to_ir
from surecall.schema import grammar_from_schema

_spec = importlib.util.spec_from_file_location("regex_strategies", Path(__file__).with_name("regex_strategies.py"))
regex_strategies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regex_strategies)
ALPHABET = regex_strategies.ALPHABET
regexes = regex_strategies.regexes

LETTER = chars([(ord("a"), ord("z"))])


def _automaton(node, *, tails: bool = True, use_native: bool = True) -> ByteAutomaton:
    """An automaton built directly (grammars share automata through a cache), its searches'
    tails analysed or not, with or without the native extension."""
    with pytest.MonkeyPatch.context() as patch:
        if not tails:
            patch.setattr(automaton_module, "_search_span", lambda items: (-1, -1, None))
        if not use_native:
            patch.setattr(native, "states", None)
        nfa = build_nfa({"start": node}, "start")
        return ByteAutomaton(nfa)


def _along(automaton: ByteAutomaton, text: bytes) -> list[tuple[bool, bool]]:
    """(alive, accepting) after each prefix of ``text``."""
    config, found = automaton.initial, []
    for value in text:
        config = automaton.step(config, value) if config != DEAD else DEAD
        found.append((config != DEAD, config != DEAD and automaton.is_accepting(config)))
    return found


def _search(unit, body, *others):
    """A quoted search for ``body``, or for any of ``body`` and ``others`` (a pattern's
    top-level alternatives: one search each, going on at the same closing quote)."""
    searches = [seq(star(unit), each, star(unit)) for each in (body, *others)]
    return seq(literal('"'), alt(*searches), literal('"'))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unit=regexes,
    bodies=st.lists(regexes, min_size=1, max_size=2),
    choices=st.lists(st.integers(0, 10**6), max_size=40),
    others=st.lists(st.text(alphabet=st.sampled_from(ALPHABET + ['"']), max_size=10), max_size=6),
)
def test_a_search_accepts_what_it_accepts_without_its_tails(unit, bodies, choices, others):
    try:
        node = _search(regex_to_ir(unit[0]), *(regex_to_ir(body[0]) for body in bodies))
        with_tails = _automaton(node)
    except GrammarError:
        reject()  # an empty language: nothing to compare
    without = _automaton(node, tails=False)
    # A text of the search's own, byte by byte among the bytes that keep it alive (past a
    # match, into the tail), and texts of the alphabet, quoted or not.
    config, walked = with_tails.initial, bytearray()
    for choice in choices:
        options = with_tails.next_bytes(config)
        if not options:
            break
        walked.append(options[choice % len(options)])
        config = with_tails.step(config, walked[-1])
    texts = [bytes(walked), *(f'"{other}"'.encode() for other in others), *(other.encode() for other in others)]
    for text in texts:
        along = _along(with_tails, text)
        assert along == _along(without, text), (unit, bodies, text)
        # Prefixes of a dozen bytes: the check against Python is cubic in their length.
        for end, (_, accepting) in enumerate(along[:12], 1):
            try:
                decoded = text[:end].decode()
            except UnicodeDecodeError:
                continue
            assert accepting == _python_search_accepts(unit[1], [body[1] for body in bodies], decoded), (
                unit, bodies, decoded)


def _python_search_accepts(unit: str, bodies: list[str], text: str) -> bool:
    """Whether Python's ``re`` reads ``text`` as a quoted search (``"`` then ``unit*`` ``body``
    ``unit*`` for some body, then ``"``), matching the unit and bodies on pieces of the text:
    the whole search as one pattern backtracks exponentially on some units (a starred unit
    of nullable alternatives takes a minute on a dozen characters)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return False
    inner = text[1:-1]
    size = len(inner)
    unit_pattern = re.compile(unit, re.ASCII)
    # units[i][j]: inner[i:j] is a sequence of units (empty included)
    units = [[i == j for j in range(size + 1)] for i in range(size + 1)]
    for i in range(size + 1):
        for j in range(i + 1, size + 1):
            units[i][j] = any(units[i][k] and unit_pattern.fullmatch(inner[k:j]) for k in range(i, j))
    for body in bodies:
        body_pattern = re.compile(body, re.ASCII)
        for i in range(size + 1):
            for j in range(i, size + 1):
                if units[0][i] and units[j][size] and body_pattern.fullmatch(inner[i:j]):
                    return True
    return False


@pytest.mark.parametrize("use_native", [True, False])
@pytest.mark.parametrize("bodies", [("abc",), ("abc", "xy")])
def test_after_a_match_the_configuration_reads_any_unit_back_into_itself(use_native, bodies):
    if use_native and native.states is None:
        pytest.skip("the native extension is not built")
    node = _search(LETTER, *map(literal, bodies))
    automaton = _automaton(node, use_native=use_native)
    without = _automaton(node, tails=False, use_native=use_native)
    # A match of either alternative drops the other's parses too.
    texts = [b'"xabc', b'"xabca', b'"xabcab', b'"xabcabc', b'"abcqa', b'"qxabcx', b'"abcxyx']
    after = {automaton.step_bytes(automaton.initial, text) for text in texts}
    assert len(after) == 1 and DEAD not in after
    (config,) = after
    assert all(automaton.step(config, value) == config for value in range(ord("a"), ord("z") + 1))
    # Without the tails' analysis the parses looking for "abc" again tell them apart.
    assert len({without.step_bytes(without.initial, text) for text in texts}) > 1


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(alphabet="abcx\"", max_size=12), min_size=1, max_size=5))
def test_native_and_python_drop_the_same_items(texts):
    # Inside a called rule too, where the items have origins.
    node = seq(star(seq(literal("("), _search(LETTER, literal("ab")), literal(")"))), literal("."))
    built, python_only = _automaton(node), _automaton(node, use_native=False)
    for text in texts:
        encoded = text.encode()
        configs = (built.step_bytes(built.initial, encoded), python_only.step_bytes(python_only.initial, encoded))
        items = [automaton._items(config) if config != DEAD else None
                 for automaton, config in zip((built, python_only), configs)]
        assert items[0] == items[1]


def test_a_schema_pattern_unanchored_at_both_ends_returns_to_one_configuration_after_a_match_of_any_branch():
    grammar = grammar_from_schema({"type": "string", "pattern": "response|reply"})
    automaton = grammar.automaton
    # By the alternative matched first: once one has, the other's parses are dropped too.
    for texts in (('"a response', '"a responser', '"a responseres', '"responsere\\n', '"response é, a reply'),
                  ('"a reply', '"a replyrespo', '"reply and a response')):
        after = {automaton.step_bytes(automaton.initial, text.encode()) for text in texts}
        assert len(after) == 1 and DEAD not in after
        (config,) = after
        assert automaton.step_bytes(config, b"more text") == config
    assert grammar.accepts('"it is a response of sorts"')
    assert grammar.accepts('"it is a reply of sorts"')
    assert not grammar.accepts('"it is a respons of sorts"')


def test_a_search_whose_unit_names_rules_is_left_as_it_is():
    # The unit names a rule that holds the search itself: analysing it would build the
    # search again, without end.
    searched = seq(star(Ref("item")), alt(Ref("pair"), literal(b""), Ref("pair")), star(Ref("item")))
    rules = {"item": Ref("items"), "items": repeat(searched, 2, 3), "pair": seq(Ref("items"), Ref("item"))}
    nfa = build_nfa(rules, "item")
    assert nfa.search_tails is None
    assert ByteAutomaton(nfa).initial != DEAD
