"""Custom constraints: incremental parsers turned into masks by the trie walk."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine.constraints import ConstraintMatcher, IncrementalParser, OneOf, ParseFailure
from surecall.engine.errors import TokenBudgetError
from surecall.engine.matcher import Status

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

EOS = 1


@pytest.fixture(scope="module")
def vocab():
    return doubles.sample_vocabulary()


class Sentence(IncrementalParser):
    """Lowercase words and spaces ended by one '.'; counts append calls to show pruning."""

    calls = 0

    def __init__(self, text: str = ""):
        self.text = text

    def append(self, text: str) -> None:
        Sentence.calls += 1
        for char in text:
            if self.text.endswith(".") or not (char.islower() or char == " " or (char == "." and self.text)):
                raise ParseFailure(f"unexpected {char!r}")
            self.text += char

    def copy(self):
        return Sentence(self.text)

    def is_complete(self) -> bool:
        return self.text.endswith(".")

    def can_continue(self) -> bool:
        return not self.is_complete()

    def shortest_completion(self) -> str:
        return "" if self.is_complete() else ("." if self.text else "a.")


class LowercaseGroup:
    @staticmethod
    def filter(token: str) -> bool:
        return token != "" and all(c.islower() or c == " " for c in token)


class UppercaseGroup:
    @staticmethod
    def filter(token: str) -> bool:
        return any(c.isupper() for c in token)


class GroupedSentence(Sentence):
    def copy(self):
        return GroupedSentence(self.text)

    def valid_token_group(self):
        return None if self.text.endswith(".") else LowercaseGroup

    def invalid_token_group(self):
        return UppercaseGroup


def reference_allowed(parser, vocab) -> set[int]:
    """Tokens whose whole text the parser accepts, plus partial UTF-8 tokens some token completes."""
    accepted = set()
    for token_id in vocab.normal_ids.tolist():
        try:
            text = vocab.token_bytes(token_id).decode("utf-8")
        except UnicodeDecodeError:
            continue
        probe = parser.copy()
        try:
            probe.append(text)
        except ParseFailure:
            continue
        accepted.add(token_id)
    partial = set()
    for token_id in vocab.normal_ids.tolist():
        data = vocab.token_bytes(token_id)
        if token_id not in accepted and any(
            vocab.token_bytes(other).startswith(data) and len(vocab.token_bytes(other)) > len(data) for other in accepted
        ):
            partial.add(token_id)
    return accepted | partial


def text_ids(matcher) -> set[int]:
    return set(matcher.allowed_token_ids().tolist()) - set(matcher.vocab.eos_token_ids)


def test_one_of_walk_forced_prefix_and_finish(vocab):
    matcher = ConstraintMatcher(OneOf(["hello world", "hello there", "日本"]), vocab)
    assert matcher.forced()[0] == b""  # two different first characters
    options = (b"hello world", b"hello there", "日本".encode())
    expected = {i for i in vocab.normal_ids.tolist() if any(o.startswith(vocab.token_bytes(i)) for o in options)}
    assert text_ids(matcher) == expected  # includes the partial-character tokens b"\xe6" and b"\xe6\x97"
    assert matcher.advance(vocab.tokenize_bytes(b"hello")[0]) is Status.ACCEPTED
    forced, tokens = matcher.forced()
    assert forced == b" "
    assert matcher.advance(vocab.tokenize_bytes(b" world")[0]) is Status.FINISHED
    assert matcher.text_bytes() == b"hello world"


def test_one_of_split_character_and_eos(vocab):
    matcher = ConstraintMatcher(OneOf(["日", "日本"]), vocab)
    half = vocab.tokenize_bytes(b"\xe6\x97")[0]
    assert vocab.token_bytes(half) == b"\xe6\x97"
    assert matcher.advance(half) is Status.ACCEPTED
    assert not matcher.is_accepting()
    assert EOS not in matcher.allowed_token_ids()
    assert matcher.advance(vocab.tokenize_bytes(b"\xa5")[0]) is Status.ACCEPTED
    assert matcher.is_accepting() and EOS in matcher.allowed_token_ids()
    assert matcher.advance(EOS) is Status.FINISHED
    assert matcher.text_bytes().decode() == "日"


def test_mask_matches_reference_and_failures_prune_subtrees(vocab):
    matcher = ConstraintMatcher(Sentence(), vocab)
    assert text_ids(matcher) == reference_allowed(Sentence(), vocab)
    # Once the sentence is over every first character fails, and the tokens below
    # it are never tried: at most one parse per first byte of the trie.
    Sentence.calls = 0
    assert text_ids(ConstraintMatcher(Sentence("done."), vocab)) == set()
    first_characters = {vocab.token_bytes(i).decode("utf-8", "ignore")[:1] for i in vocab.normal_ids.tolist()} - {""}
    assert Sentence.calls == len(first_characters) < len(vocab.normal_ids)
    for piece in (b"hello", b" world", b"."):
        assert matcher.advance(vocab.tokenize_bytes(piece)[0]) is not Status.REJECTED
    assert matcher.is_finished()
    assert matcher.text_bytes() == b"hello world."


def test_token_groups_decide_tokens_without_parsing(vocab):
    plain = ConstraintMatcher(Sentence("ab"), vocab)
    grouped = ConstraintMatcher(GroupedSentence("ab"), vocab)
    Sentence.calls = 0
    grouped_ids = text_ids(grouped)
    calls_with_groups = Sentence.calls
    Sentence.calls = 0
    plain_ids = text_ids(plain)
    assert grouped_ids == plain_ids
    assert calls_with_groups < Sentence.calls


def test_advance_rejects_and_keeps_state(vocab):
    matcher = ConstraintMatcher(Sentence(), vocab)
    matcher.advance(vocab.tokenize_bytes(b"ab")[0])
    before = (matcher.text_bytes(), text_ids(matcher))
    assert matcher.advance(vocab.tokenize_bytes(b"X")[0]) is Status.REJECTED
    assert matcher.advance(EOS) is Status.REJECTED
    assert (matcher.text_bytes(), text_ids(matcher)) == before


def test_rollback_clone_reset(vocab):
    matcher = ConstraintMatcher(OneOf(["abc", "xyz"]), vocab)
    matcher.advance(vocab.tokenize_bytes(b"ab")[0])
    twin = matcher.clone()
    assert matcher.advance(vocab.tokenize_bytes(b"c")[0]) is Status.FINISHED
    assert twin.text_bytes() == b"ab" and not twin.is_finished()
    matcher.rollback(1)
    assert text_ids(matcher) == text_ids(twin) == {vocab.tokenize_bytes(b"c")[0]}
    matcher.reset()
    assert matcher.text_bytes() == b"" and vocab.tokenize_bytes(b"xyz")[0] in matcher.allowed_token_ids()


def test_budget_with_constraints(vocab):
    options = ["a b c d e f", "xyz"]
    with pytest.raises(TokenBudgetError):
        ConstraintMatcher(OneOf(options), vocab, max_tokens=0)
    matcher = ConstraintMatcher(OneOf(options), vocab, max_tokens=1)
    assert text_ids(matcher) == {vocab.tokenize_bytes(b"xyz")[0]}
    matcher = ConstraintMatcher(Sentence(), vocab, max_tokens=2)
    assert matcher.min_tokens_to_finish() == 2
    first = vocab.tokenize_bytes(b"hello")[0]
    assert matcher.advance(first) is Status.ACCEPTED
    assert text_ids(matcher) == {vocab.tokenize_bytes(b".")[0]}


def test_protocol_errors(vocab):
    class NoCompletion:
        def append(self, text):
            pass

        def copy(self):
            return self

    with pytest.raises(TypeError, match="is_complete"):
        ConstraintMatcher(NoCompletion(), vocab)

    class Minimal(NoCompletion):
        def is_complete(self):
            return True

    with pytest.raises(TypeError, match="shortest_completion"):
        ConstraintMatcher(Minimal(), vocab, max_tokens=3)
    with pytest.raises(ValueError):
        OneOf([])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="abxyz日本é ", min_size=1, max_size=8), min_size=1, max_size=4), st.data())
def test_one_of_random_walks_produce_an_option(options, data):
    vocab = doubles.sample_vocabulary()
    matcher = ConstraintMatcher(OneOf(options), vocab)
    for _ in range(40):
        if matcher.is_finished():
            break
        allowed = matcher.allowed_token_ids().tolist()
        assert allowed
        assert matcher.advance(data.draw(st.sampled_from(allowed))) is not Status.REJECTED
    assert matcher.is_finished()
    assert matcher.text_bytes().decode() in options
    assert np.all(np.diff(matcher.allowed_token_ids()) > 0) if len(matcher.allowed_token_ids()) > 1 else True
