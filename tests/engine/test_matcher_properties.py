"""Property tests of the matcher over random regular grammars compiled by the real grammar side."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surecall.engine import Grammar
from surecall.engine.matcher import DEAD, Matcher, Status

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

VOCAB = doubles.sample_vocabulary()

atoms = st.sampled_from(["a", "b", "ab", "xyz", "é", "日本", " ", '"', "[ab]", "[^ab]", "[0-9]", "\\d", "12", "na", "me"])


def regexes():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: f"({p[0]}|{p[1]})"),
            inner.map(lambda p: f"({p})*"),
            inner.map(lambda p: f"({p})+"),
            inner.map(lambda p: f"({p})?"),
            inner.map(lambda p: f"({p}){{1,3}}"),
        )

    return st.recursive(atoms, extend, max_leaves=6)


def random_valid_bytes(automaton, data: st.DataObject, limit: int = 30) -> bytes:
    """A random sentence of the automaton's language, drawn byte by byte."""
    config, out = automaton.initial, bytearray()
    while True:
        following = automaton.next_bytes(config)
        if automaton.is_accepting(config) and (not following or len(out) >= limit or data.draw(st.booleans())):
            return bytes(out)
        if len(out) >= limit:
            completion = automaton.shortest_completion(config)
            return bytes(out + completion)
        value = data.draw(st.sampled_from(sorted(following)))
        out.append(value)
        config = automaton.step(config, value)


def random_walk(matcher: Matcher, data: st.DataObject, max_steps: int = 40) -> None:
    for _ in range(max_steps):
        if matcher.is_finished():
            return
        allowed = matcher.allowed_token_ids()
        assert len(allowed), "a live matcher always has an allowed token"
        expected = doubles.brute_force_allowed(matcher.automaton, VOCAB, matcher.config)
        if matcher.remaining_tokens is None:
            assert set(allowed.tolist()) - set(VOCAB.eos_token_ids) == expected
        token = data.draw(st.sampled_from(allowed.tolist()))
        assert matcher.advance(token) in (Status.ACCEPTED, Status.FINISHED)


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(regexes(), st.data())
def test_random_walks_end_in_accepted_text(pattern, data):
    grammar = Grammar.from_regex(pattern)
    matcher = Matcher(grammar, VOCAB)
    random_walk(matcher, data)
    if matcher.is_finished():
        assert grammar.accepts(matcher.text_bytes())
    else:
        # Every prefix the walk produced can still be completed.
        assert grammar.automaton.is_accepting(matcher.config) or matcher.min_tokens_to_finish() > 0


@SETTINGS
@given(regexes(), st.data())
def test_every_token_of_a_valid_string_is_allowed(pattern, data):
    grammar = Grammar.from_regex(pattern)
    text = random_valid_bytes(grammar.automaton, data)
    assert grammar.accepts(text)
    matcher = Matcher(grammar, VOCAB)
    for token in VOCAB.tokenize_bytes(text):
        assert token in matcher.allowed_token_ids()
        assert matcher.advance(token) is not Status.REJECTED
    assert matcher.text_bytes() == text
    assert matcher.is_accepting()
    if not matcher.is_finished():
        assert matcher.advance(next(iter(VOCAB.eos_token_ids))) is Status.FINISHED


@SETTINGS
@given(regexes(), st.integers(0, 4), st.data())
def test_budgeted_walks_finish_valid_inside_the_budget(pattern, slack, data):
    grammar = Grammar.from_regex(pattern)
    needed = Matcher(grammar, VOCAB).min_tokens_to_finish()
    budget = needed + slack
    matcher = Matcher(grammar, VOCAB, max_tokens=budget)
    for _ in range(budget + 1):
        if matcher.is_finished():
            break
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed, "the budget never leaves the matcher without a way to finish"
        assert matcher.advance(data.draw(st.sampled_from(allowed))) is not Status.REJECTED
    assert matcher.is_finished()
    produced = [t for t in matcher.token_ids if t not in VOCAB.eos_token_ids]
    assert len(produced) <= budget
    assert grammar.accepts(matcher.text_bytes())


@SETTINGS
@given(regexes(), st.data())
def test_forced_text_is_the_only_continuation(pattern, data):
    grammar = Grammar.from_regex(pattern)
    automaton = grammar.automaton
    matcher = Matcher(grammar, VOCAB)
    random_walk(matcher, data, max_steps=data.draw(st.integers(0, 5)))
    if matcher.is_finished():
        return
    forced, tokens = matcher.forced()
    config = matcher.config
    for value in forced:
        assert not automaton.is_accepting(config)
        assert automaton.next_bytes(config) == bytes([value])
        config = automaton.step(config, value)
    assert config != DEAD
    assert VOCAB.decode(tokens) == forced[: len(VOCAB.decode(tokens))]
    statuses = [matcher.advance(token) for token in tokens]
    assert all(status is Status.ACCEPTED for status in statuses[:-1])
    assert not statuses or statuses[-1] is not Status.REJECTED


RECURSIVE_GRAMMARS = [
    "start ::= '[' (start (', ' start)*)? ']' | 'ab' | #'[0-9]+';",
    "start ::= expr; expr ::= expr '+' term | term; term ::= '(' expr ')' | 'x' | '12';",
    "start ::= 'x' any! 'y' | except!('\\n\\n', 4) '\\n\\n';",
    "start ::= intersect!(#'[a-c ]{1,8}', complement!(#'.*(ab|  ).*')) ('.' start)?;",
]
# The budget test walks the grammars without token-level nodes (any!, except!).
BOUNDED_GRAMMARS = [source for source in RECURSIVE_GRAMMARS if "any!" not in source]


@SETTINGS
@given(st.sampled_from(RECURSIVE_GRAMMARS), st.data())
def test_random_walks_over_recursive_and_token_level_grammars(source, data):
    grammar = Grammar.from_ebnf(source)
    matcher = Matcher(grammar, VOCAB)
    random_walk(matcher, data, max_steps=25)
    if matcher.is_finished():
        assert grammar.accepts(matcher.text_bytes())


@SETTINGS
@given(st.sampled_from(BOUNDED_GRAMMARS), st.integers(0, 3), st.data())
def test_budget_on_recursive_grammars(source, slack, data):
    grammar = Grammar.from_ebnf(source)
    budget = Matcher(grammar, VOCAB).min_tokens_to_finish() + slack
    matcher = Matcher(grammar, VOCAB, max_tokens=budget)
    while not matcher.is_finished():
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed
        assert matcher.advance(data.draw(st.sampled_from(allowed))) is not Status.REJECTED
    assert len([t for t in matcher.token_ids if t not in VOCAB.eos_token_ids]) <= budget
    assert grammar.accepts(matcher.text_bytes())


@SETTINGS
@given(regexes(), st.data())
def test_native_and_numpy_walks_find_the_same_tokens(pattern, data):
    from surecall.engine import native

    grammar = Grammar.from_regex(pattern)
    automaton = grammar.automaton
    text = random_valid_bytes(automaton, data)
    config = automaton.step_bytes(automaton.initial, text[: data.draw(st.integers(0, len(text)))])
    matcher = Matcher(grammar, VOCAB)
    with_native = doubles.walked_tokens(matcher, config)
    saved, native.walk = native.walk, None
    try:
        assert doubles.walked_tokens(matcher, config) == with_native
    finally:
        native.walk = saved
