"""Properties of compiled grammars: random walks, shortest completions, validation and caching."""

from __future__ import annotations

from collections import Counter

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from surecall.engine import automaton as automaton_module
from surecall.engine import native
from surecall.engine.automaton import _UNKNOWN, DEAD, ByteAutomaton, build_nfa
from surecall.engine.errors import GrammarError
from surecall.engine.grammar import AUTOMATON_CACHE_SIZE, Grammar, clear_automaton_cache
from surecall.engine.matcher import Matcher, Status
from surecall.engine.ir import NOTHING, Alt, AnyToken, Bytes, ByteSet, Complement, Except, Intersect, Ref, Repeat, Seq, alt, literal, seq, star
from surecall.engine.regex import regex_to_ir

_spec = importlib.util.spec_from_file_location("regex_strategies", Path(__file__).with_name("regex_strategies.py"))
regex_strategies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regex_strategies)

GRAMMARS = {
    "json": r"""
        start ::= ws value ws;
        value ::= object | array | string | number | 'true' | 'false' | 'null';
        object ::= '{' ws (pair (ws ',' ws pair)*)? ws '}';
        pair ::= string ws ':' ws value;
        array ::= '[' ws (value (ws ',' ws value)*)? ws ']';
        string ::= '"' (#'[^"\\\x00-\x1f]' | '\\' #'["\\/bfnrt]' | '\\u' #'[0-9a-fA-F]{4}')* '"';
        number ::= '-'? ('0' | #'[1-9][0-9]*') ('.' #'[0-9]+')? (#'[eE][+-]?[0-9]+')?;
        ws ::= #'[ \n]{0,2}';
    """,
    "parens": "start ::= ('(' start ')' | '[' start ']')*;",
    "left_recursion": "expr ::= expr '+' term | expr '-' term | term; term ::= term '*' atom | atom; atom ::= #'[0-9]+' | '(' expr ')';",
    "ambiguous": "s ::= s s | 'a' | 'b' s 'c';",
    "except": "start ::= (except!('*[', ']*') '*[' except!(']*') ']*')+;",
    # An exclusion still pending (the text ends in 'a') when a recursive rule is called.
    "except_across_calls": "start ::= (except!('ab') n)+; n ::= m | 'c'; m ::= 'b' | '(' n ')';",
    "utf8": "start ::= #'[α-ω]+' ('·' #'[^a-z]')* '!';",
    "hidden_left_recursion": "a ::= b 'x' | 'y'; b ::= 'z'? a;",
    "complement": "start ::= intersect!(#'[a-c]{0,6}', complement!(#'.*ab.*' | 'c'+)) ('-' start)?;",
    # Counted repetitions (at least COUNTER_MIN copies: an iteration counter, not unrolled),
    # inside a called rule, with multi-byte characters and required copies counted.
    "counted": "start ::= (item ',')* item; item ::= '\"' #'[a-cé]{2,6}' '\"' | '[' start ']' | #'x{4,}' | #'[0-9]{0,5}';",
}


def random_walk(grammar: Grammar, choices: list[int], max_steps: int = 60) -> bytes:
    """Walk from the initial configuration choosing among ``next_bytes``, stopping where ``choices`` says."""
    automaton = grammar.automaton
    config = automaton.initial
    out = bytearray()
    for step, choice in enumerate(choices[:max_steps]):
        assert config != DEAD
        options = automaton.next_bytes(config)
        if automaton.is_accepting(config) and (not options or choice % 5 == 0):
            break
        assert options, "a live configuration that is not accepting must have a way forward"
        byte = options[choice % len(options)]
        config = automaton.step(config, byte)
        assert config != DEAD, "next_bytes offered a byte that kills the configuration"
        out.append(byte)
    completion = automaton.shortest_completion(config)
    assert len(completion) == automaton.min_bytes_to_accept(config)
    final = automaton.step_bytes(config, completion)
    assert automaton.is_accepting(final)
    return bytes(out) + completion


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.lists(st.integers(0, 1_000), max_size=60))
def test_random_walks_end_in_accepted_text(name, choices):
    grammar = Grammar.from_ebnf(GRAMMARS[name])
    text = random_walk(grammar, choices)
    assert grammar.accepts(text)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.lists(st.integers(0, 1_000), max_size=40))
def test_questions_answered_from_the_ascii_part_of_a_row_agree_with_the_whole_row(name, choices):
    # ``only_next_byte`` and ``can_continue`` read the ASCII part of a row first; asked of
    # a fresh automaton (rows not computed yet), they must answer as the whole row does.
    clear_automaton_cache()
    asked = Grammar.from_ebnf(GRAMMARS[name]).automaton
    clear_automaton_cache()
    reference = Grammar.from_ebnf(GRAMMARS[name]).automaton
    assert asked is not reference
    config, reference_config = asked.initial, reference.initial
    for choice in choices:
        following = reference.next_bytes(reference_config)
        assert asked.only_next_byte(config) == (following[0] if len(following) == 1 else -1)
        continues = bool(following) or reference.after_any_token(reference_config) != DEAD
        assert asked.can_continue(config) == continues
        if not following:
            break
        byte = following[choice % len(following)]
        config, reference_config = asked.step(config, byte), reference.step(reference_config, byte)
        assert config != DEAD


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=regex_strategies.regexes, choices=st.lists(st.integers(0, 1_000), max_size=30))
def test_random_walks_on_random_regexes(pair, choices):
    import re

    ours, python = pair
    try:
        grammar = Grammar.from_regex(ours)
    except GrammarError:
        reject()
    text = random_walk(grammar, choices)
    assert grammar.accepts(text)
    assert re.fullmatch(python, text.decode("utf-8"), re.ASCII), (ours, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kept=regex_strategies.regexes,
    removed=regex_strategies.regexes,
    texts=st.lists(st.text(alphabet=regex_strategies.ALPHABET, max_size=6), max_size=8),
    choices=st.lists(st.integers(0, 1_000), max_size=20),
)
def test_a_complement_removes_exactly_the_strings_it_matches(kept, removed, texts, choices):
    import re

    try:
        grammar = Grammar({"start": Intersect((regex_to_ir(kept[0]), Complement(regex_to_ir(removed[0]))))})
        grammar.automaton
    except GrammarError:
        reject()  # unsupported syntax, or nothing is left (every kept string is removed)

    def expected(text: str) -> bool:
        return bool(re.fullmatch(kept[1], text, re.ASCII)) and not re.fullmatch(removed[1], text, re.ASCII)

    for text in texts:
        assert grammar.accepts(text) == expected(text), (kept, removed, text)
    walked = random_walk(grammar, choices)
    assert expected(walked.decode("utf-8")), (kept, removed, walked)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.lists(st.integers(0, 1_000), max_size=40), cut=st.integers(0, 40))
def test_shortest_completion_is_shortest_on_a_prefix(choices, cut):
    """Compare with a breadth-first search over bytes for a grammar with competing completions."""
    grammar = Grammar.from_ebnf(GRAMMARS["left_recursion"])
    automaton = grammar.automaton
    text = random_walk(grammar, choices)
    config = automaton.step_bytes(automaton.initial, text[: min(cut, len(text))])
    frontier = {config}
    depth = 0
    while not any(automaton.is_accepting(c) for c in frontier):
        frontier = {automaton.step(c, b) for c in frontier for b in automaton.next_bytes(c)}
        depth += 1
    assert automaton.min_bytes_to_accept(config) == depth


def test_next_bytes_and_can_continue_agree_with_step():
    grammar = Grammar.from_ebnf(GRAMMARS["json"])
    automaton = grammar.automaton
    config = automaton.step_bytes(automaton.initial, b'{"key": [1, tr')
    assert automaton.next_bytes(config) == b"u"
    live = [b for b in range(256) if automaton.step(config, b) != DEAD]
    assert bytes(live) == automaton.next_bytes(config)
    assert automaton.can_continue(config) and not automaton.is_accepting(config)
    done = automaton.step_bytes(automaton.initial, b"[1]")
    assert automaton.is_accepting(done) and automaton.can_continue(done)  # trailing whitespace may follow
    assert automaton.shortest_completion(config) == b"ue]}"


def test_forced_literal_path_is_one_byte_at_a_time():
    grammar = Grammar({"start": seq("{\"name\": \"", star(ByteSet(((0x61, 0x7A),))), "\"}")})
    automaton = grammar.automaton
    config = automaton.initial
    forced = bytearray()
    while len(automaton.next_bytes(config)) == 1:
        forced += automaton.next_bytes(config)
        config = automaton.step(config, forced[-1])
    assert bytes(forced) == b'{"name": "'


# -- random context-free grammars against a reference recogniser --------------------------

RULE_NAMES = ["r0", "r1", "r2"]


def _reference_ends(node, text: bytes, i: int, table: dict) -> set[int]:
    """End positions j such that ``node`` derives ``text[i:j]``, given rule results so far."""
    t = type(node)
    if t is Bytes:
        return {i + len(node.value)} if text.startswith(node.value, i) else set()
    if t is ByteSet:
        return {i + 1} if i < len(text) and any(lo <= text[i] <= hi for lo, hi in node.ranges) else set()
    if t is Seq:
        current = {i}
        for item in node.items:
            current = {j for k in current for j in _reference_ends(item, text, k, table)}
        return current
    if t is Alt:
        return {j for item in node.items for j in _reference_ends(item, text, i, table)}
    if t is Repeat:
        result = {i} if node.min == 0 else set()
        current, count = {i}, 0
        while current and (node.max is None or count < node.max):
            current = {j for k in current for j in _reference_ends(node.item, text, k, table)}
            count += 1
            if count >= node.min:
                new = current - result
                result |= current
                if node.max is None and not new:
                    break
        return result
    if t is Ref:
        return table.get((node.name, i), set())
    raise AssertionError(node)


def reference_accepts(rules: dict, start: str, text: bytes) -> bool:
    """Least fixpoint over (rule, position): handles left recursion and ambiguity by construction."""
    table: dict = {}
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            for i in range(len(text) + 1):
                ends = _reference_ends(body, text, i, table)
                if not ends <= table.get((name, i), set()):
                    table[(name, i)] = table.get((name, i), set()) | ends
                    changed = True
    return len(text) in table.get((start, 0), set())


terminals = st.sampled_from([literal("a"), literal("b"), literal("ab"), literal(""), ByteSet(((0x61, 0x62),))])
refs = st.sampled_from([Ref(name) for name in RULE_NAMES])
bodies = st.recursive(
    st.one_of(terminals, refs),
    lambda children: st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(children, min_size=2, max_size=3).map(lambda items: Alt(tuple(items))),
        st.tuples(children, st.sampled_from([(0, None), (1, None), (0, 1), (2, 3), (0, 4), (4, 5), (1, 6)])).map(lambda x: Repeat(x[0], *x[1])),
    ),
    max_leaves=5,
)


def _with_twin_rules(rules: dict) -> dict:
    """``rules`` with twins: ``t1`` is ``r1`` written again, ``t2`` is ``r2`` naming ``t1``
    where ``r2`` names ``r1`` (equal once ``t1`` merges into ``r1``), and ``r0`` names the
    twins instead (see ``automaton.merge_identical_rules``)."""
    twins = dict(rules)
    twins["t1"] = automaton_module._with_references_renamed(rules["r1"], {}, {})
    twins["t2"] = automaton_module._with_references_renamed(rules["r2"], {"r1": "t1"}, {})
    twins["r0"] = automaton_module._with_references_renamed(rules["r0"], {"r1": "t1", "r2": "t2"}, {})
    return twins


@pytest.mark.parametrize("twins", [False, True])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule_bodies=st.lists(bodies, min_size=len(RULE_NAMES), max_size=len(RULE_NAMES)),
    texts=st.lists(st.text(alphabet="ab", max_size=8), min_size=1, max_size=6),
)
def test_random_grammars_agree_with_a_reference_recogniser(twins, rule_bodies, texts):
    rules = dict(zip(RULE_NAMES, rule_bodies))
    if twins:
        rules = _with_twin_rules(rules)
    try:
        grammar = Grammar(rules, "r0")
    except GrammarError:
        reject()
    for text in texts:
        data = text.encode()
        assert grammar.accepts(data) == reference_accepts(rules, "r0", data), (rules, text)


def _items_along(automaton, data: bytes) -> list:
    """The item sets of the configurations along ``data`` (ids can differ between builds)."""
    config, found = automaton.initial, [automaton._items(automaton.initial)]
    for value in data:
        config = automaton.step(config, value)
        found.append(None if config == DEAD else automaton._items(config))
        if config == DEAD:
            break
    return found


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule_bodies=st.lists(bodies, min_size=len(RULE_NAMES), max_size=len(RULE_NAMES)),
    texts=st.lists(st.text(alphabet="ab", max_size=8), min_size=1, max_size=6),
    text_mode=st.booleans(),
)
def test_native_state_building_matches_python(rule_bodies, texts, text_mode):
    rules = dict(zip(RULE_NAMES, rule_bodies))
    try:
        built, python_only = _python_and_native_automata(rules, "r0", text_mode)
    except GrammarError:
        reject()
    for text in texts:
        data = text.encode()
        assert _items_along(built, data) == _items_along(python_only, data), (rules, text)



@pytest.mark.parametrize(
    "text",
    [*GRAMMARS.values(), "start ::= any! 'x' any!* except!('q', 2) 'q';",
     "start ::= intersect!(#'[a-c]+', #'.*b.*') ('z' start)?;"],
)
def test_consumed_byte_sets_are_the_masks_of_consuming_positions(text):
    # consumed_masks reads every non-zero mask as consumed: only consuming kinds have one.
    grammar = Grammar.from_ebnf(text)
    nfa = build_nfa(dict(grammar.rules), grammar.start)
    automaton = ByteAutomaton(nfa)
    consuming = [k in automaton_module._CONSUMING for k in nfa.kind]
    assert all(mask == 0 for mask, consumes in zip(nfa.mask, consuming) if not consumes)
    expected = {mask for mask, consumes in zip(nfa.mask, consuming) if consumes and mask}
    for product in nfa.intersections:
        expected |= product.masks()
    assert automaton.consumed_masks() == expected


class _AutomatonOnly:
    """What a ``Matcher`` reads of a grammar: its automaton."""

    def __init__(self, automaton) -> None:
        self.automaton = automaton


def _walk_vocabulary():
    """Every byte, and pieces of the named grammars' texts: below the root, trie nodes of a
    few children, where the native walk computes an entry from its byte alone."""
    from surecall.engine.vocab import TokenVocabulary

    pieces = [
        b"true", b"tr", b"fals", b"null", b'{"', b'":', b'"a', b'"ab', b"abc", b"ab", b"ba", b"bab", b"aab",
        b"*[", b"]*", b"*[a", b"a]*", b"((", b"(b", b"b)", b"(c)", b"12", b"1+2", b"+(", b"2*", b"-a", b"ac",
        b"cc", b'", "', b"[1,", b"\\u00", "αβ".encode(), "αβγ".encode(),
        "·".encode() + b"!", "ω·".encode(), b"\xce",
    ]
    table = [b"<eos>"] + [bytes([b]) for b in range(256)] + pieces
    return TokenVocabulary(table, special_ids={0}, eos_token_ids={0})


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.lists(st.integers(0, 10_000), max_size=25))
def test_native_trie_walks_find_the_masks_of_the_python_build(name, choices):
    # The native walk fills an entry met at a trie node of few children from that byte's
    # items alone while few of the row's entries are known; Python fills whole parts.
    grammar = Grammar.from_ebnf(GRAMMARS[name])
    vocab = _walk_vocabulary()
    built, python_only = _python_and_native_automata(dict(grammar.rules), grammar.start)
    matchers = [Matcher(_AutomatonOnly(automaton), vocab) for automaton in (built, python_only)]
    for choice in choices:
        allowed = [matcher.allowed_token_ids().tolist() for matcher in matchers]
        assert allowed[0] == allowed[1]
        text = [token for token in allowed[0] if token not in vocab.eos_token_ids]
        if not text:
            break
        token = text[choice % len(text)]
        statuses = [matcher.advance(token) for matcher in matchers]
        assert statuses[0] == statuses[1] != Status.REJECTED


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
def test_native_trie_walks_leave_rows_that_later_fills_complete_alike():
    grammar = Grammar.from_ebnf(GRAMMARS["json"])
    built = ByteAutomaton(build_nfa(dict(grammar.rules), grammar.start))
    matcher = Matcher(_AutomatonOnly(built), _walk_vocabulary())
    matcher.allowed_token_ids()
    table = built.transition_table
    # Rows with entries but neither a scan kept for them nor complete: filled natively by
    # byte (from the byte's items alone) or by part (a plain configuration's).
    partly = [
        config for config in range(built.num_configs)
        if config not in built._scans and config not in built._complete
        and (table[config] != _UNKNOWN).any() and (table[config] == _UNKNOWN).any()
    ]
    assert len(partly) >= 2
    for index, config in enumerate(partly):
        known = built.transition_table[config].copy()
        filled = known != _UNKNOWN
        # Making the row's scan for the other bytes (natively, or in Python) keeps them:
        # step_many reads the known entries first and the table again once it has filled
        # the others.
        others = np.flatnonzero(~filled).astype(np.uint8)
        if index % 2:
            built._compute_entries(config, others.tolist())
        else:
            built._fill_entries(config, others)
        assert (built.transition_table[config][filled] == known[filled]).all()
        stepped = built.step_many(np.full(256, config, dtype=np.int32), np.arange(256, dtype=np.uint8))
        assert (stepped != _UNKNOWN).all()
        assert (stepped[filled] == known[filled]).all()


def _python_and_native_automata(rules: dict, start: str, text_mode: bool = False):
    nfa = build_nfa(rules, start)
    built = ByteAutomaton(nfa, text_mode=text_mode)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "states", None)
        python_only = ByteAutomaton(nfa, text_mode=text_mode)
    assert built._native is not None and python_only._native is None
    return built, python_only


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("name", sorted(GRAMMARS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(choices=st.lists(st.integers(0, 1_000), max_size=60), text_mode=st.booleans())
def test_native_state_building_matches_python_on_named_grammars(name, choices, text_mode):
    grammar = Grammar.from_ebnf(GRAMMARS[name])
    built, python_only = _python_and_native_automata(dict(grammar.rules), grammar.start, text_mode)
    # The same calls on both, so that configurations are numbered alike (origins hold ids).
    assert _items_of_choices(built, choices) == _items_of_choices(python_only, choices)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet="ab()cx", max_size=14))
def test_native_state_building_matches_python_with_exclusions_pending_across_calls(text):
    # Random choices among 256 bytes seldom spell the calls this grammar needs.
    grammar = Grammar.from_ebnf(GRAMMARS["except_across_calls"])
    built, python_only = _python_and_native_automata(dict(grammar.rules), grammar.start)
    data = text.encode()
    assert _items_along(built, data) == _items_along(python_only, data)
    assert [_callers(built, c) for c in range(built.num_configs)] == [
        _callers(python_only, c) for c in range(python_only.num_configs)
    ]


UTF8_AGREEMENT_PATTERNS = [
    r'"[^"\\]*"', r'"[^"é]*"', r'"[a-z\u00e0-\u00ff]*"', r'"(x|[^"\\]){0,3}"', r'[α-ω]+|[^a-z]', r'(\w|日)+',
    r'.{2}x', r'"([^"\\]|\\u[0-9a-f]{4})*"', r'"(ax|[^"a]y)*"',
]
#: Strings inside called rules, so that items carry origins (the same rule called from
#: several places, and recursively).
UTF8_AGREEMENT_GRAMMARS = [
    GRAMMARS["json"],
    "start ::= '{' (key ':' value (',' key ':' value)*)? '}'; key ::= '\"' #'[^\"\\\\]*' '\"';"
    " value ::= key | '[' (value (',' value)*)? ']' | start;",
    "start ::= (word ' ' | '(' start ')')+; word ::= #'[a-zé日]+' | #'[^ ()]{1,3}';",
]


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("source", [("regex", p) for p in UTF8_AGREEMENT_PATTERNS] + [("ebnf", g) for g in UTF8_AGREEMENT_GRAMMARS])
@settings(max_examples=20, deadline=None)
@given(
    choices=st.lists(st.integers(0, 1_000), max_size=12),
    ascii_byte=st.one_of(st.sampled_from(b'a"x '), st.integers(0x20, 0x7E)),
)
def test_native_utf8_agreement_matches_python(source, choices, ascii_byte):
    kind, text = source
    grammar = Grammar.from_regex(text) if kind == "regex" else Grammar.from_ebnf(text)
    built, python_only = _python_and_native_automata(dict(grammar.rules), grammar.start)
    # The same steps on both, so that configurations are numbered alike. A plain
    # configuration answers from its native items; every one's scan is asked as well, so that
    # the native answer from a scan is checked on plain and other configurations alike.
    native_found, python_found, from_scans = [], [], []
    for automaton, found in ((built, native_found), (python_only, python_found)):
        config = automaton.initial
        for choice in choices:
            found.append(automaton.utf8_agrees(config, ascii_byte))
            by_mask = automaton._plain_scans(config) if automaton is built else None
            if by_mask is not None:
                from_scans.append(
                    native.states.utf8_agrees(built._native, by_mask, ascii_byte, automaton_module._UTF8_FORMS)
                    == bool(python_only._kernel_after_every_character(by_mask, ascii_byte))
                )
            options = automaton.next_bytes(config)
            if not options:
                break
            config = automaton.step(config, options[choice % len(options)])
    assert native_found == python_found
    assert all(from_scans)


@pytest.mark.skipif(native.states is None, reason="the native extension is not built")
@pytest.mark.parametrize("only_ascii_reaches", [False, True])
def test_native_utf8_agreement_from_a_scan_tells_origins_apart(only_ascii_reaches):
    # A scan whose items sit in two calls (origins) agrees only if the characters reach both
    # where the ASCII byte does: here the second origin's item is scanned by the ASCII bytes
    # alone when ``only_ascii_reaches``.
    automaton = Grammar.from_regex(r'[^"]+').automaton
    by_mask = automaton._plain_scans(automaton.step(automaton.initial, ord("a")))
    first, second = (100, None), (200, None)
    scan = {}
    for mask, items in by_mask.items():
        reads_ascii = bool(mask >> ord("a") & 1)
        with_first = tuple((p, first, w, t) for p, _, w, t in items)
        with_second = tuple((p, second, w, t) for p, _, w, t in items) if reads_ascii or not only_ascii_reaches else ()
        scan[mask] = with_first + with_second
    found = native.states.utf8_agrees(automaton._native, scan, ord("a"), automaton_module._UTF8_FORMS)
    assert found == bool(automaton._kernel_after_every_character(scan, ord("a"))) == (not only_ascii_reaches)


def _callers(automaton, config: int) -> dict | None:
    """The rules a configuration's items call, by return (listed in item order, which
    differs between equal sets)."""
    callers = automaton._callers[config]
    return None if callers is None else {key: Counter(entries) for key, entries in callers.items()}


def _items_of_choices(automaton, choices: list[int]) -> list:
    config, found = automaton.initial, []
    for choice in choices:
        options = automaton.next_bytes(config)
        # The interned facts too: acceptance and the rules its items call.
        found.append((options, automaton._items(config), automaton.is_accepting(config), _callers(automaton, config)))
        if not options:
            break
        config = automaton.step(config, options[choice % len(options)])
    return found



@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule_bodies=st.lists(bodies, min_size=len(RULE_NAMES), max_size=len(RULE_NAMES)),
    texts=st.lists(st.text(alphabet="ab", max_size=8), min_size=1, max_size=6),
)
def test_copied_rule_positions_match_emitting_each_reference(rule_bodies, texts):
    # Inlined rules referenced again are copied from their first emission.
    rules = dict(zip(RULE_NAMES, rule_bodies))
    try:
        copied = ByteAutomaton(build_nfa(rules, "r0"), text_mode=True)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(automaton_module._NfaBuilder, "_template", lambda *args: None)
            emitted = ByteAutomaton(build_nfa(rules, "r0"), text_mode=True)
    except GrammarError:
        reject()
    for text in texts:
        data = text.encode()
        assert _accepts(copied, data) == _accepts(emitted, data), (rules, text)


@pytest.mark.parametrize(
    ("shared", "texts"),
    [
        (literal(""), ["ab", "a", "b", ""]),
        (Repeat(ByteSet(((0x61, 0x62),)), 0, 6), ["abaab", "ab", "aaaaaaaab", "b"]),  # a counted repetition
        (Except((b"aa",), None), ["ab", "aab", "b", "abab"]),
        (alt("a", NOTHING), ["aaaba", "aab", "ab", "aaab"]),
    ],
)
def test_copied_rule_positions_on_rules_that_match_empty_counted_or_except(shared, texts):
    rules = {"r0": seq(Ref("s"), "a", Ref("s"), "b", Ref("s")), "s": shared}
    copied = ByteAutomaton(build_nfa(rules, "r0"), text_mode=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(automaton_module._NfaBuilder, "_template", lambda *args: None)
        emitted = ByteAutomaton(build_nfa(rules, "r0"), text_mode=True)
    assert len(copied._nfa.kind) == len(emitted._nfa.kind)
    for text in texts:
        assert _accepts(copied, text.encode()) == _accepts(emitted, text.encode()), text
    assert any(_accepts(copied, text.encode()) for text in texts)


def _accepts(automaton, data: bytes) -> bool:
    end = automaton.step_bytes(automaton.initial, data)
    return end != DEAD and automaton.is_accepting(end)


# -- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "rules, start, message, rule",
    [
        ({"start": Ref("missing")}, "start", "undefined rule 'missing'", "start"),
        ({"start": literal("a")}, "main", "start rule 'main' is not defined", "main"),
        ({"start": NOTHING}, "start", "can never derive", "start"),
        ({"start": seq("a", Ref("loop")), "loop": seq("b", Ref("loop"))}, "start", "can never derive", "loop"),
        ({"start": Repeat(literal("a"), 3, 1)}, "start", "bad repetition bounds", "start"),
        ({"start": Except((b"",))}, "start", "non-empty string", "start"),
        ({"start": "not a node"}, "start", "not a grammar node", "start"),
    ],
)
def test_invalid_rules_are_rejected_at_construction(rules, start, message, rule):
    with pytest.raises(GrammarError) as info:
        Grammar(rules, start)
    assert message in str(info.value)
    assert info.value.rule == rule


def test_empty_grammar_is_rejected():
    with pytest.raises(GrammarError, match="at least one rule"):
        Grammar({})


def test_grammars_are_values_and_share_compiled_automata():
    clear_automaton_cache()
    first = Grammar({"start": seq("a", Ref("b")), "b": star("b")})
    second = Grammar({"b": star("b"), "start": seq("a", Ref("b"))})
    assert first == second and hash(first) == hash(second)
    assert first.automaton is second.automaton
    assert first.automaton is first.automaton
    different = Grammar({"start": seq("a", Ref("b")), "b": star("c")})
    assert different != first and different.automaton is not first.automaton


def test_automaton_cache_is_bounded():
    clear_automaton_cache()
    first = Grammar.from_regex("x0")
    kept = first.automaton
    for i in range(1, AUTOMATON_CACHE_SIZE + 5):
        Grammar.from_regex(f"x{i}").automaton
    again = Grammar.from_regex("x0")
    assert again.automaton is not kept  # evicted, recompiled
    assert again.accepts("x0")


def test_grammars_and_errors_pickle():
    import pickle

    grammar = Grammar.from_ebnf(GRAMMARS["left_recursion"])
    again = pickle.loads(pickle.dumps(grammar))
    assert again == grammar and again.accepts("1+2*3")
    error = pickle.loads(pickle.dumps(GrammarError("bad", line=2, column=3, rule="r")))
    assert (error.line, error.column, error.rule) == (2, 3, "r") and str(error) == "bad (line 2, column 3, rule 'r')"


def test_rules_are_read_only():
    grammar = Grammar({"start": literal("a")})
    with pytest.raises(TypeError):
        grammar.rules["start"] = literal("b")


def test_from_ir_and_token_hooks_flag():
    grammar = Grammar.from_ir(alt(seq("a", AnyToken()), "b"))
    assert grammar.automaton.has_token_hooks
    assert grammar.accepts("axyz") and grammar.accepts("b") and not grammar.accepts("a")
    assert not Grammar.from_ir(Except((b"x",))).automaton.has_token_hooks
    assert Grammar.from_ir(Except((b"x",), 3)).automaton.has_token_hooks


def test_step_many_grows_the_table_for_recursive_grammars():
    grammar = Grammar.from_ebnf(GRAMMARS["parens"])
    automaton = grammar.automaton
    configs = [automaton.initial]
    for depth in range(200):
        configs.append(automaton.step(configs[-1], ord("(")))
    before = automaton.num_configs
    stepped = automaton.step_many(np.array(configs, dtype=np.int32), np.full(len(configs), ord(")"), dtype=np.uint8))
    assert stepped[0] == DEAD and (stepped[1:] != DEAD).all()
    assert automaton.num_configs >= before


INTERSECTION_AGREEMENT_CASES = [
    (r"[^\"\\]*", r"(.){0,6}"),  # a string with a maximum length: every character counts alike
    (r"[0-9]+\..*", r".{0,8}"),  # a pattern with a length limit
    (r"[^é\"]*", r".{0,5}"),  # é goes its own way in one operand
    (r"(a|日)*.*", r".{1,4}"),
]


@pytest.mark.parametrize(("first", "second"), INTERSECTION_AGREEMENT_CASES)
@settings(max_examples=25, deadline=None)
@given(choices=st.lists(st.integers(0, 1_000), max_size=10), ascii_byte=st.integers(0x20, 0x7E))
def test_utf8_agreement_through_intersections_is_what_stepping_finds(first, second, choices, ascii_byte):
    # Where an intersection is read off its operands, every multi-byte character (the
    # first and last of each UTF-8 form checked) must lead where the ASCII byte leads.
    from surecall.engine.ir import Intersect, seq
    from surecall.engine.regex import regex_to_ir

    automaton = Grammar({"start": seq('"', Intersect((regex_to_ir(first), regex_to_ir(second))), '"')}).automaton
    config = automaton.step(automaton.initial, ord('"'))
    for choice in choices:
        if automaton.utf8_agrees(config, ascii_byte):
            target = automaton.step(config, ascii_byte)
            assert target != DEAD
            for character in ("\u0080", "\u07ff", "\u0800", "\u0fff", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"):
                assert automaton.step_bytes(config, character.encode()) == target, character
        options = automaton.next_bytes(config)
        if not options:
            break
        config = automaton.step(config, options[choice % len(options)])
