"""The EBNF dialect of the engine-design seed: parsing, errors and printing back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine.errors import GrammarError, UnsupportedRegexError
from surecall.engine.grammar import Grammar
from surecall.engine.ir import AnyToken, Bytes, Except, Ref, Repeat, alt, chars, repeat, seq
from surecall.engine.ebnf import parse_ebnf

SEED_EXAMPLES = [
    # (grammar text, accepted, rejected) -- the examples of the engine-design seed
    ("digits ::= #'[0-9]'; (*A nonterminal that accepts one digit*)\n(*Yes, this weird thing is a comment in ebnf*)", ["7"], ["", "12", "a"]),
    ("digit ::= #'[0-9]';\ndigits ::= digit+; (*one or more digits*)", ["1"], ["12"]),  # first rule is the start
    ("start ::= digits;\ndigit ::= #'[0-9]';\ndigits ::= digit+;", ["1", "0123"], [""]),
    ("aaa ::= 'a'*; (*zero or more 'a'*)", ["", "a", "aaaa"], ["b", "ab"]),
    ("aaa ::= 'a'?; (*zero or one 'a'*)", ["", "a"], ["aa"]),
    ("start ::= any!;(*Accept any token*)", ["x", "anything at all"], [""]),
    (
        "start ::= except!('\\n\\n')'\\n\\n';(*Accept a text sequence\n where the only '\\n\\n' is at the end*)",
        ["114514\n\n"],
        ["114514", "114\n\n514\n\n"],
    ),
    ("start ::= except!('\\n\\n', 10)'\\n\\n';", ["114514\n\n"], ["114514", "114\n\n514\n\n"]),
    (
        "end ::= '\\n\\n'; (*The nonterminal in except!,\n after full expansion,\n must only contain alternation of strings.*)\n"
        "start ::= except!(end)end;",
        ["114514\n\n"],
        ["114514", "114\n\n514\n\n"],
    ),
]


@pytest.mark.parametrize("text, good, bad", SEED_EXAMPLES)
def test_seed_examples(text, good, bad):
    grammar = Grammar.from_ebnf(text)
    for sample in good:
        assert grammar.accepts(sample), sample
    for sample in bad:
        assert not grammar.accepts(sample), sample


def test_start_rule_is_start_else_first():
    rules, start = parse_ebnf("a ::= 'x'; start ::= 'y';")
    assert start == "start"
    rules, start = parse_ebnf("b ::= 'x' c; c ::= 'y';")
    assert start == "b"
    assert Grammar.from_ebnf("b ::= 'x' c; c ::= 'y';").accepts("xy")


def test_operators_and_repetition_counts():
    grammar = Grammar.from_ebnf("start ::= 'a'{2,3} \"b\"{1,} ('c' | 'd'){2} 'e'{0,} , 'f'{1};")
    assert grammar.accepts("aabcdf") and grammar.accepts("aaabbbddeeef")
    assert not grammar.accepts("abcdf") and not grammar.accepts("aabcf") and not grammar.accepts("aaaabcdf")


def test_literal_escapes():
    rules, _ = parse_ebnf(r"""start ::= '\n\t\r\\\'' "\"" '\u00e9\u{1F600}\U0001F600' '\x80\xff' 'é';""")
    assert rules["start"] == Bytes(b"\n\t\r\\'\"" + "é😀😀".encode() + b"\x80\xff" + "é".encode())


def test_regex_terminals_with_both_quotes():
    grammar = Grammar.from_ebnf("""start ::= #"[a-z]+'" #'\\d+\\'';""")
    assert grammar.accepts("abc'12'") and not grammar.accepts("abc'12")


def test_comments_and_equals_sign():
    grammar = Grammar.from_ebnf("(* leading *) start = 'a' (* inside *) | 'b' ; (* trailing *)")
    assert grammar.accepts("a") and grammar.accepts("b") and not grammar.accepts("ab")


def test_parsed_ir_shapes():
    rules, _ = parse_ebnf("start ::= x* any! except!('a', 'b', 3) ('p' | 'q')?; x ::= 'x';")
    assert rules["start"] == seq(repeat(Ref("x"), 0, None), AnyToken(), Except((b"a", b"b"), 3), repeat(alt("p", "q"), 0, 1))


def test_except_rule_expands_to_strings():
    rules, _ = parse_ebnf("stop ::= 'END' | nl nl; nl ::= '\\n'; start ::= except!(stop, 4) stop;")
    body = rules["start"]
    assert body.items[0] == Except((b"\n\n", b"END"), 4)


def test_left_recursive_and_ambiguous_grammars():
    grammar = Grammar.from_ebnf("expr ::= expr '+' term | expr '*' term | term; term ::= #'[0-9]+' | '(' expr ')';")
    assert grammar.accepts("1+2*(3+4)") and not grammar.accepts("1+(2")
    grammar = Grammar.from_ebnf("s ::= s s | 'a' | '(' s ')';")
    assert grammar.accepts("a(aa)a") and not grammar.accepts("()")


def test_balanced_parentheses_grammar():
    grammar = Grammar.from_ebnf("start ::= ('(' start ')')*;")
    assert grammar.accepts("(()())()") and not grammar.accepts("(()")


def test_utf8_literals_and_classes():
    grammar = Grammar.from_ebnf("start ::= 'ü' #'[α-ω]+' '😀';")
    assert grammar.accepts("üαβγ😀") and not grammar.accepts("üabc😀")


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message, line, column, rule",
    [
        ("start ::= 'a'", "expected ';'", 1, 14, "start"),
        ("start ::= 'a';\nstart ::= 'b';", "defined twice", 2, 1, "start"),
        ("start ::= 'a' foo;", "undefined rule 'foo'", 1, 15, "start"),
        ("start ::= a;\na ::= a 'x';", "can never derive", 2, 1, "a"),
        ("start ::= ('a' | 'b';", "expected ')'", 1, 11, "start"),
        ("start ::= 'a'\n  | 'b\\q';", "unknown escape", 2, 7, "start"),
        ("start ::=\n  'a' #'x(?=y)';", "lookahead", 2, 10, "start"),
        ("s ::= 'ok';\nt ::= #'[a';", "unterminated character class", 2, 9, "t"),
        ("x ::= except!(y);\ny ::= 'a'*;", "alternation of non-empty strings", 1, 15, "x"),
        ("s ::= 'a'{3,1};", "bad repetition bounds", 1, 10, "s"),
        ("s ::= 'abc", "unterminated string", 1, 7, "s"),
        ("s ::= 'a'; (* open", "unterminated comment", 1, 12, None),
        ("s ::= oops!;", "unknown special", 1, 7, "s"),
        ("s ::= except!('');", "must not be empty", 1, 15, "s"),
        ("s 'a';", "expected '::='", 1, 3, "s"),
        ("", "no rules", 1, 1, None),
        ("s ::= 'a' );", "unbalanced ')'", 1, 11, "s"),
    ],
)
def test_errors_name_line_column_and_rule(text, message, line, column, rule):
    with pytest.raises(GrammarError) as info:
        Grammar.from_ebnf(text)
    error = info.value
    assert isinstance(error, ValueError)
    assert message in str(error)
    assert (error.line, error.column, error.rule) == (line, column, rule)
    assert f"line {line}" in str(error) and f"column {column}" in str(error)
    if rule is not None:
        assert repr(rule) in str(error)


def test_unsupported_regex_in_ebnf_keeps_its_type():
    with pytest.raises(UnsupportedRegexError):
        Grammar.from_ebnf(r"s ::= #'(a)\1';")


# -- printing ---------------------------------------------------------------------------

ROUND_TRIP_GRAMMARS = [text for text, _good, _bad in SEED_EXAMPLES] + [
    "expr ::= expr '+' term | term; term ::= #'[0-9]+' | '(' expr ')';",
    "start ::= 'a'{2,3} ('b' | 'c'){1,} 'd'? any! except!('x', 'y\\n', 2) ('q' 'r')*;",
    "start ::= '\\'quoted\\' \\\\ \\u{0}\\t' #'[^\"\\\\]';",
    "start ::= intersect!(#'[a-z]+', #'.{2,4}');",
    "start ::= intersect!('a' #'[0-9]'* | 'b', #'.{2,4}' , ('x', 'y') | #'.*') 'z';",
    "start ::= intersect!(#'[a-z]{1,3}', complement!('ab' | 'abc')) ';';",
    "start ::= '' | 'é😀' '\\xff';",
]


@pytest.mark.parametrize("text", ROUND_TRIP_GRAMMARS)
def test_to_ebnf_round_trips(text):
    grammar = Grammar.from_ebnf(text)
    printed = grammar.to_ebnf()
    again = Grammar.from_ebnf(printed)
    assert again == grammar
    assert again.to_ebnf() == printed


def test_commas_separate_intersect_arguments():
    grammar = Grammar.from_ebnf("start ::= intersect!('a' #'[0-9]'*, #'.{0,3}') , '!';")
    assert grammar.accepts("a12!") and not grammar.accepts("a123!") and not grammar.accepts("a12")


def test_complement_removes_its_strings_from_an_intersection():
    grammar = Grammar.from_ebnf("start ::= intersect!(#'[a-z]{1,3}', complement!('ab' | #'x.*'));")
    accepted = ["a", "abc", "ba", "zz"]
    rejected = ["ab", "x", "xyz", "", "abcd"]
    assert [grammar.accepts(t) for t in accepted + rejected] == [True] * 4 + [False] * 5


@pytest.mark.parametrize(
    "text",
    [
        "start ::= complement!('a');",
        "start ::= intersect!('a', ('b' complement!('c')));",
        "start ::= 'x' complement!('a');",
    ],
)
def test_complement_outside_an_intersection_argument_is_an_error_with_its_place(text):
    with pytest.raises(GrammarError, match=r"complement! is only allowed as an argument of intersect!.*line 1, column"):
        Grammar.from_ebnf(text)


def test_an_intersection_its_complement_empties_is_an_error_at_build_time():
    with pytest.raises(GrammarError, match="matches nothing"):
        Grammar.from_ebnf("start ::= intersect!('ab' | 'cd', complement!('ab' | 'cd'));").automaton


def test_to_ebnf_renames_awkward_rule_names_and_keeps_the_start():
    rules = {
        "#/$defs/Item": seq("[", Ref("start"), "]"),
        "start": alt("x", Ref("#/$defs/Item")),
        "top": seq(Ref("#/$defs/Item"), "!"),
    }
    grammar = Grammar(rules, start="top")
    again = Grammar.from_ebnf(grammar.to_ebnf())
    for text in ["[x]!", "[[x]]!", "x!", "[x]"]:
        assert again.accepts(text) == grammar.accepts(text), text
    assert grammar.accepts("[[x]]!") and not grammar.accepts("x!")


def test_to_ebnf_prints_byte_sets_and_charsets():
    from surecall.engine.ir import ByteSet

    grammar = Grammar({"start": seq(ByteSet(((0x41, 0x43), (0x80, 0x82))), chars([(0x3B1, 0x3C9)], negated=True), Repeat(Bytes(b"z"), 2, 5))})
    again = Grammar.from_ebnf(grammar.to_ebnf())
    for sample in [b"A!zz", b"\x81xzzzzz", b"C\xce\xb1zz", b"Dxzz", b"A!z"]:
        assert again.accepts(sample) == grammar.accepts(sample), sample
    assert grammar.accepts(b"\x81xzzzzz") and not grammar.accepts(b"C\xce\xb1zz")


EBNF_PIECES = ["start", "a", " ::= ", "=", ";", "'x'", '"y"', "#'[a-c]+'", "#'('", "|", "(", ")", "*", "+", "?",
               "{2}", "{1,3}", "{2,}", "{", "}", ",", "any!", "except!(", "'\\n'", "1", "(*c*)", "(*", "'", "\\", "é", "\n"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(EBNF_PIECES), max_size=14))
def test_arbitrary_text_parses_or_raises_a_located_grammar_error(pieces):
    text = "".join(pieces)
    try:
        grammar = Grammar.from_ebnf(text)
    except GrammarError as error:
        assert error.line is not None or error.rule is not None, str(error)
        return
    grammar.accepts("x")


def test_groups_nested_past_the_limit_are_an_error_not_a_stack_overflow():
    from surecall.engine.ir import MAX_GROUP_DEPTH

    def nested(depth: int) -> str:
        return "start ::= " + "('a' " * depth + ")" * depth + ";"

    assert Grammar.from_ebnf(nested(MAX_GROUP_DEPTH)).accepts("a" * MAX_GROUP_DEPTH)
    for depth in (MAX_GROUP_DEPTH + 1, 5000):
        with pytest.raises(GrammarError, match="nested more than") as info:
            Grammar.from_ebnf(nested(depth))
        assert info.value.line == 1 and info.value.rule == "start"


def test_a_grammar_nesting_deeper_than_the_build_recurses_is_a_grammar_error():
    for at_least in (0, 1):  # an optional repetition is productive without looking inside
        node = Bytes(b"a")
        for _ in range(5000):
            node = Repeat(alt(node, Bytes(b"c")), at_least, 2)
        with pytest.raises(GrammarError, match="nests too deeply"):
            Grammar({"start": node}).accepts("a")
