"""The byte automaton: recursion, ambiguity, UTF-8, vectorised stepping and token hooks."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine import automaton as automaton_module
from surecall.engine import native
from surecall.engine.automaton import DEAD, ByteAutomaton, build_nfa, utf8_sequences
from surecall.engine.ebnf import parse_ebnf
from surecall.engine.errors import EmptyLanguageError, GrammarError
from surecall.engine.grammar import Grammar
from surecall.engine.ir import (
    AnyToken,
    Bytes,
    ByteSet,
    CharSet,
    Complement,
    Except,
    Intersect,
    Ref,
    alt,
    chars,
    literal,
    optional,
    plus,
    repeat,
    seq,
    star,
)
from surecall.engine.regex import regex_to_ir

_spec = importlib.util.spec_from_file_location("regex_strategies", Path(__file__).with_name("regex_strategies.py"))
regex_strategies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regex_strategies)
ALPHABET = regex_strategies.ALPHABET
regexes = regex_strategies.regexes

DIGIT = ByteSet(((0x30, 0x39),))


def run_tokens(grammar: Grammar, tokens: list[bytes]):
    """Feed whole tokens; returns 'dead' or whether the text is complete."""
    automaton = grammar.automaton
    config = automaton.initial
    for token in tokens:
        config = automaton.step_bytes(config, token)
        if config == DEAD:
            return "dead"
        config = automaton.on_token_boundary(config)
        assert config != DEAD
    return automaton.is_accepting(config)


# -- regular grammars ---------------------------------------------------------------


def test_literals_classes_and_repetition():
    g = Grammar({"start": seq("a", star(DIGIT), alt("x", "yz"))})
    assert g.accepts("ax") and g.accepts("a123yz")
    assert not g.accepts("a1") and not g.accepts("ayzz") and not g.accepts("")


def test_bounded_repetition_counts():
    g = Grammar({"start": repeat("ab", 2, 4)})
    assert [g.accepts("ab" * n) for n in range(6)] == [False, False, True, True, True, False]


def test_subtrees_emitted_many_times_are_copied_faithfully(monkeypatch):
    import re

    # One shared node, unrolled three times by a repetition and met twice more: from its
    # third emission on, its positions are copied (it holds an alternation, a loop and an
    # optional escape, so the copy must relocate epsilon lists and single successors alike).
    word = seq(alt(literal("abcd"), seq(literal("c"), star(DIGIT))), optional(literal("\\x")), literal(";;"))
    grammar_ir = seq(alt(word, literal("!")), literal("|"), repeat(word, 1, 3), literal("|"), alt(word, literal("?")))
    one = r"(?:abcd|c[0-9]*)(?:\\x)?;;"
    pattern = re.compile(rf"(?:{one}|!)\|(?:{one}){{1,3}}\|(?:{one}|\?)")
    copies = []
    original = automaton_module._NfaBuilder._instantiate
    monkeypatch.setattr(automaton_module._NfaBuilder, "_instantiate",
                        lambda self, template, nxt: copies.append(nxt) or original(self, template, nxt))
    grammar = Grammar.from_ir(grammar_ir)
    grammar.automaton
    assert copies, "the shared subtree was copied at least once"
    samples = ["abcd;;|c12\\x;;abcd;;|?", "!|c;;c;;c;;|c\\x;;", "!|c;;c;;c;;c;;|?", "abcd;;||?", "!|c9;;|abcd;;x", "!|abcd\\x;;|?"]
    verdicts = [grammar.accepts(text) for text in samples]
    assert verdicts == [bool(pattern.fullmatch(text)) for text in samples]
    assert any(verdicts) and not all(verdicts)


def test_a_subtree_met_again_with_the_same_continuation_shares_its_positions():
    import re

    # The tail is one node, reached from two arms with the same continuation (shared) and
    # from a third followed by "!" (a position of its own).
    def tail():
        return seq(star(alt(literal("xy"), DIGIT)), optional(literal("\\u")), literal(";"))

    def arms(first, second, third):
        return alt(seq(literal("a"), first), seq(literal("b"), second), seq(literal("c"), third, literal("!")))

    def positions(node) -> int:
        # build_nfa itself: grammars with equal rules share one cached automaton.
        return len(build_nfa({"start": node}, "start").kind)

    one = tail()
    factored_by_hand = alt(seq(alt(literal("a"), literal("b")), one), seq(literal("c"), one, literal("!")))
    assert positions(arms(one, one, one)) <= positions(factored_by_hand)
    # Equal but distinct tails share their terminals only.
    assert positions(arms(one, one, one)) < positions(arms(tail(), tail(), tail()))
    shared = Grammar.from_ir(arms(one, one, one))
    apart = ByteAutomaton(build_nfa({"start": arms(tail(), tail(), tail())}, "start"))
    pattern = re.compile(r"(?:[ab](?:xy|[0-9])*(?:\\u)?;)|c(?:xy|[0-9])*(?:\\u)?;!")
    samples = ["axy12;", "b;", "b\\u;", "c7xy;!", "c;", "a;!", "bxyx;", "axy9\\u;", "cxy\\u;!", "b12"]
    verdicts = [shared.accepts(text) for text in samples]
    apart_verdicts = [apart.is_accepting(apart.step_bytes(apart.initial, text.encode())) for text in samples]
    assert verdicts == [bool(pattern.fullmatch(text)) for text in samples] == apart_verdicts
    assert any(verdicts) and not all(verdicts)


def test_a_grammar_estimated_past_the_limit_builds_when_shared_positions_fit():
    # 120 keys before one tail: counted copy by copy, about 890,000 positions; shared,
    # about 4,000.
    tail = seq(*(alt(literal(f"<{i}>"), chars([(0x61 + i % 26, 0x7A)])) for i in range(500)))
    grammar_ir = alt(*(seq(literal(f"k{i}:"), tail) for i in range(120)))
    builder = automaton_module._NfaBuilder({"start": grammar_ir}, "start")
    assert builder.size(Ref("start")) > automaton_module.MAX_NFA_POSITIONS
    grammar = Grammar.from_ir(grammar_ir)
    assert len(grammar.automaton._nfa.kind) < 20_000
    text = "k17:" + "".join(f"<{i}>" if i % 3 else chr(0x7A) for i in range(500))
    assert grammar.accepts(text) and not grammar.accepts("k120:" + text[4:])


def test_calls_of_a_rule_with_the_same_continuation_share_one_position():
    # ``r`` is recursive, so called: both arms of ``start`` call it and go on with ";".
    rules = {"start": seq(alt(seq("a", Ref("r")), seq("b", Ref("r"))), ";"), "r": seq("(", optional(Ref("r")), ")")}
    nfa = build_nfa(rules, "start")
    assert nfa.kind.count(automaton_module._CALL) == 2  # one in start, one in r
    grammar = Grammar(rules)
    samples = ["a();", "b(());", "a(;", "c();", "b()", "a((()));"]
    assert [grammar.accepts(text) for text in samples] == [True, True, False, False, False, True]


def _configs_along(automaton, text: bytes) -> list[int]:
    config, found = automaton.initial, []
    for value in text:
        config = automaton.step(config, value)
        found.append(config)
    return found


def test_a_rule_calling_itself_last_loops_back_instead_of_calling():
    # ``r`` ends by calling itself (and is called from start): the self-call jumps back to
    # the rule's head, so every round of the recursion is the same parse state.
    rules = {"start": seq("a", Ref("r"), ";"), "r": alt(seq("x", Ref("r")), seq(Ref("inner"), Ref("r")), "z"),
             "inner": seq("y", optional("y"))}
    nfa = build_nfa(rules, "start")
    assert nfa.kind.count(automaton_module._CALL) == 1  # start's call; r's own calls are jumps
    grammar = Grammar(rules)
    configs = _configs_along(grammar.automaton, b"axyxyyxxz;")
    # after each "x" the same configuration, whatever rounds came before (after "y" a
    # second "y" may follow, so those differ)
    rounds = [configs[i] for i in (1, 3, 6, 7)]
    assert len(set(rounds)) == 1 and DEAD not in configs
    assert configs[2] == configs[4] == configs[5]
    pattern = re.compile(r"a(?:x|yy?)*z;")
    for text in ["az;", "axz;", "ayyz;", "axyyxyz;", "a;", "axy;", "ayyyz;x", "axxxxxxxxz", "bxz;", "axz;;"]:
        assert grammar.accepts(text) is bool(pattern.fullmatch(text)), text


def test_a_self_call_that_is_not_last_still_returns():
    # ``(`` r ``)`` calls r with ``)`` still to come, and ``r`` inside an optional tail of
    # another rule's body is not the end of r's own body: both keep their return points.
    rules = {"start": Ref("r"), "r": alt(seq("(", Ref("r"), ")"), seq("<", Ref("s"), ">"), "x"),
             "s": seq(Ref("r"), optional(seq(",", Ref("s"))))}
    grammar = Grammar(rules)
    for text, expected in [("x", True), ("(x)", True), ("((x))", True), ("<x,x>", True), ("<(x),<x,(x)>>", True),
                           ("(x", False), ("x)", False), ("<x,>", False), ("<x,x", False), ("((x)", False)]:
        assert grammar.accepts(text) is expected, text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["x", "yy", "y"]), max_size=12), st.sampled_from(["z", "", "zz", "x"]))
def test_tail_recursion_accepts_what_the_iteration_accepts(rounds, end):
    # The same language written as a right recursion (jumps) and as a loop (no calls).
    recursive = Grammar({"start": seq("a", Ref("r")), "r": alt(seq("x", Ref("r")), seq("y", optional("y"), Ref("r")), "z")})
    looped = Grammar({"start": seq("a", star(alt("x", seq("y", optional("y")))), "z")})
    text = "a" + "".join(rounds) + end
    assert recursive.accepts(text) == looped.accepts(text)



def _remainder_rules(k: int, prefix: str = "r") -> dict:
    """Digit strings whose value is a multiple of ``k``, one rule per remainder: each rule
    refers to the next only as the last thing it matches (a right-linear cycle)."""
    rules = {}
    for residue in range(k):
        options = [seq(literal(str(d)), Ref(f"{prefix}{(10 * residue + d) % k}")) for d in range(10)]
        rules[f"{prefix}{residue}"] = alt(*options, "") if residue == 0 else alt(*options)
    return rules


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([3, 7, 12, 13]), st.lists(st.text("0123456789", max_size=8), min_size=1, max_size=3))
def test_a_right_linear_cycle_of_rules_is_exact(k, numbers):
    # The cycle referred to from two places, one of them inside a called (recursive) rule.
    rules = {"start": alt(seq("[", Ref("r0"), "]"), seq("(", Ref("list"), ")")),
             "list": alt(seq("<", Ref("r0"), ">"), seq("<", Ref("r0"), ">,", Ref("list"))), **_remainder_rules(k)}
    grammar = Grammar(rules)
    expected = all(number == "" or int(number) % k == 0 for number in numbers)
    assert grammar.accepts("(" + ",".join(f"<{number}>" for number in numbers) + ")") is expected
    assert grammar.accepts(f"[{numbers[0]}]") is (numbers[0] == "" or int(numbers[0]) % k == 0)


def test_a_right_linear_cycle_builds_one_parse_state_per_rule():
    # Inlined as one regular piece, the cycle reaches the same parse states again; called,
    # it pushed one return point per digit, and every digit built new ones.
    grammar = Grammar({"start": Ref("r0"), **_remainder_rules(7)})
    automaton = grammar.automaton
    for length in (10, 100, 400):
        assert grammar.accepts("14" * length)  # 14 * (10^2n - 1) / 99, a multiple of 7
    assert automaton.num_configs <= 7 + 2
    assert not automaton._nfa.has_calls


def test_a_right_linear_cycle_may_be_intersected_and_negated():
    rules = _remainder_rules(3)
    three_digits = regex_to_ir("[0-9]{1,3}")
    multiples = Grammar({**rules, "start": Intersect((three_digits, Ref("r0")))})
    others = Grammar({**rules, "start": Intersect((three_digits, Complement(Ref("r0"))))})
    for value in range(0, 1000, 7):
        assert multiples.accepts(str(value)) is (value % 3 == 0)
        assert others.accepts(str(value)) is (value % 3 != 0)
    # A rule referring to itself last is inlined in an operand too (an operand makes no call).
    digits = {"digits": alt(seq(chars([(0x30, 0x39)]), Ref("digits")), "")}
    short = Grammar({**digits, "start": Intersect((Ref("digits"), regex_to_ir(".{2,3}")))})
    assert [short.accepts(text) for text in ("1", "12", "123", "1234", "1a")] == [False, True, True, False, False]


def test_a_large_cycle_referred_to_from_several_places_is_called():
    # Copied at each of its references it would multiply the NFA; called, it stays one copy.
    rules = {"start": alt(seq("a", Ref("r0"), ";"), seq("b", Ref("r0"), "!"), seq("c", Ref("r0"), "?")),
             **_remainder_rules(607)}
    grammar = Grammar(rules)
    assert grammar.automaton._nfa.has_calls
    assert grammar.accepts("a1214;") and grammar.accepts("c0?") and not grammar.accepts("b1215!")


def test_a_cycle_referring_to_itself_before_its_end_is_still_called():
    # b refers to a with ")" still to come: not right-linear, so calls keep the return points.
    rules = {"start": Ref("a"), "a": alt(seq("(", Ref("b")), "x"), "b": seq(Ref("a"), ")")}
    grammar = Grammar(rules)
    assert grammar.automaton._nfa.has_calls
    for text, expected in [("x", True), ("(x)", True), ("((x))", True), ("((x)", False), ("(x))", False)]:
        assert grammar.accepts(text) is expected, text

def _value(text: str):
    return seq(literal(text), star(chars([(0x61, 0x7A)])))


def test_rules_with_equal_bodies_are_compiled_once():
    # Two branches each write their own rule for the same shape, large enough to be called:
    # compiled apart, each is its own rule, and where both branches are alive every parse
    # state holds the items of both calls.
    def shape():
        return seq(literal('"'), star(alt(chars([(0x20, 0x21), (0x23, 0x7E)]), literal("\\n"))),
                   literal('"' + "v" * (automaton_module.INLINE_LIMIT + 1)))

    rules = {"start": alt(seq("a", Ref("left"), "!", Ref("left")), seq("a", Ref("right"), "?", Ref("right"))),
             "left": shape(), "right": shape()}
    merged, references = automaton_module.merge_identical_rules(rules, "start", _references(rules))
    assert set(merged) == {"start", "left"}
    assert references["start"] == ["left"] * 4
    nfa = build_nfa(rules, "start")
    apart = automaton_module._NfaBuilder(rules, "start").build("start")
    assert nfa.rule_names == ["left"] and len(apart.rule_names) == 2
    assert len(nfa.kind) < 0.6 * len(apart.kind)
    merged_automaton, apart_automaton = ByteAutomaton(nfa), ByteAutomaton(apart)
    inside = [_configs_along(automaton, b'a"xy')[-1] for automaton in (merged_automaton, apart_automaton)]
    assert len(merged_automaton._items(inside[0])) < len(apart_automaton._items(inside[1]))
    grammar, tail = Grammar(rules), '"' + "v" * (automaton_module.INLINE_LIMIT + 1)
    for text, expected in [(f'a"x{tail}!"y{tail}', True), (f'a"x{tail}?"\\n{tail}', True),
                           (f'a"x{tail}!"y{tail}?', False), (f'a"x{tail}?', False), (f'a"x{tail}!"y"', False)]:
        assert grammar.accepts(text) is expected, text


def _references(rules: dict) -> dict:
    return {name: automaton_module._references_list(body) for name, body in rules.items()}



def _references_as_a_tree(node) -> list:
    """Every reference of ``node`` read as a tree, a shared subtree at each of its places."""
    found = []
    stack = [node]
    while stack:
        item = stack.pop()
        if type(item) is Ref:
            found.append(item.name)
        elif hasattr(item, "items"):
            stack.extend(item.items)
        elif hasattr(item, "item"):
            stack.append(item.item)
    return found


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_references_of_shared_subtrees_count_at_every_place(data):
    # Subtrees shared between rules and inside one rule are read once; the references
    # still come once per place, in the order of a walk of the tree.
    nodes = [Ref(name) for name in "abc"] + [literal("x")]
    for _ in range(data.draw(st.integers(1, 12))):
        parts = data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=3))
        kind = data.draw(st.sampled_from([seq, alt, star]))
        nodes.append(kind(*parts) if kind is not star else star(parts[0]))
    rules = {f"r{i}": node for i, node in enumerate(nodes[-4:])}
    memo: dict = {}
    for body in rules.values():
        assert automaton_module._references_list(body, memo) == _references_as_a_tree(body)

def test_rules_merge_once_the_rules_they_refer_to_have():
    # The members differ only by which (equal) value rule they name: they merge in the
    # round after their values do, and the rule naming them in the next.
    rules = {
        "start": alt(Ref("object_a"), Ref("object_b")),
        "object_a": seq("{", Ref("member_a"), "}"), "object_b": seq("{", Ref("member_b"), "}"),
        "member_a": seq('"k":', Ref("value_a")), "member_b": seq('"k":', Ref("value_b")),
        "value_a": _value("v"), "value_b": _value("v"),
    }
    merged, references = automaton_module.merge_identical_rules(rules, "start", _references(rules))
    assert set(merged) == {"start", "object_a", "member_a", "value_a"}
    assert references["start"] == ["object_a", "object_a"]
    assert Grammar(rules).accepts('{"k":vab}') and not Grammar(rules).accepts('{"k":ab}')


def test_a_rule_equal_to_the_start_rule_merges_into_it():
    # Listed first, the twin would keep its name if the start rule were not kept.
    rules = {"twin": alt(seq("(", Ref("inner"), ")"), "x"), "inner": alt(Ref("twin"), "y"),
             "start": alt(seq("(", Ref("inner"), ")"), "x")}
    merged, references = automaton_module.merge_identical_rules(rules, "start", _references(rules))
    assert set(merged) == {"start", "inner"} and references["inner"] == ["start"]
    grammar = Grammar(rules, "start")
    for text, expected in [("x", True), ("(y)", True), ("((x))", True), ("(x", False), ("y", False), ("(())", False)]:
        assert grammar.accepts(text) is expected, text


def test_rules_referring_to_themselves_are_not_merged_with_each_other():
    # Equal up to the rule's own name: merging them would need a proof by induction, which
    # the rounds do not make; each stays, with the language it had.
    rules = {"start": alt(Ref("a"), Ref("b")), "a": seq("x", optional(Ref("a"))), "b": seq("x", optional(Ref("b")))}
    merged, _ = automaton_module.merge_identical_rules(rules, "start", _references(rules))
    assert set(merged) == set(rules)
    assert Grammar(rules).accepts("xxx")


def test_nullable_loop_body_terminates():
    g = Grammar({"start": star(star("a"))})
    assert g.accepts("") and g.accepts("aaaa") and not g.accepts("b")


def test_inlined_rules_give_a_dfa_without_calls():
    rules = {"start": seq(Ref("pair"), ",", Ref("pair")), "pair": seq(Ref("key"), ":", DIGIT), "key": plus(ByteSet(((0x61, 0x7A),)))}
    g = Grammar(rules)
    assert not g.automaton._nfa.has_calls
    assert g.accepts("ab:1,c:2") and not g.accepts("ab:1,c:")


def test_bytes_outside_utf8_are_matched_exactly():
    g = Grammar({"start": seq(Bytes(b"\xff\x00"), ByteSet(((0x80, 0x8F),)))})
    assert g.accepts(b"\xff\x00\x85") and not g.accepts(b"\xff\x00\x90")


# -- UTF-8 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ranges, negated",
    [(((0x41, 0x5A),), False), (((0x80, 0x10FFFF),), False), (((0x7F, 0x800),), False), (((0x22, 0x22), (0x5C, 0x5C)), True), (((0xD000, 0xE100),), False)],
)
def test_utf8_sequences_cover_exactly_the_code_points(ranges, negated):
    sequences = utf8_sequences(ranges, negated)

    def matches(data: bytes) -> bool:
        return any(len(s) == len(data) and all(lo <= b <= hi for b, (lo, hi) in zip(data, s)) for s in sequences)

    def inside(cp: int) -> bool:
        hit = any(lo <= cp <= hi for lo, hi in ranges)
        return hit != negated

    for cp in list(range(0, 0x3000, 7)) + [0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        assert matches(chr(cp).encode("utf-8")) == inside(cp), hex(cp)


def test_no_dead_end_inside_a_character_that_leads_nowhere():
    # '.' followed by an empty class matches nothing; its first byte must not be offered.
    g = Grammar.from_regex(r"a|.[^\d\D]")
    automaton = g.automaton
    assert automaton.next_bytes(automaton.initial) == b"a"
    g = Grammar({"start": alt("x", seq(CharSet((), True), CharSet((), False)))})
    assert g.automaton.next_bytes(g.automaton.initial) == b"x"


def test_charset_never_accepts_half_a_character_or_surrogates():
    g = Grammar({"start": plus(CharSet(((0x22, 0x22),), True))})
    assert g.accepts("héllo 😀")
    assert not g.accepts("\"")
    assert not g.accepts(b"h\xc3")  # truncated two-byte sequence
    assert not g.accepts(b"\xed\xa0\x80")  # encoded surrogate U+D800
    assert not g.accepts(b"\xc0\xaf")  # overlong encoding
    automaton = g.automaton
    mid = automaton.step_bytes(automaton.initial, "é".encode()[:1])
    assert mid != DEAD and not automaton.is_accepting(mid)
    assert set(automaton.next_bytes(mid)) == set(range(0x80, 0xC0))


# -- recursion, left recursion, ambiguity ---------------------------------------------


def test_balanced_parentheses():
    g = Grammar({"start": Ref("p"), "p": star(seq("(", Ref("p"), ")"))})
    assert g.automaton._nfa.has_calls
    for text, expected in [("", True), ("()", True), ("(())()", True), ("((((((()))))))", True), ("(()", False), ("())", False), (")(", False)]:
        assert g.accepts(text) is expected, text


def test_deep_nesting():
    g = Grammar({"start": Ref("v"), "v": alt("x", seq("[", Ref("v"), "]"))})
    assert g.accepts("[" * 300 + "x" + "]" * 300)
    assert not g.accepts("[" * 300 + "x" + "]" * 299)


def test_left_recursion():
    rules = {"start": Ref("expr"), "expr": alt(seq(Ref("expr"), "+", Ref("term")), Ref("term")), "term": plus(DIGIT)}
    g = Grammar(rules)
    for text, expected in [("1", True), ("1+2", True), ("12+3+45", True), ("+", False), ("1+", False), ("1++2", False)]:
        assert g.accepts(text) is expected, text


def test_indirect_and_hidden_left_recursion():
    rules = {
        "start": Ref("a"),
        "a": alt(seq(Ref("b"), "x"), "y"),
        "b": seq(optional("z"), Ref("a")),
    }
    g = Grammar(rules)
    assert g.accepts("y") and g.accepts("yx") and g.accepts("zyx") and g.accepts("zzyxx")
    assert not g.accepts("zy") and not g.accepts("x")


def test_ambiguous_grammar():
    g = Grammar({"start": alt(seq(Ref("start"), Ref("start")), "a")})
    assert [g.accepts("a" * n) for n in range(8)] == [False] + [True] * 7
    assert not g.accepts("ab")


def test_nullable_recursive_rule():
    g = Grammar({"start": seq(Ref("s"), "!"), "s": alt(seq(Ref("s"), Ref("s")), "", "a")})
    assert g.accepts("!") and g.accepts("aaa!") and not g.accepts("aa")


def test_ambiguity_growth_is_bounded_by_an_error(monkeypatch):
    monkeypatch.setattr(automaton_module, "MAX_ITEMS_PER_CONFIG", 300)
    g = Grammar({"start": alt(seq(Ref("start"), Ref("start"), Ref("start")), "", "a")})
    automaton = g.automaton
    config = automaton.initial
    with pytest.raises(GrammarError, match="too ambiguous"):
        for _ in range(1000):
            config = automaton.step(config, ord("a"))


@pytest.mark.parametrize("use_native", [True, False])
def test_parse_state_count_is_bounded_by_an_error(monkeypatch, use_native):
    if use_native and native.states is None:
        pytest.skip("the native extension is not built")
    if not use_native:
        monkeypatch.setattr(native, "states", None)
    monkeypatch.setattr(automaton_module, "MAX_CONFIGS", 40)
    # Every further 'a' is a new parse state (the count so far is part of it). Built
    # directly: grammars share automata through a cache.
    automaton = ByteAutomaton(build_nfa({"start": repeat(literal("a"), 0, 1000)}, "start"))
    assert (automaton._native is not None) == use_native
    config = automaton.initial
    with pytest.raises(GrammarError, match="more than 40 parse states"):
        for _ in range(100):
            config = automaton.step(config, ord("a"))
    assert automaton.num_configs == 40


def _fresh_automaton(monkeypatch, use_native: bool, ebnf: str) -> ByteAutomaton:
    """An automaton built directly (grammars share automata through a cache), with or
    without the native extension."""
    if use_native and native.states is None:
        pytest.skip("the native extension is not built")
    if not use_native:
        monkeypatch.setattr(native, "states", None)
    rules, start = parse_ebnf(ebnf)
    automaton = ByteAutomaton(build_nfa(rules, start))
    assert (automaton._native is not None) == use_native
    return automaton


@pytest.mark.parametrize("use_native", [True, False])
def test_calls_with_the_same_continuations_share_the_states_inside(monkeypatch, use_native):
    # After 'a' and after 'b' the parse states differ (an optional 'q' may follow 'b'),
    # but both call `item` to return to the same ';': the states inside the call are one.
    automaton = _fresh_automaton(monkeypatch, use_native, """
        start ::= ('a' | 'b' 'q'?) item ';';
        item ::= 'x' item 'y' | 'z';
    """)

    def after(text: bytes) -> int:
        return automaton.step_bytes(automaton.initial, text)

    assert after(b"a") != after(b"b")
    assert after(b"ax") == after(b"bx") != DEAD
    assert after(b"axx") == after(b"bxx") == after(b"bqxx") != DEAD
    for text, accepted in [(b"axzy;", True), (b"bxxzyy;", True), (b"bqzy;", False), (b"axzy", False),
                           (b"axzyy;", False), (b"bqz;", True)]:
        end = after(text)
        assert (end != DEAD and automaton.is_accepting(end)) == accepted, text


@pytest.mark.parametrize("use_native", [True, False])
def test_calls_with_different_continuations_keep_their_states_apart(monkeypatch, use_native):
    automaton = _fresh_automaton(monkeypatch, use_native, """
        start ::= 'a' item ';' | 'b' item '!';
        item ::= 'x' item 'y' | 'z';
    """)
    ax, bx = automaton.step_bytes(automaton.initial, b"ax"), automaton.step_bytes(automaton.initial, b"bx")
    assert ax != bx
    assert automaton.is_accepting(automaton.step_bytes(ax, b"zy;"))
    assert automaton.step_bytes(ax, b"zy!") == DEAD
    assert automaton.is_accepting(automaton.step_bytes(bx, b"zy!"))
    assert automaton.step_bytes(bx, b"zy;") == DEAD


def test_json_like_recursive_grammar():
    text = r"""
    start ::= value;
    value ::= object | array | string | number | 'true' | 'false' | 'null';
    object ::= '{' (pair (',' pair)*)? '}';
    pair ::= string ':' value;
    array ::= '[' (value (',' value)*)? ']';
    string ::= '"' #'[^"\\\x00-\x1f]*' '"';
    number ::= #'-?(0|[1-9][0-9]*)(\.[0-9]+)?';
    """
    g = Grammar.from_ebnf(text)
    assert g.accepts('{"a":[1,2,{"b":null}],"c":"d"}')
    assert g.accepts("[[[[]]],[]]")
    assert not g.accepts('{"a":[1,2}')
    assert not g.accepts('{"a" 1}')


# -- vectorised stepping ---------------------------------------------------------------


def test_step_many_matches_step():
    g = Grammar({"start": Ref("p"), "p": star(alt(seq("(", Ref("p"), ")"), plus(DIGIT)))})
    automaton = g.automaton
    configs = [automaton.initial]
    for data in [b"(", b"((", b"(1", b"((2)", b"()"]:
        configs.append(automaton.step_bytes(automaton.initial, data))
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(configs), 500)
    config_array = np.array([configs[i] for i in pick] + [DEAD] * 5, dtype=np.int32)
    byte_array = rng.choice(np.frombuffer(b"()0123x", dtype=np.uint8), len(config_array)).astype(np.uint8)
    result = automaton.step_many(config_array, byte_array)
    assert result.dtype == np.int32
    expected = [automaton.step(int(c), int(b)) for c, b in zip(config_array, byte_array)]
    assert result.tolist() == expected
    assert (result[-5:] == DEAD).all()


def test_step_many_broadcasts_one_config_over_all_bytes():
    g = Grammar.from_regex("[a-c]x|dy")
    automaton = g.automaton
    result = automaton.step_many(np.int32(automaton.initial), np.arange(256, dtype=np.uint8))
    live = set(np.nonzero(result != DEAD)[0].tolist())
    assert live == set(b"abcd")
    assert automaton.next_bytes(automaton.initial) == b"abcd"


def test_queries_on_dead_and_accepting_configs():
    g = Grammar.from_regex("ab?")
    automaton = g.automaton
    a = automaton.step(automaton.initial, ord("a"))
    assert automaton.is_accepting(a) and automaton.can_continue(a)
    ab = automaton.step(a, ord("b"))
    assert automaton.is_accepting(ab) and not automaton.can_continue(ab)
    assert automaton.step(ab, ord("b")) == DEAD
    assert not automaton.is_accepting(DEAD) and not automaton.can_continue(DEAD)
    assert automaton.next_bytes(DEAD) == b""
    assert automaton.step(DEAD, 0) == DEAD


# -- any! and except! ------------------------------------------------------------------


def test_any_token_is_exactly_one_whole_token():
    g = Grammar({"start": seq("a", AnyToken(), "b")})
    assert g.automaton.has_token_hooks
    assert run_tokens(g, [b"a", b"xyz", b"b"]) is True
    assert run_tokens(g, [b"a", b"b", b"b"]) is True
    assert run_tokens(g, [b"a", b"xyz", b"b", b"b"]) == "dead"
    assert run_tokens(g, [b"ax", b"b"]) == "dead"  # any! cannot start in the middle of a token
    assert run_tokens(g, [b"a", b"xb"]) is False  # the token "xb" is the any!, 'b' still missing
    assert run_tokens(g, [b"a", b"b"]) is False


def test_after_any_token_only_at_a_boundary():
    g = Grammar({"start": seq("a", AnyToken(), "b")})
    automaton = g.automaton
    mid = automaton.step(automaton.initial, ord("a"))
    assert automaton.after_any_token(mid) == DEAD
    at_boundary = automaton.on_token_boundary(mid)
    after = automaton.after_any_token(at_boundary)
    assert after != DEAD and automaton.next_bytes(after) == b"b"
    assert automaton.min_bytes_to_accept(automaton.initial) == 3


def test_accepts_treats_any_as_a_non_empty_string():
    g = Grammar.from_ebnf("start ::= 'a' any! 'b';")
    assert g.accepts("axyzb") and g.accepts("abb")
    assert not g.accepts("ab")


def test_grammars_without_hooks_ignore_token_boundaries():
    g = Grammar.from_regex("a+")
    automaton = g.automaton
    assert not automaton.has_token_hooks
    config = automaton.step(automaton.initial, ord("a"))
    assert automaton.on_token_boundary(config) == config
    assert automaton.after_any_token(config) == DEAD


@pytest.mark.parametrize("limit", [None, 10])
def test_except_seed_examples(limit):
    g = Grammar({"start": seq(Except((b"\n\n",), limit), "\n\n")})
    assert g.accepts("114514\n\n")
    assert not g.accepts("114514")
    assert not g.accepts("114\n\n514\n\n")
    assert not g.accepts("114\n\n\n")  # '\n\n' would start inside the except! text
    assert g.accepts("\n\n")
    assert run_tokens(g, [b"114", b"514", b"\n\n"]) is True
    assert run_tokens(g, [b"114\n", b"\n\n"]) == "dead"
    assert run_tokens(g, [b"114", b"\n\n"]) is True


def test_except_token_limit_counts_tokens():
    g = Grammar({"start": seq(Except((b"\n\n",), 2), "\n\n")})
    assert run_tokens(g, [b"11", b"45", b"\n\n"]) is True
    assert run_tokens(g, [b"11", b"45", b"1", b"\n\n"]) == "dead"
    assert run_tokens(g, [b"11", b"45\n\n"]) is True  # the last text token also carries the terminator
    assert g.accepts("1145141919810\n\n")  # whole-string checks have no tokens


def test_except_several_strings_and_overlaps():
    g = Grammar({"start": seq(Except((b"*[", b"]*")), "]*")})
    assert g.accepts("abc]*") and g.accepts("a*b]c]*")
    assert not g.accepts("a*[b]*") and not g.accepts("ab]*c]*") and not g.accepts("ab]]*]*")


def test_except_exclusion_follows_text_out_of_a_recursive_rule():
    g = Grammar.from_ebnf("s ::= '<' t '>'; t ::= except!('>>') | '(' t ')';")
    assert g.automaton._nfa.has_calls
    assert g.accepts("<a>") and g.accepts("<(a>)>") and g.accepts("<((x))>")
    assert not g.accepts("<a>>")  # '>>' would start inside the except! text of t
    assert not g.accepts("<(a>>)>")


def test_except_text_is_valid_utf8():
    g = Grammar({"start": seq(Except((b"!",)), "!")})
    assert g.accepts("héllo 😀!")
    assert not g.accepts(b"h\xc3!")


# -- intersection -----------------------------------------------------------------------


def test_intersection_of_regular_expressions():
    g = Grammar({"start": Intersect((plus(ByteSet(((0x61, 0x7A),))), repeat(CharSet((), True), 2, 3)))})
    assert g.accepts("ab") and g.accepts("abc")
    assert not g.accepts("a") and not g.accepts("abcd") and not g.accepts("a1")


def test_intersection_never_leaves_a_dead_end():
    # "a" then digits, at most 4 characters, ending in 7: after "a777" nothing fits any more.
    g = Grammar({"start": seq("<", Intersect((seq("a", star(DIGIT)), repeat(CharSet((), True), 0, 4), seq(star(CharSet((), True)), "7"))), ">")})
    automaton = g.automaton
    config = automaton.step_bytes(automaton.initial, b"<a1")
    assert config != DEAD
    # Every byte offered leads somewhere that can still finish.
    for byte in automaton.next_bytes(config):
        following = automaton.step(config, byte)
        assert automaton.is_accepting(automaton.step_bytes(following, automaton.shortest_completion(following)))
    assert automaton.next_bytes(automaton.step_bytes(automaton.initial, b"<a12")) == b"7"
    assert g.accepts("<a7>") and g.accepts("<a127>") and not g.accepts("<a1237>") and not g.accepts("<a12>")


def test_intersections_of_the_same_operands_share_one_product():
    # A schema repeats a formatted string at many places: each place still checks its own
    # text, and they share one product (one liveness memo, one set of byte sets).
    short_word = Intersect((plus(ByteSet(((0x61, 0x7A),))), repeat(CharSet((), True), 2, 3)))
    other = Intersect((plus(DIGIT), repeat(CharSet((), True), 1, 2)))
    g = Grammar({"start": seq(short_word, "=", other, ";", short_word, "=", other)})
    assert len(g.automaton._nfa.intersections) == 2
    assert g.accepts("ab=1;xyz=42") and g.accepts("ab=12;cd=3")
    for wrong in ("a=1;xyz=42", "ab=1;wxyz=4", "ab=123;cd=3", "ab=1;cd=", "ab=1;c1=2"):
        assert not g.accepts(wrong), wrong


def test_intersection_moves_kept_are_bounded(monkeypatch):
    # Each product state's moves are memoised up to a limit; past it the memo starts over
    # and the answers stay the same.
    monkeypatch.setattr(automaton_module, "PRODUCT_MOVES_KEPT", 3)
    g = Grammar({"start": seq("<", Intersect((seq("a", star(DIGIT)), repeat(CharSet((), True), 0, 6))), ">")})
    product = g.automaton._nfa.intersections[0]
    for text, expected in (("<a12345>", True), ("<a123456>", False), ("<a>", True), ("<ab>", False), ("<a1>", True)):
        assert g.accepts(text) == expected, text
        assert len(product._move_memo) <= 3
    assert product._move_memo


@settings(max_examples=60, deadline=None)
@given(
    st.lists(regexes, min_size=2, max_size=3),
    st.booleans(),
    st.lists(st.text(alphabet=st.sampled_from(ALPHABET), max_size=8), min_size=1, max_size=6),
)
def test_intersection_liveness_found_along_a_witness_is_the_search_s(patterns, complement_last, texts):
    # A product state is live when some string completes every operand at once. Where one
    # operand's completion does, no breadth-first search of the product is made: both
    # ways must agree on every state the walks reach, and no offered byte may lead to a
    # state that cannot finish.
    operands = [regex_to_ir(ours) for ours, _ in patterns]
    if complement_last:
        operands[-1] = Complement(operands[-1])
    try:
        automaton = Grammar({"start": Intersect(tuple(operands))}).automaton
    except GrammarError:
        return  # the operands have no string in common
    product = automaton._nfa.intersections[0]
    for text in texts:
        config = automaton.initial
        for byte in text.encode():
            for offered in automaton.next_bytes(config):
                following = automaton.step(config, offered)
                assert automaton.is_accepting(automaton.step_bytes(following, automaton.shortest_completion(following)))
            config = automaton.step(config, byte)
            if config == DEAD:
                break
    searched = automaton_module._Product(product.parts)
    searched._completed_by_a_witness = lambda states: False
    assert product._live
    for states, live in list(product._live.items()):
        assert searched.live(states) == live, states


def test_empty_intersection_is_an_error_unless_avoidable():
    too_long = Intersect((repeat("a", 10, 10), repeat(CharSet((), True), 0, 5)))
    with pytest.raises(GrammarError, match="matches nothing"):
        Grammar({"start": seq("<", too_long, ">")}).automaton
    g = Grammar({"start": alt(seq("<", too_long, ">"), "ok")})
    assert g.accepts("ok") and not g.accepts("<")
    assert g.automaton.next_bytes(g.automaton.initial) == b"o"


def test_an_intersection_with_an_operand_that_matches_nothing_is_one_dead_branch():
    # The nested intersection of "1" and "2" matches nothing: its branch is dead, the
    # others stay (it used to leave the whole grammar matching nothing); the complement
    # of it is every string, so beside a digit class it lets every digit through.
    empty = Intersect((literal("1"), literal("2")))
    digit = chars([(0x30, 0x39)])
    rules = {"start": alt(seq("a", Intersect((digit, empty))), "b", seq("c", Intersect((digit, Complement(empty)))))}
    grammar = Grammar(rules)
    assert [grammar.accepts(text) for text in ("b", "a1", "a2", "c5", "c", "cx")] == [True, False, False, True, False, False]
    with pytest.raises(EmptyLanguageError):
        Grammar({"start": Intersect((digit, empty))}).automaton


def test_intersection_rejects_recursive_operands():
    rules = {"start": Intersect((Ref("p"), plus("("))), "p": alt("", seq("(", Ref("p"), ")"))}
    with pytest.raises(GrammarError, match="regular"):
        Grammar(rules).automaton


# -- shortest completions -----------------------------------------------------------------


def test_shortest_completion_through_recursion():
    g = Grammar({"start": Ref("v"), "v": alt("null", seq("[", Ref("v"), star(seq(",", Ref("v"))), "]"))})
    automaton = g.automaton
    config = automaton.step_bytes(automaton.initial, b"[[[nu")
    completion = automaton.shortest_completion(config)
    assert completion == b"ll]]]"
    assert automaton.min_bytes_to_accept(config) == 5
    assert automaton.is_accepting(automaton.step_bytes(config, completion))


def test_shortest_completion_respects_except_lookahead():
    g = Grammar({"start": seq(Except((b"ab",)), "b")})
    automaton = g.automaton
    config = automaton.step_bytes(automaton.initial, b"xa")
    # 'b' right away would complete "ab" that started inside the except! text.
    assert automaton.shortest_completion(config) not in (b"b",)
    assert automaton.is_accepting(automaton.step_bytes(config, automaton.shortest_completion(config)))
    assert automaton.min_bytes_to_accept(config) == 2


def test_shortest_completion_of_dead_is_an_error():
    automaton = Grammar.from_regex("a").automaton
    with pytest.raises(ValueError):
        automaton.shortest_completion(DEAD)
    with pytest.raises(ValueError):
        automaton.min_bytes_to_accept(DEAD)


def test_large_repetition_is_a_clear_error():
    # The inner repetition is counted; the outer one, whose body holds it, is unrolled.
    with pytest.raises(GrammarError, match="too large"):
        Grammar({"start": repeat(repeat(chars([(0, 0x10FFFF)]), 0, 1000), 0, 100_000)}).automaton


def test_counted_repetition_keeps_one_copy_of_its_body():
    small = Grammar({"start": repeat(chars([(0x61, 0x7A)]), 2, 8)}).automaton
    large = Grammar({"start": repeat(chars([(0x61, 0x7A)]), 2, 5000)}).automaton
    assert len(large._nfa.kind) == len(small._nfa.kind)
    grammar = Grammar({"start": seq(literal("<"), repeat(chars([(0x61, 0x7A), (0xE9, 0xE9)]), 3, 5000), literal(">"))})
    for count, expected in ((2, False), (3, True), (4999, True), (5000, True), (5001, False)):
        assert grammar.accepts("<" + "é" * count + ">") == expected, count


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_rows_make_new_partitions_without_falling_back_to_python(monkeypatch):
    # Rows scanning byte sets no row scanned before need a new partition of the bytes: the
    # native code has the automaton's partitions make it, instead of leaving the row to Python.
    # (Rows holding a call, as in the parentheses, are not plain: the general native way.)
    fallbacks = []
    monkeypatch.setattr(ByteAutomaton, "_compute_entries", lambda self, cid, values: fallbacks.append(cid))
    automaton = Grammar.from_ebnf("start ::= #'[a-f]+' ('-' #'[0-9]{2,4}' | '+' #'[x-z ]*' | '(' start ')')+ ;").automaton
    made_before = len(automaton._partitions)
    end = automaton.step_bytes(automaton.initial, b"cafe-2024(ab+xy z-77)+z-77")
    assert automaton.is_accepting(end) and not automaton.is_accepting(automaton.step_bytes(automaton.initial, b"cafe-1"))
    assert automaton.step_bytes(automaton.initial, b"cafe(a-1x") == DEAD
    assert not fallbacks and len(automaton._partitions) > made_before


def _byte_set_strategy():
    ranges = st.tuples(st.integers(0, 255), st.integers(0, 255)).map(
        lambda bounds: automaton_module._range_mask(min(bounds), max(bounds))
    )
    scattered = st.integers(1, 2**256 - 1)
    return st.one_of(ranges, scattered)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@settings(max_examples=300, deadline=None)
@given(st.lists(_byte_set_strategy(), max_size=70, unique=True))
def test_native_partition_is_pythons(byte_sets):
    # Rows look partitions up by sorted byte sets; the native split must number the parts
    # as Python's refinement does, so that both build the same configurations in the same order.
    masks = tuple(sorted(byte_sets))
    made = native.states.partition(masks)
    if len(masks) > 64:
        assert made is None
        return
    expected = automaton_module._partition(list(masks), {})
    found = automaton_module._Partitions()[masks]
    part_of_byte = automaton_module.parts_of_bytes(found)
    assert found[0] == expected[0]
    assert found[1] == expected[1]
    # Every byte a set holds is in a part whose members name that set, and only those.
    for index, mask in enumerate(masks):
        for value in range(256):
            held = part_of_byte[value] >= 0 and index in found[1][part_of_byte[value]]
            assert held == bool(mask >> value & 1)
    row = np.zeros(256, dtype=np.int32)
    for part, (target, expected_target) in enumerate(zip(found[2], expected[2], strict=True)):
        # Any index form will do, as long as it names the part's bytes.
        marked, expected_marked = row.copy(), row.copy()
        marked[target], expected_marked[expected_target] = 1, 1
        assert np.array_equal(marked, expected_marked) and np.array_equal(np.flatnonzero(marked), np.flatnonzero(part_of_byte == part))


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_partition_refuses_what_is_not_a_byte_set():
    for malformed, error in (([1, 2], TypeError), ((-1,), OverflowError), ((2**256,), OverflowError), (("a",), TypeError)):
        with pytest.raises(error):
            native.states.partition(malformed)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_state_functions_refuse_malformed_arguments():
    automaton = Grammar.from_ebnf("start ::= 'a'+ 'b';").automaton
    states, tables = native.states, automaton._native
    with pytest.raises(ValueError, match="different lengths"):
        states.nfa_tables([0], [1, 2], [0], [True], [], [], [], "pending", [0])
    with pytest.raises(ValueError, match="out-of-range"):
        states.nfa_tables([0], [5], [-1], [True], [], [], [], "pending", [2])
    with pytest.raises(ValueError):
        states.close(tables, frozenset({(10**6, None, None, None)}), True, False, automaton._callers, 100)
    with pytest.raises(ValueError, match="4-tuple"):
        states.plain_scans(tables, frozenset({("x",)}), 0)
    with pytest.raises(ValueError):
        states.close("not tables", frozenset(), True, False, [], 10)
    with pytest.raises(KeyError, match="no scanned items"):
        states.successor(tables, {}, [1], [0])
    with pytest.raises(IndexError, match="not an index"):
        states.successor(tables, {1: ((0, None, None, None),)}, [1], [5])
    with pytest.raises(TypeError, match="list or a tuple"):
        states.successor(tables, {1: ((0, None, None, None),)}, {1: 1}, [0])
    unbound = states.nfa_tables([0], [0], [-1], [True], [], [], [], "pending", [2])
    with pytest.raises(ValueError, match="not bound"):
        states.successor(unbound, {}, [], [])
    with pytest.raises(ValueError, match="not bound"):
        states.entry(unbound, 0, 0)
    with pytest.raises(IndexError, match="no such configuration"):
        states.entry(tables, automaton.num_configs, 0)
    with pytest.raises(IndexError, match="no such configuration"):
        states.entry(tables, automaton.initial, 256)
    with pytest.raises(ValueError, match="not bound"):
        states.fill_row(unbound, 0)
    with pytest.raises(IndexError, match="no such configuration"):
        states.fill_row(tables, -1)
    with pytest.raises(ValueError, match="not bound"):
        states.count_shifted(unbound, 0, 1)
    with pytest.raises(IndexError, match="no such configuration"):
        states.count_shifted(tables, automaton.num_configs, 1)
    with pytest.raises(IndexError, match="negative shift"):
        states.count_shifted(tables, automaton.initial, -1)
    # The automaton still works after the refusals.
    assert automaton.step_bytes(automaton.initial, b"aab") != DEAD


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_row_filled_for_some_bytes_fills_their_parts_only():
    # 'a', 'b' and 'c'-'f' lead to three configurations: asking for 'a' and 'd' fills the
    # parts of 'a' and of 'c'-'f', as stepping each byte would, and leaves 'b' unknown.
    grammar = "start ::= 'a' 'x' | 'b' 'y' | #'[c-f]' 'z' ;"
    automaton, stepped = Grammar.from_ebnf(grammar).automaton, Grammar.from_ebnf(grammar).automaton
    start = automaton.initial
    # The count is of the live entries filled: 'a' and 'c'-'f', not the unknown 'b'.
    assert native.states.fill_row(automaton._native, start, 256, b"ad") == 5
    row = automaton.transition_table[start]
    assert row[ord("b")] == automaton_module._UNKNOWN
    for value in b"acdef":
        assert automaton._items(row[value]) == stepped._items(stepped.step(stepped.initial, value))
    assert row[ord("g")] == DEAD and automaton.num_configs == 3


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_row_fill_names_the_only_live_byte():
    # The row filled, ``only_live`` answers with the one byte below ``end`` that leads
    # somewhere live, -1 where several or none do; ``only_next_byte`` reads it so.
    grammar = "start ::= 'a' 'x' | 'b' 'y' ;"
    automaton = Grammar.from_ebnf(grammar).automaton
    tables, start = automaton._native, automaton.initial
    assert native.states.fill_row(tables, start, 256, None, True) == -1
    assert native.states.fill_row(tables, start, ord("b"), None, True) == ord("a")
    assert native.states.fill_row(tables, start, ord("a"), None, True) == -1
    after_a = automaton.step(start, ord("a"))
    assert native.states.fill_row(tables, after_a, 256, None, True) == ord("x")
    assert automaton.only_next_byte(after_a) == ord("x") and automaton.only_next_byte(start) == -1
    assert automaton.next_bytes(after_a) == b"x"


def _rules_automaton(grammar: str, *, use_native: bool) -> ByteAutomaton:
    """An automaton of its own (grammars share automata through a cache), with or without
    the native extension."""
    rules = dict(Grammar.from_ebnf(grammar).rules)
    with pytest.MonkeyPatch.context() as patch:
        if not use_native:
            patch.setattr(native, "states", None)
        return ByteAutomaton(build_nfa(rules, "start"))


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_plain_parse_states_get_their_items_when_asked_and_are_interned_once():
    # No calls: items name no configuration, so two builds' items compare equal.
    grammar = "start ::= #'[a-c]{2,6}' ('x' | 'yz')+ ;"
    built = _rules_automaton(grammar, use_native=True)
    python_only = _rules_automaton(grammar, use_native=False)
    texts = [b"ab", b"abcx", b"aaaaayzx", b"ccyz"]
    ends = [(built.step_bytes(built.initial, text), python_only.step_bytes(python_only.initial, text)) for text in texts]
    made_plain = [config for config, _ in ends if built._configs[config] is None]
    assert made_plain, "the native code makes these configurations in plain form, without items"
    before = built.num_configs
    for config, expected in ends:
        # Interning the same items the general way finds the configuration made in plain
        # form (their objects are another build's: found by value, not through an index).
        assert built._intern(python_only._items(expected)) == config
        assert built._items(config) == python_only._items(expected)
        assert built.is_accepting(config) == python_only.is_accepting(expected)
    assert built.num_configs == before
    # Counted on in plain form: the configuration a counted character leads to.
    one, two = built.step_bytes(built.initial, b"a"), built.step_bytes(built.initial, b"ab")
    assert native.states.shifted_counts(built._native, two, built.step_bytes(two, b"c")) == [2]
    assert built.count_shift_span(two, built.step_bytes(two, b"c")) == 2
    assert built.count_shifted(two, 3) == built.step_bytes(two, b"bca")
    # Past the lower bound the items change, not only their counts.
    assert native.states.shifted_counts(built._native, one, two) == []
    with pytest.raises(IndexError, match="no such configuration"):
        native.states.items(built._native, built.num_configs)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_items_outside_calls_are_shared_between_parse_states():
    automaton = Grammar.from_ebnf("start ::= ('ab' | 'a' #'[b-c]' | 'x')+;").automaton
    automaton.step_bytes(automaton.initial, b"abacxab")
    every_items = [automaton._items(config) for config in range(automaton.num_configs)]
    by_value: dict = {}
    for items in every_items:
        for item in items:
            by_value.setdefault(item, set()).add(id(item))
    assert all(item[1:] == (None, None, None) for item in by_value)
    repeated = [ids for ids in by_value.values() if len(ids) > 1]
    assert not repeated and sum(item in items for items in every_items for item in by_value) > len(by_value)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_parse_states_leave_the_garbage_collector_only_when_they_cannot_hold_a_cycle():
    import gc

    automaton = Grammar.from_ebnf("start ::= v; v ::= '[' (v (',' v)*)? ']' | #'[a-z]+';").automaton
    automaton.step_bytes(automaton.initial, b"[[ab,[c]],[]]")
    configs = [automaton._items(config) for config in range(automaton.num_configs)]
    assert len(configs) > 5
    called = [items for items in configs if any(o is not None for _p, o, _w, _t in items)]
    assert called, "the grammar's recursion puts origins in the items"
    for items in configs:
        assert not gc.is_tracked(items)
        assert not any(gc.is_tracked(item) for item in items)
    assert not gc.is_tracked(native.states.frozen([1, "a", None]))

    class Holder:
        pass

    # A member the collector tracks could close a cycle through the set: it stays tracked.
    holder = Holder()
    keeps = native.states.frozen([holder, 3])
    holder.back = keeps
    assert gc.is_tracked(keeps)


def test_threads_building_one_automaton_agree_with_one_thread():
    import sys
    import threading

    rules = Grammar.from_ebnf(
        "start ::= v; v ::= '[' (v (',' v)*)? ']' | '{' (k ':' v (',' k ':' v)*)? '}' | #'[a-z]{1,3}' | #'[0-9]+';"
        "k ::= '\"' #'[a-z]*' '\"';"
    ).rules
    documents = [b'[a,{"x":[1,2]},bc]', b'{"k":{"j":[[]]},"i":77}', b"[[[[zz]]],[0,[q]]]", b'{"":[a,{}]}'] * 3
    nfa = build_nfa(dict(rules), "start")
    alone = ByteAutomaton(nfa)
    expected = [(alone.is_accepting(c), alone._items(c)) for c in (alone.step_bytes(alone.initial, d) for d in documents)]
    shared = ByteAutomaton(nfa)
    results: dict[int, list] = {}

    def run(number: int) -> None:
        order = documents[number:] + documents[:number]
        found = [(shared.is_accepting(c), shared._items(c)) for c in (shared.step_bytes(shared.initial, d) for d in order)]
        results[number] = found[len(documents) - number:] + found[: len(documents) - number]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert all(accepting for accepting, _items in expected)
    # Items name configurations by number, which differ between builds: compare acceptance
    # and item counts, and that every configuration of the shared automaton is interned once.
    for number in range(4):
        assert [(a, len(items)) for a, items in results[number]] == [(a, len(items)) for a, items in expected]
    every_items = [shared._items(config) for config in range(shared.num_configs)]
    assert len(set(every_items)) == shared.num_configs == len(shared._index)


def test_node_hashes_are_memoised_but_not_pickled():
    import pickle
    import subprocess
    import sys

    node = seq(alt(literal("ab"), chars([(0x61, 0x7A)])), star(DIGIT), Ref("x"))
    assert hash(node) == hash(node) and "_hash" in node.__dict__
    copied = pickle.loads(pickle.dumps(node))
    assert copied == node and "_hash" not in copied.__dict__
    # Another process hashes strings differently: a node from there must still be found by
    # value next to the same node built here.
    script = (
        "import pickle, sys\n"
        "from surecall.engine.ir import ByteSet, Ref, alt, chars, literal, seq, star\n"
        "fresh = seq(alt(literal('ab'), chars([(0x61, 0x7A)])), star(ByteSet(((0x30, 0x39),))), Ref('x'))\n"
        "print({pickle.loads(sys.stdin.buffer.read()): 'found'}.get(fresh))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(node), capture_output=True, check=True)
    assert result.stdout.split() == [b"found"]


def test_unbounded_repetition_counts_its_required_copies():
    few = Grammar({"start": repeat(chars([(0x61, 0x7A)]), 5, None)}).automaton
    many = Grammar({"start": repeat(chars([(0x61, 0x7A)]), 3000, None)}).automaton
    assert len(many._nfa.kind) == len(few._nfa.kind)
    grammar = Grammar({"start": seq(literal("<"), repeat(chars([(0x61, 0x7A), (0xE9, 0xE9)]), 300, None), literal(">"))})
    for count, expected in ((299, False), (300, True), (301, True), (1000, True)):
        assert grammar.accepts("<" + "é" * count + ">") == expected, count
    # Sized as counted too: a rule holding one is small enough to inline where it is used.
    twice = Grammar({"start": seq(Ref("long"), literal(","), Ref("long")), "long": repeat(chars([(0x61, 0x7A)]), 3000, None)})
    assert not twice.automaton._nfa.has_calls


_COUNTED_CHAR = alt(chars([(0x61, 0x7A), (0xE9, 0xE9), (0x65E5, 0x65E5)]), literal("\\n"))


@given(
    low=st.integers(0, 12),
    extra=st.integers(0, 40),
    then=st.sampled_from([None, "x", "second"]),
    count=st.integers(0, 50),
    char=st.sampled_from(["a", "é", "日", "\\n"]),
)
@settings(max_examples=60, deadline=None)
def test_a_counted_move_repeats_by_counting_within_its_span(low, extra, then, count, char):
    # After ``count`` characters of a counted repetition, one more leads to the same items
    # counted once more; within the span the automaton reports, every further character
    # leads where counting on says, across both repetitions' bounds when two follow.
    high = max(low + extra, 4)
    tail = {None: literal(">"), "x": seq(optional(literal("x")), literal(">")),
            "second": seq(repeat(_COUNTED_CHAR, 2, 9), literal(">"))}[then]
    automaton = Grammar({"start": seq(literal("<"), repeat(_COUNTED_CHAR, low, high), tail)}).automaton
    start = automaton.step_bytes(automaton.initial, b"<")
    unit = char.encode()
    config = automaton.step_bytes(start, unit * count)
    successor = automaton.step_bytes(config, unit)
    span = automaton.count_shift_span(config, successor)
    assert span >= 0
    for ahead in range(1, span + 1):
        assert automaton.count_shifted(config, ahead + 1) == automaton.step_bytes(config, unit * (ahead + 1))
    # Shifts add up: one made from a shifted configuration is the one counted on from its
    # origin (found among those made before, or made now).
    for first in range(1, span + 1):
        shifted = automaton.count_shifted(config, first)
        for then_by in (1, span + 1 - first):
            assert automaton.count_shifted(shifted, then_by) == automaton.step_bytes(config, unit * (first + then_by))
    if then is None and low <= count and count + 8 < high and successor != DEAD:
        # Well inside the bounds the chain counts on until the upper bound is near.
        assert span == high - count - 2


def test_a_rule_copied_too_often_is_called():
    # Below the inlining size limit, a rule is still called once its copies would add
    # more positions than INLINE_COPIES_LIMIT: the grammar does not grow with its uses.
    member = literal("v" * 2_000)
    for uses, called in ((20, False), (40, True)):
        rules = {"start": alt(*(seq(literal(f"k{i}:"), Ref("member")) for i in range(uses))), "member": member}
        automaton = Grammar(rules).automaton
        assert ("member" in automaton._nfa.rule_names) == called, uses
        assert Grammar(rules).accepts(f"k{uses - 1}:" + "v" * 2_000)
        assert not Grammar(rules).accepts(f"k{uses - 1}:" + "v" * 1_999)


@pytest.mark.parametrize(
    "grammar",
    [
        "start ::= 'a' 'x' | 'b' 'y' | #'[c-f]' 'z' | 'é' ;",
        "start ::= '{' #'\"[a-z]{0,3}\"' ':' ('1' | 'true' | '[]') '}' ;",
    ],
)
def test_live_ascii_count_is_the_count_of_the_whole_row(grammar):
    # Counted while only the ASCII half of the row is filled (natively, in the same call),
    # it must agree with the whole row computed afterwards.
    automaton = Grammar.from_ebnf(grammar).automaton
    pending, seen = [automaton.initial], set()
    while pending:
        config = pending.pop()
        if config in seen:
            continue
        seen.add(config)
        count = automaton.live_ascii_count(config)
        row = automaton.row(config)
        assert count == int(np.count_nonzero(row[:128] >= 0))
        pending.extend(int(after) for after in set(row.tolist()) if after >= 0)
    assert len(seen) > 5


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("dtype", [np.uint8, np.int64])
def test_native_successors_by_some_bytes_agree_with_stepping(dtype):
    # Filled natively part by part: each byte's successor holds the items stepping it on a
    # fresh automaton reaches, and bytes of parts not asked for stay unknown.
    grammar = "start ::= 'a' 'x' | 'b' 'y' | #'[c-f]' 'z' | #'[0-9]+' ;"
    automaton, stepped = Grammar.from_ebnf(grammar).automaton, Grammar.from_ebnf(grammar).automaton
    values = np.array([ord("d"), ord("a"), ord("7"), ord("q")], dtype=dtype)
    found = np.empty(len(values), dtype=np.int32)
    assert native.states.successors(automaton._native, automaton.initial, values, found) is True
    for value, after in zip(values.tolist(), found.tolist()):
        expected = stepped.step(stepped.initial, value)
        assert (after == DEAD) == (expected == DEAD)
        if after != DEAD:
            assert automaton._items(after) == stepped._items(expected)
    assert automaton.transition_table[automaton.initial][ord("b")] == automaton_module._UNKNOWN
    digit = automaton.step(automaton.initial, ord("7"))
    assert list(automaton.successors(digit, np.frombuffer(b"09a", dtype=np.uint8))) == [digit, digit, DEAD]


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_successors_refuses_bad_arguments():
    automaton = Grammar.from_ebnf("start ::= 'a' ;").automaton
    tables, out = automaton._native, np.empty(1, dtype=np.int32)
    with pytest.raises(IndexError, match="no such configuration"):
        native.states.successors(tables, automaton.num_configs, np.zeros(1, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="not a byte"):
        native.states.successors(tables, automaton.initial, np.array([256], dtype=np.int64), out)
    with pytest.raises(ValueError, match="uint8 or int64"):
        native.states.successors(tables, automaton.initial, np.zeros(2, dtype=np.uint8), out)
    with pytest.raises(ValueError, match="uint8 or int64"):
        native.states.successors(tables, automaton.initial, np.zeros(1, dtype=np.int32), out)


class _FixedRows:
    """An intersection operand whose every state has the same row."""

    initial = 0

    def __init__(self, row: np.ndarray) -> None:
        self._row = row

    def row(self, state: int) -> np.ndarray:
        return self._row


_row_values = st.sampled_from([DEAD, 0, 1, 2, 7, automaton_module.MAX_CONFIGS])


@pytest.mark.skipif(native.product_moves is None, reason="the native extension is not built")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_row_values, min_size=256, max_size=256), min_size=1, max_size=5))
def test_native_product_moves_are_pythons(rows):
    # The liveness search and the shortest completions read the successors in this order:
    # the native moves must number them as the numpy path does.
    arrays = tuple(np.array(row, dtype=np.int32) for row in rows)
    states = tuple(0 for _ in arrays)
    native_index, native_successors = automaton_module._Product(tuple(map(_FixedRows, arrays)))._moves(states)
    kept = native.product_moves
    automaton_module.native.product_moves = None
    try:
        index, successors = automaton_module._Product(tuple(map(_FixedRows, arrays)))._moves(states)
    finally:
        automaton_module.native.product_moves = kept
    assert native_successors == successors
    assert native_index.tolist() == index.tolist()


@pytest.mark.skipif(native.product_moves is None, reason="the native extension is not built")
def test_native_product_moves_refuse_malformed_rows():
    row, index = np.zeros(256, dtype=np.int32), np.empty(256, dtype=np.int16)
    for rows, out in (([], index), ([row[:255]], index), ([row], np.empty(255, dtype=np.int16)), ([row] * 65, index)):
        with pytest.raises(ValueError):
            native.product_moves(rows, out)
    with pytest.raises(TypeError):
        native.product_moves(5, index)


def test_long_chains_of_inlined_rules_compile_as_calls():
    # One rule per position, each naming the next (an object's optional properties in
    # order): inlining follows such a chain recursively, so past a depth rules are called.
    length = 600
    rules = "\n".join(f"r{i} ::= ('<{i}>')? r{i + 1};" for i in range(length))
    grammar = Grammar.from_ebnf(f"start ::= r0;\n{rules}\nr{length} ::= '.';")
    assert grammar.accepts("<0><7><599>.") and grammar.accepts(".")
    assert grammar.accepts("".join(f"<{i}>" for i in range(length)) + ".")
    assert not grammar.accepts("<7><0>.") and not grammar.accepts("<600>.") and not grammar.accepts("<3><3>.")
    assert len(automaton_module._rules_cutting_deep_chains(
        {f"r{i}": Ref(f"r{i + 1}") for i in range(length)} | {f"r{length}": Bytes(b".")},
        {f"r{i}": [f"r{i + 1}"] for i in range(length)} | {f"r{length}": []}, set(),
    )) == (length + 1) // (automaton_module.MAX_INLINE_DEPTH + 1)


def test_products_of_more_operands_than_the_native_moves_take_are_stepped_in_numpy():
    count = automaton_module.NATIVE_PRODUCT_OPERANDS + 6
    rows = [np.full(256, DEAD, dtype=np.int32) for _ in range(count)]
    for i, row in enumerate(rows):
        row[ord("a")] = i % 3
        row[ord("b")] = 1
    index, successors = automaton_module._Product(tuple(map(_FixedRows, rows)))._moves((0,) * count)
    assert [successors[index[ord(c)]] for c in "ab"] == [tuple(i % 3 for i in range(count)), (1,) * count]
    assert (index[[v for v in range(256) if v not in b"ab"]] == -1).all()
