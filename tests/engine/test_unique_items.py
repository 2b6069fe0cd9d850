"""The matcher's text-check hook: a stateful check on top of the grammar that masks tokens.

A grammar may carry a ``text_check`` (``initial()``, ``feed(state, data)`` returning the new
state or None, ``trigger_bytes(state)``); the matcher must then allow exactly the tokens
the grammar allows and the check accepts, whatever the trigger bytes claim to narrow.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine import Grammar
from surecall.engine.matcher import Matcher, Status

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

VOCAB = doubles.sample_vocabulary(extra_logits=3)
LETTERS = b"abcd"


class NoRepeatedLetter:
    """Test double: each of a..d may occur at most once; ``narrow`` claims only a..d can break it."""

    def __init__(self, narrow: bool) -> None:
        self.narrow = narrow

    def initial(self):
        return frozenset()

    def feed(self, state, data: bytes):
        seen = set(state)
        for byte in data:
            if byte in LETTERS:
                if byte in seen:
                    return None
                seen.add(byte)
        return frozenset(seen)

    def trigger_bytes(self, state) -> bytes:
        return LETTERS if self.narrow else b""


class CheckedGrammar:
    def __init__(self, pattern: str, check) -> None:
        self.grammar = Grammar.from_regex(pattern)
        self.automaton = self.grammar.automaton
        self.text_check = check


def expected_allowed(grammar: CheckedGrammar, text: bytes) -> set[int]:
    plain = Matcher(grammar.grammar, VOCAB)
    if text:
        assert plain.advance_many(VOCAB.tokenize_bytes(text)) is not Status.REJECTED
    check = grammar.text_check
    state = check.feed(check.initial(), text)
    return {t for t in plain.allowed_token_ids().tolist() if t in VOCAB.eos_token_ids or check.feed(state, VOCAB.token_bytes(t)) is not None}


@settings(max_examples=40, deadline=None)
@given(narrow=st.booleans(), picks=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_mask_is_grammar_mask_minus_rejected_tokens(narrow, picks):
    grammar = CheckedGrammar("[a-f,]*x", NoRepeatedLetter(narrow))
    matcher = Matcher(grammar, VOCAB)
    for pick in picks:
        allowed = matcher.allowed_token_ids().tolist()
        assert set(allowed) == expected_allowed(grammar, matcher.text_bytes())
        text_tokens = [t for t in allowed if t not in VOCAB.eos_token_ids]
        if not text_tokens:
            break
        assert matcher.advance(text_tokens[pick % len(text_tokens)]) is not Status.REJECTED
    assert grammar.text_check.feed(grammar.text_check.initial(), matcher.text_bytes()) is not None


def test_advance_rejects_what_the_check_rejects_and_rollback_restores_it():
    grammar = CheckedGrammar("[a-f]*x", NoRepeatedLetter(True))
    matcher = Matcher(grammar, VOCAB)
    a, b = VOCAB.tokenize_bytes(b"a")[0], VOCAB.tokenize_bytes(b"b")[0]
    assert matcher.advance(a) is Status.ACCEPTED
    assert not matcher.is_allowed(a)
    assert matcher.advance(a) is Status.REJECTED
    assert a not in matcher.allowed_token_ids().tolist()
    twin = matcher.clone()
    matcher.rollback()
    assert matcher.is_allowed(a) and a in matcher.allowed_token_ids().tolist()
    assert not twin.is_allowed(a) and twin.is_allowed(b)


def test_bitmask_matches_allowed_ids():
    grammar = CheckedGrammar("[a-f]*x", NoRepeatedLetter(True))
    matcher = Matcher(grammar, VOCAB)
    matcher.advance_many(VOCAB.tokenize_bytes(b"ce"))
    buffer = np.zeros((VOCAB.size + 31) // 32, dtype=np.int32)
    matcher.fill_bitmask(buffer)
    bits = buffer.view(np.uint32)
    from_bits = [i for i in range(VOCAB.size) if bits[i >> 5] >> (i & 31) & 1]
    assert from_bits == matcher.allowed_token_ids().tolist()
    assert VOCAB.tokenize_bytes(b"c")[0] not in from_bits
