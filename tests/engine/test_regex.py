"""Regular expressions: agreement with Python ``re`` on the supported subset, and clear errors outside it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from surecall.engine.errors import GrammarError, UnsupportedRegexError
from surecall.engine.grammar import Grammar
from surecall.engine.regex import regex_to_ir

_spec = importlib.util.spec_from_file_location("regex_strategies", Path(__file__).with_name("regex_strategies.py"))
regex_strategies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regex_strategies)
ALPHABET = regex_strategies.ALPHABET
regexes = regex_strategies.regexes


def _python_matches(py_pattern: str, text: str) -> bool:
    return re.fullmatch(py_pattern, text, re.ASCII) is not None


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=regexes, texts=st.lists(st.text(alphabet=st.sampled_from(ALPHABET), max_size=6), min_size=1, max_size=8))
def test_random_regexes_agree_with_python_re(pair, texts):
    ours, py = pair
    try:
        grammar = Grammar.from_regex(ours)
    except GrammarError as exc:
        # Only a regex with an empty language may be refused.
        assert "never derive" in str(exc)
        assert not any(_python_matches(py, text) for text in texts)
        return
    for text in texts:
        assert grammar.accepts(text) == _python_matches(py, text), (ours, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pair=regexes, data=st.data())
def test_strings_matching_the_regex_are_accepted(pair, data):
    ours, py = pair
    try:
        Grammar.from_regex(ours)
    except GrammarError:
        reject()  # empty language: nothing to draw
    compiled = re.compile(py, re.ASCII)
    text = data.draw(st.from_regex(compiled, fullmatch=True).filter(lambda s: len(s) < 40))
    assert _python_matches(py, text)
    assert Grammar.from_regex(ours).accepts(text), (ours, text)


@pytest.mark.parametrize(
    "pattern, good, bad",
    [
        (r"\d{3}-\d{4}", ["555-1234"], ["55-1234", "555-12345", "٣٣٣-1234"]),
        (r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$", ["john.doe+x@mail.example.org"], ["a@b.c", "@x.org", "a b@c.de"]),
        (r"[^\s]+", ["abc", "é😀"], ["a b", "", "a\u3000b"]),
        (r"\u00e9\u{1F600}\x41", ["é😀A"], ["e😀A"]),
        (r"(?<year>\d{4})-(?:0[1-9]|1[0-2])", ["2024-12"], ["2024-13"]),
        (r"a{2,}?b+?c??", ["aab", "aaabbc"], ["ab"]),
        (r"[\]\-^]+", ["]-^"], ["a"]),
        (r"x{,2}", ["x{,2}"], ["xx"]),
        (r"\/\.\*", ["/.*"], ["/a"]),
        (r"^abc$|^d$", ["abc", "d"], ["abcd"]),
        (r"(?#comment)a", ["a"], ["(?#comment)a"]),
        (r"[\D][\W][\S]", ["a!b"], ["1!b", "aab", "a! "]),
        (r"\cJ\t\0", ["\n\t\0"], ["cJ"]),
        (r"", [""], ["a"]),
        (r"a|", ["a", ""], ["b"]),
        (r"\p{L}+", ["héllo", "Ωμέγα", "漢字"], ["a1", "", "a b"]),
        (r"\p{Lu}\p{Ll}*", ["Émile", "A"], ["émile", "AB"]),
        (r"[\p{L}\d_-]+", ["ab_12-ü"], ["a b", "a!"]),
        (r"\P{N}+", ["abc!"], ["a1", "a٣"]),
        (r"\p{Letter}\p{gc=Nd}", ["x٣", "é0"], ["xx"]),
    ],
)
def test_documented_features(pattern, good, bad):
    grammar = Grammar.from_regex(pattern)
    for text in good:
        assert grammar.accepts(text), (pattern, text)
    for text in bad:
        assert not grammar.accepts(text), (pattern, text)


@pytest.mark.parametrize(
    "pattern, position, fragment",
    [
        ("a(?=b)", 1, "lookahead"),
        ("(?!b)a", 0, "lookahead"),
        ("a(?<=b)", 1, "lookbehind"),
        ("(?<!b)a", 0, "lookbehind"),
        (r"(a)\1", 3, "backreference"),
        (r"(?P<x>a)(?P=x)", 8, "backreference"),
        (r"\k<x>", 0, "backreference"),
        (r"\bword", 0, "word boundaries"),
        (r"a\p{Script=Latin}", 1, "Unicode property"),
        (r"\p{Han}", 0, "Unicode property"),
        ("a^b", 1, "'^'"),
        ("a$b", 1, "'$'"),
        ("(a$)b", 2, "'$'"),
        ("(?i)a", 0, "inline flags"),
        ("a++", 2, "possessive"),
        ("(?>a)", 0, "atomic"),
    ],
)
def test_unsupported_features_name_their_position(pattern, position, fragment):
    with pytest.raises(UnsupportedRegexError) as info:
        regex_to_ir(pattern)
    assert fragment in str(info.value)
    assert f"position {position}" in str(info.value)
    assert info.value.column == position + 1


@pytest.mark.parametrize(
    "pattern, fragment",
    [("(a", "missing ')'"), ("a)", "unbalanced"), ("*a", "nothing to repeat"), ("[a", "unterminated"), ("a{3,1}", "min > max"),
     (r"\x4", "hex digits"), ("[z-a]", "reversed"), ("a**", "multiple repeat")],
)
def test_malformed_patterns(pattern, fragment):
    with pytest.raises(GrammarError) as info:
        regex_to_ir(pattern)
    assert not isinstance(info.value, UnsupportedRegexError)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "pattern, position", [(r"\uDD00", 0), ("a|\\U0000D800", 2), ("x\udc80", 1), (r"(a\ud83d)", 2)]
)
def test_surrogate_code_points_are_refused_where_they_stand(pattern, position):
    # Python's re matches a lone surrogate in a str; UTF-8 text cannot hold one.
    with pytest.raises(GrammarError) as info:
        regex_to_ir(pattern)
    assert "surrogate" in str(info.value)
    assert info.value.column == position + 1


def test_regex_grammar_is_a_dfa():
    grammar = Grammar.from_regex(r"[a-z]+(\.[a-z]+)*@example\.com")
    assert not grammar.automaton._nfa.has_calls
    assert grammar.accepts("first.last@example.com")


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(alphabet=list("ab()[]{}^$|*+?.-\\,:=!<>P0123dDwWsSxuUpck") + ["é"], max_size=12))
def test_arbitrary_patterns_compile_or_raise_a_grammar_error(pattern):
    try:
        grammar = Grammar.from_regex(pattern)
    except GrammarError as error:
        assert error.column is not None or "never derive" in str(error) or "matches nothing" in str(error), str(error)
        return
    grammar.accepts("ab")


def test_groups_nested_past_the_limit_are_refused():
    from surecall.engine.ir import MAX_GROUP_DEPTH

    assert Grammar.from_regex("(" * MAX_GROUP_DEPTH + "a" + ")" * MAX_GROUP_DEPTH).accepts("a")
    for depth in (MAX_GROUP_DEPTH + 1, 5000):
        with pytest.raises(UnsupportedRegexError, match="nested more than"):
            Grammar.from_regex("(?:" * depth + "a" + ")" * depth)
