"""Matcher behaviour against small automata whose languages are known exactly."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from surecall.engine import native
from surecall.engine.errors import TokenBudgetError
from surecall.engine.matcher import Matcher, Status
from surecall.engine.trie import unpack_ids, words_for

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

EOS = 1
DEAD = -1


@pytest.fixture(scope="module")
def vocab():
    return doubles.sample_vocabulary(extra_logits=7)


def tokens_for(vocab, *pieces: bytes) -> list[int]:
    return [vocab.tokenize_bytes(p)[0] if len(vocab.tokenize_bytes(p)) == 1 else None for p in pieces]


def walk(matcher, vocab, text: bytes) -> list[Status]:
    return [matcher.advance(t) for t in vocab.tokenize_bytes(text)]


def test_masks_equal_brute_force_along_a_record(vocab):
    automaton = doubles.json_like_record()
    matcher = Matcher(doubles.FakeGrammar(automaton), vocab)
    text = '{"name": "héllo wörld 日本", "note": "x\\"y"}'.encode()
    for token_id in vocab.tokenize_bytes(text):
        expected = doubles.brute_force_allowed(automaton, vocab, matcher.config)
        assert set(matcher.allowed_token_ids().tolist()) == expected
        assert token_id in expected
        matcher.advance(token_id)
    assert matcher.text_bytes() == text


def test_loop_groups_and_plain_walk_agree(vocab):
    # The in-string configuration loops on a token group; a fresh walk without the
    # group shortcut must find exactly the same tokens and end configurations.
    automaton = doubles.json_like_record()
    matcher = Matcher(doubles.FakeGrammar(automaton), vocab)
    walk(matcher, vocab, b'{"name": "')
    config = matcher.config
    assert matcher._loop_group(config) is not None
    entry = matcher._entry(config)
    ids, ends = entry.ids, entry.ends
    id_parts, end_parts = [], []
    matcher._walk_levels(np.array([0], dtype=np.int32), np.array([config], dtype=np.int32), id_parts, end_parts)
    plain_ids = np.concatenate(id_parts)
    order = np.argsort(plain_ids)
    assert np.array_equal(ids, plain_ids[order])
    assert np.array_equal(ends, np.concatenate(end_parts)[order])


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_native_walk_fills_a_lazy_table_that_moves_while_walking(vocab):
    # The extension reads the automaton's table directly and asks ``step`` for the
    # entries it lacks; the double moves its table to a new array every few fills.
    reference = doubles.json_like_record()
    lazy = doubles.LazyTableAutomaton(
        {s: {v: int(t) for v, t in enumerate(row) if t != doubles.DEAD} for s, row in enumerate(reference.table)},
        set(reference.accepting),
    )
    matcher = Matcher(doubles.FakeGrammar(lazy), vocab)
    assert matcher._native_walk_applies()
    text = '{"name": "héllo wörld 日本", "note": "x\\"y"}'.encode()
    for token_id in vocab.tokenize_bytes(text):
        expected = doubles.brute_force_allowed(reference, vocab, matcher.config)
        assert set(matcher.allowed_token_ids().tolist()) == expected
        assert matcher.advance(token_id) != Status.REJECTED
    assert lazy.fills > 7 and matcher.is_accepting()


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_native_walk_passes_on_errors_of_the_automaton(vocab):
    reference = doubles.digits_then_letters()
    edges = {s: {v: int(t) for v, t in enumerate(row) if t != doubles.DEAD} for s, row in enumerate(reference.table)}
    failing = doubles.LazyTableAutomaton(edges, set(reference.accepting), fail_on=(1, ord("a")))
    matcher = Matcher(doubles.FakeGrammar(failing), vocab)
    walk(matcher, vocab, b"7")
    with pytest.raises(RuntimeError, match="cannot compute the entry"):
        matcher.allowed_token_ids()


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_native_walk_rejects_malformed_arguments(vocab):
    automaton = doubles.LazyTableAutomaton({0: dict.fromkeys(range(256), 0)}, {0})  # any bytes
    trie = vocab.trie
    arrays = [trie.child_start, trie.child_end, trie.byte, trie.token_start, trie.token_ids]
    args = [automaton, native.trie_tables(*arrays)]
    room = len(trie.token_ids)
    out = [np.empty(room, dtype=np.int32), np.empty(room, dtype=np.int32)]
    with pytest.raises(ValueError, match="out of range"):
        native.walk(*args, np.array([0], dtype=np.int32), np.array([5], dtype=np.int32), *out)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        native.walk(*args, np.array([0, 0], dtype=np.int32), np.array([0], dtype=np.int32), *out)
    with pytest.raises(ValueError, match="int32"):
        native.walk(*args, np.array([0], dtype=np.int8), np.array([0], dtype=np.int32), *out)
    # The trie is what ``trie_tables`` makes of its arrays, checked there once.
    root = np.array([0], dtype=np.int32)
    with pytest.raises(TypeError, match="trie_tables"):
        native.walk(automaton, arrays[0], root, root, *out)
    with pytest.raises(ValueError, match="trie arrays of inconsistent lengths"):
        native.trie_tables(trie.child_start, trie.child_end[:-1], *arrays[2:])
    with pytest.raises(ValueError, match="token_ids is not an array of int32"):
        native.trie_tables(*arrays[:4], np.zeros(5, dtype=np.uint8))
    # The root twice reports every token twice: more than the output arrays hold.
    twice = np.array([0, 0], dtype=np.int32)
    with pytest.raises(OverflowError):
        native.walk(*args, twice, twice, *out)
    found = native.walk(*args, twice, twice, np.empty(2 * room, dtype=np.int32), np.empty(2 * room, dtype=np.int32))
    assert found == 2 * len(trie.token_ids)
    below_bytes, below_start, below_end, depth_first, whole_characters = trie.subtree_tables
    with pytest.raises(TypeError, match="five arrays"):
        native.trie_tables(*arrays, below_bytes, below_start, below_end, depth_first)
    with pytest.raises(ValueError, match="subtree tables of inconsistent lengths"):
        native.trie_tables(*arrays, below_bytes[:-1], below_start, below_end, depth_first, whole_characters)
    with pytest.raises(ValueError, match="subtree tables of inconsistent lengths"):
        native.trie_tables(*arrays, below_bytes, below_start, below_end, depth_first, whole_characters.astype(np.int32))
    # Every byte loops on the only state: the root's children take their subtrees whole.
    assert native.walk(automaton, native.trie_tables(*arrays, *trie.subtree_tables), root, root, *out) == room
    assert sorted(out[0][:room].tolist()) == sorted(trie.token_ids.tolist())
    with pytest.raises(ValueError, match="one byte per trie node"):
        native.walk(*args, root, root, *out, marks=np.ones(trie.num_nodes - 1, dtype=np.uint8))
    # Marks: nothing below a 0, no tokens at a 1 (passed through), a 2's tokens reported.
    marks = np.zeros(trie.num_nodes, dtype=np.uint8)
    first, second = int(trie.root_children[ord("a")]), int(trie.child(int(trie.root_children[ord("a")]), ord("b")))
    marks[first], marks[second] = 1, 2
    found = native.walk(*args, root, root, *out, marks=marks)
    assert sorted(out[0][:found].tolist()) == trie.tokens_at(second).tolist() == [vocab.tokenize_bytes(b"ab")[0]]
    # Words: the same tokens' bits, set into what the buffer held, nothing per token written.
    words = np.zeros(words_for(vocab.size), dtype=np.uint32)
    words[-1] = 1 << 31
    none = np.zeros(0, dtype=np.int32)
    found = native.walk(*args, root, root, none, none, marks=marks, out_words=words)
    assert found == 1
    assert unpack_ids(words, len(words) * 32).tolist() == sorted([*trie.tokens_at(second).tolist(), len(words) * 32 - 1])
    with pytest.raises(ValueError, match="past the output words"):
        native.walk(*args, root, root, none, none, out_words=np.zeros(1, dtype=np.uint32))
    with pytest.raises(ValueError, match="32-bit words"):
        native.walk(*args, root, root, none, none, out_words=np.zeros(8, dtype=np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        native.walk(*args, root, root, none, none, out_words=np.zeros(2 * len(words), dtype=np.uint32)[::2])


_TOKEN_BYTES = st.binary(min_size=1, max_size=6).map(lambda data: bytes(b % 8 + 0x61 for b in data))
# Letters, quotes, whole characters of two to four bytes, and pieces of characters: lone
# lead and continuation bytes, a surrogate's encoding, a byte UTF-8 never uses.
_MIXED_BYTES = st.lists(
    st.sampled_from([b"a", b"b", b"x", b" ", b'"', "é".encode(), "日".encode(), "😀".encode(),
                     b"\xc3", b"\xa9", b"\xe6\x97", b"\xed\xa0\x80", b"\xff"]),
    min_size=1, max_size=4,
).map(b"".join)


def _vocabulary_of(pieces):
    from surecall.engine.vocab import TokenVocabulary

    return TokenVocabulary([b"<eos>"] + sorted(set(pieces)), special_ids={0}, eos_token_ids={0})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_TOKEN_BYTES, _MIXED_BYTES), min_size=1, max_size=60))
def test_subtree_tables_list_the_tokens_and_bytes_below_each_node(pieces):
    vocab = _vocabulary_of(pieces)
    trie = vocab.trie
    below_bytes, below_start, below_end, depth_first, whole_characters = trie.subtree_tables
    spelled = {int(token): vocab.token_bytes(int(token)) for token in trie.token_ids}
    for node in range(trie.num_nodes):
        path = bytes(trie.byte[n] for n in reversed(_ancestors(trie, node)))
        below = {token for token, data in spelled.items() if data.startswith(path) and len(data) > len(path)}
        listed = depth_first[below_start[node]:below_end[node]].tolist()
        assert sorted(listed) == sorted(below) and len(listed) == len(below)
        expected_bits = 0
        for token in below:
            for value in spelled[token][len(path):]:
                expected_bits |= 1 << value
        assert sum(int(word) << (64 * i) for i, word in enumerate(below_bytes[node])) == expected_bits
        expected_whole = all(doubles.is_utf8(spelled[token][len(path):]) for token in below)
        assert whole_characters[node] == expected_whole, (path, sorted(spelled[t] for t in below))


def _ancestors(trie, node: int) -> list[int]:
    path = []
    while node > 0:
        path.append(node)
        node = int(trie.parent[node])
    return path


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(_TOKEN_BYTES, min_size=1, max_size=80),
    loops=st.lists(st.sets(st.integers(0x61, 0x68)), min_size=1, max_size=4),
    moves=st.lists(st.tuples(st.integers(0, 3), st.integers(0x61, 0x68), st.integers(0, 3)), max_size=10),
    start=st.integers(0, 3),
)
def test_native_walk_taking_whole_subtrees_finds_what_the_plain_walk_finds(pieces, loops, moves, start):
    # States loop on some letters and move or die on the others; where every byte below a
    # trie node loops, the walk takes the node's tokens at once (through a lazy table that
    # moves as it fills, as the automaton's does).
    vocab = _vocabulary_of(pieces)
    trie = vocab.trie
    edges = {state: dict.fromkeys(looping, state) for state, looping in enumerate(loops)}
    for source, value, target in moves:
        if source < len(loops) and target < len(loops) and value not in edges[source]:
            edges[source][value] = target
    start %= len(loops)
    found = {}
    for tables in ((), trie.subtree_tables):
        automaton = doubles.LazyTableAutomaton(edges, {0})
        room = len(trie.token_ids)
        ids, ends = np.empty(room, dtype=np.int32), np.empty(room, dtype=np.int32)
        trie_tables = native.trie_tables(
            trie.child_start, trie.child_end, trie.byte, trie.token_start, trie.token_ids, *tables
        )
        count = native.walk(
            automaton, trie_tables, np.array([0], dtype=np.int32), np.array([start], dtype=np.int32), ids, ends
        )
        found[len(tables)] = sorted(zip(ids[:count].tolist(), ends[:count].tolist()))
    reference = doubles.TableAutomaton(edges, {0})
    expected = []
    for token in trie.token_ids.tolist():
        config = start
        for value in vocab.token_bytes(token):
            config = reference.step(config, value)
        if config != DEAD:
            expected.append((token, config))
    assert found[0] == found[5] == sorted(expected)


@pytest.mark.skipif(native.run_tails is None, reason="the native extension is not built")
def test_native_tails_step_a_lazy_moving_table_and_refuse_malformed_arguments():
    rng = np.random.default_rng(7)
    transitions = {state: {value: int(rng.integers(0, 6)) for value in range(0, 256, 3)} for state in range(6)}
    automaton = doubles.LazyTableAutomaton(transitions, {0})
    tails = rng.integers(0, 256, size=(300, 4)).astype(np.uint8)
    lengths = rng.integers(0, 5, size=300).astype(np.int32)
    starts = rng.integers(0, 6, size=300).astype(np.int32)
    ends = np.empty(300, dtype=np.int32)
    native.run_tails(automaton, starts, tails, lengths, ends)
    expected = []
    for start, tail, length in zip(starts.tolist(), tails, lengths.tolist()):
        for value in tail[:length].tolist():
            start = automaton.step(start, value)
            if start == DEAD:
                break
        expected.append(start)
    assert ends.tolist() == expected
    assert automaton.fills > 7  # the table moved while the tails ran
    with pytest.raises(ValueError, match="inconsistent lengths"):
        native.run_tails(automaton, starts, tails[:10], lengths, ends)
    with pytest.raises(ValueError, match="longer than 4"):
        native.run_tails(automaton, starts[:1], tails[:1], np.array([5], dtype=np.int32), ends)
    with pytest.raises(ValueError, match="out of range"):
        native.run_tails(automaton, np.array([99], dtype=np.int32), tails[:1], np.array([1], dtype=np.int32), ends)


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_native_walk_from_a_groups_exits(vocab):
    # Every byte loops on the only state: each start takes its subtree whole, so the tokens
    # found are those below the exits not left out and below the excepted first bytes.
    automaton = doubles.LazyTableAutomaton({0: dict.fromkeys(range(256), 0)}, {0})
    trie = vocab.trie
    trie_tables = native.trie_tables(trie.child_start, trie.child_end, trie.byte, trie.token_start, trie.token_ids)
    first_level = trie.child_start[0] + np.arange(3, dtype=np.int32)
    nodes, others = first_level[:2], int(trie.byte[first_level[2]])
    first = trie.first_bytes[nodes].astype(np.uint8)
    tails, lengths = np.zeros((2, 4), dtype=np.uint8), np.zeros(2, dtype=np.int32)
    exits = native.group_exits(nodes, np.array([0, 1], dtype=np.int32), tails, lengths, first)
    none = np.zeros(0, dtype=np.int32)
    token_first = trie.first_bytes[trie.token_nodes]

    def walked(**options) -> set[int]:
        words = np.zeros(words_for(vocab.size), dtype=np.uint32)
        native.walk(automaton, trie_tables, none, none, none, none, out_words=words, **options)
        return set(unpack_ids(words, vocab.size).tolist())

    def below(values) -> set[int]:
        return set(trie.token_ids[np.isin(token_first, list(values))].tolist())

    starts = np.array([0, 0], dtype=np.int32)
    assert walked(exits=exits, exit_starts=starts) == below(first)
    # An excepted byte leaves its exit out and walks the root's child by it instead.
    assert walked(exits=exits, exit_starts=starts, excepted=first[:1]) == below(first)
    assert walked(exits=exits, exit_starts=starts[:1], excepted=np.array([others], dtype=np.uint8)) == below(
        [*first, others]
    )
    with pytest.raises(ValueError, match="inconsistent lengths"):
        native.group_exits(nodes, np.array([0], dtype=np.int32), tails, lengths, first)
    with pytest.raises(TypeError, match="group_exits"):
        walked(exits=nodes, exit_starts=starts)
    with pytest.raises(TypeError, match="go with exits"):
        walked(exit_starts=starts)
    with pytest.raises(ValueError, match="empty"):
        walked(exits=exits, exit_starts=none)
    with pytest.raises(ValueError, match="uint8"):
        walked(exits=exits, exit_starts=starts, excepted=first.astype(np.int64))
    bad = native.group_exits(nodes, np.array([0, 5], dtype=np.int32), tails, lengths, first)
    with pytest.raises(ValueError, match="start index"):
        walked(exits=bad, exit_starts=starts)
    with pytest.raises(ValueError, match="out of range"):
        walked(exits=exits, exit_starts=np.array([7], dtype=np.int32))


@pytest.mark.skipif(native.live_exits is None, reason="the native extension is not built")
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), along_a_chain=st.booleans(), skip=st.sets(st.integers(0, 255), max_size=40))
def test_native_live_exits_are_the_live_tails_not_skipped(seed, along_a_chain, skip):
    # Exits start from a chain's configuration (or one configuration), step through their
    # tails on a lazy table that moves as it fills; the live ones not starting with a
    # skipped byte come back, in order, with their configurations.
    rng = np.random.default_rng(seed)
    transitions = {state: {value: int(rng.integers(-1, 6)) for value in range(0, 256, 2)} for state in range(6)}
    automaton = doubles.LazyTableAutomaton(transitions, {0})
    count = 200
    tails = rng.integers(0, 256, size=(count, 4)).astype(np.uint8)
    lengths = rng.integers(0, 5, size=count).astype(np.int32)
    nodes = rng.permutation(10 * count)[:count].astype(np.int32)
    first = rng.integers(0, 256, size=count).astype(np.uint8)
    starts = rng.integers(-1, 6, size=7).astype(np.int32) if along_a_chain else np.array([2], dtype=np.int32)
    start_of = rng.integers(0, len(starts), size=count).astype(np.int32) if along_a_chain else None
    flags = np.zeros(256, dtype=np.uint8)
    flags[list(skip)] = 1
    out_nodes, out_configs = np.empty(count, dtype=np.int32), np.empty(count, dtype=np.int32)
    found = native.live_exits(
        automaton, starts, start_of, tails, lengths, nodes, first, flags if skip else None, out_nodes, out_configs
    )
    expected = []
    for i in range(count):
        if first[i] in skip:
            continue
        config = int(starts[0 if start_of is None else start_of[i]])
        for value in tails[i, : lengths[i]].tolist():
            config = automaton.step(config, value)
            if config == DEAD:
                break
        if config != DEAD:
            expected.append((int(nodes[i]), config))
    assert list(zip(out_nodes[:found].tolist(), out_configs[:found].tolist())) == expected
    with pytest.raises(ValueError, match="inconsistent lengths"):
        native.live_exits(automaton, starts, start_of, tails[:10], lengths, nodes, first, None, out_nodes, out_configs)
    with pytest.raises(ValueError, match="start index"):
        native.live_exits(
            automaton, starts, np.full(count, len(starts), dtype=np.int32), tails, lengths, nodes, first, None,
            out_nodes, out_configs,
        )


@pytest.mark.parametrize("make", [doubles.json_like_record, doubles.digits_then_letters])
def test_native_and_numpy_walks_agree(vocab, monkeypatch, make):
    automaton = make()
    grammar = doubles.FakeGrammar(automaton)
    configs = [c for c in range(automaton.table.shape[0]) if automaton.can_continue(c)]
    with_native = {c: doubles.walked_tokens(Matcher(grammar, vocab), c) for c in configs}
    monkeypatch.setattr(native, "walk", None)
    monkeypatch.setattr(native, "run_tails", None)
    for config in configs:
        assert doubles.walked_tokens(Matcher(grammar, vocab), config) == with_native[config], config


def test_eos_allowed_exactly_when_accepting(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.digits_then_letters()), vocab)
    assert not set(matcher.allowed_token_ids().tolist()) & {0, 1}
    assert matcher.advance(EOS) is Status.REJECTED
    assert matcher.advance(vocab.tokenize_bytes(b"12")[0]) is Status.ACCEPTED
    assert {0, 1} <= set(matcher.allowed_token_ids().tolist())
    assert 2 not in matcher.allowed_token_ids()  # a special token that does not end the sequence
    assert matcher.advance(EOS) is Status.FINISHED
    assert matcher.is_finished() and matcher.is_accepting()
    assert len(matcher.allowed_token_ids()) == 0
    assert matcher.advance(vocab.tokenize_bytes(b"1")[0]) is Status.REJECTED


def test_rejected_token_leaves_state_unchanged(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.digits_then_letters()), vocab)
    matcher.advance(vocab.tokenize_bytes(b"1")[0])
    before = (matcher.config, matcher.text_bytes(), matcher.token_ids, matcher.allowed_token_ids().tolist())
    for bad in (vocab.tokenize_bytes(b"X")[0], 2, vocab.size - 1, vocab.size + 5, -3):
        assert matcher.advance(bad) is Status.REJECTED
    assert (matcher.config, matcher.text_bytes(), matcher.token_ids, matcher.allowed_token_ids().tolist()) == before
    with pytest.raises(TypeError):
        matcher.advance("1")


def test_ids_beyond_the_tokenizer_table_are_never_allowed(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["ab", "abc"])), vocab)
    words = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    matcher.fill_bitmask(words)
    table_size = vocab.size - 7
    for token_id in range(table_size, vocab.size):
        assert not (words.view(np.uint32)[token_id >> 5] >> (token_id & 31)) & 1


def test_fill_bitmask_layout_rows_and_errors(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["ab", "x"])), vocab)
    allowed = set(matcher.allowed_token_ids().tolist())
    words = (vocab.size + 31) // 32
    buffer = np.full((3, words + 2), -1, dtype=np.int32)
    matcher.fill_bitmask(buffer, row=1)
    assert (buffer[0] == -1).all() and (buffer[2] == -1).all()
    assert (buffer[1, words:] == 0).all()
    bits = {i for i in range(vocab.size) if (int(buffer[1, i >> 5]) >> (i & 31)) & 1}
    assert bits == allowed
    with pytest.raises(ValueError, match="words"):
        matcher.fill_bitmask(np.zeros(words - 1, dtype=np.int32))
    with pytest.raises(ValueError):
        matcher.fill_bitmask(np.zeros((2, words), dtype=np.int32))
    # As wide as int32 words, but not integers: refused rather than filled with bit patterns.
    with pytest.raises(ValueError, match="float32"):
        matcher.fill_bitmask(np.zeros(words, dtype=np.float32))
    # Complete but able to go on: the end-of-sequence ids join the text tokens' bits.
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["ab", "abc"])), vocab)
    assert matcher.advance(vocab.tokenize_bytes(b"ab")[0]) is Status.ACCEPTED
    buffer = np.full(words, -1, dtype=np.int32)
    matcher.fill_bitmask(buffer)
    bits = {i for i in range(vocab.size) if (int(buffer.view(np.uint32)[i >> 5]) >> (i & 31)) & 1}
    assert bits == set(matcher.allowed_token_ids().tolist())
    assert set(vocab.eos_token_ids) <= bits


def test_finished_when_nothing_can_follow(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["ab", "abc"])), vocab)
    assert matcher.advance(vocab.tokenize_bytes(b"ab")[0]) is Status.ACCEPTED  # "abc" may still follow
    assert matcher.advance(vocab.tokenize_bytes(b"c")[0]) is Status.FINISHED
    assert matcher.is_finished()


def test_rollback_reset_and_clone(vocab):
    grammar = doubles.FakeGrammar(doubles.json_like_record())
    matcher = Matcher(grammar, vocab)
    tokens = vocab.tokenize_bytes(b'{"name": "hello", "note": "x"}')
    for token_id in tokens[:4]:
        matcher.advance(token_id)
    snapshot = (matcher.config, matcher.text_bytes(), matcher.allowed_token_ids().tolist())
    twin = matcher.clone()
    statuses = [matcher.advance(token_id) for token_id in tokens[4:]]
    assert statuses[-1] is Status.FINISHED and matcher.is_finished()
    assert (twin.config, twin.text_bytes(), twin.allowed_token_ids().tolist()) == snapshot
    assert twin._tables is matcher._tables and twin.vocab is matcher.vocab and twin.grammar is matcher.grammar
    matcher.rollback(len(tokens) - 4)
    assert (matcher.config, matcher.text_bytes(), matcher.allowed_token_ids().tolist()) == snapshot
    assert not matcher.is_finished()
    with pytest.raises(ValueError):
        matcher.rollback(99)
    matcher.reset()
    assert matcher.text_bytes() == b"" and matcher.token_ids == [] and matcher.config == grammar.automaton.initial


def test_forced_bytes_and_tokens(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.json_like_record()), vocab)
    data, tokens = matcher.forced()
    assert data == b'{"name": "'
    # No longer token could extend past the forced text, so the whole of it is forced.
    assert vocab.decode(tokens) == b'{"name": "'
    for token_id in tokens:
        assert matcher.advance(token_id) is Status.ACCEPTED
    assert matcher.forced() == (b"", [])
    walk(matcher, vocab, b'hi"')
    data, tokens = matcher.forced()
    assert data == b', "note": "'
    # ' "h' could extend past the forced text, so the final ' "' is left to sampling.
    assert vocab.decode(tokens) == b', "note":'
    assert all(matcher.advance(t) is Status.ACCEPTED for t in tokens)
    assert matcher.forced() == (b' "', [])


def test_forced_stops_where_the_text_could_end(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["abc", "abcxyz"])), vocab)
    data, tokens = matcher.forced()
    assert data == b"abc"
    assert vocab.decode(tokens) in (b"abc", b"ab", b"a", b"")
    walk(matcher, vocab, b"abc")
    assert matcher.forced() == (b"", [])


def test_forced_keeps_the_last_token_when_nothing_longer_fits(vocab):
    matcher = Matcher(doubles.FakeGrammar(doubles.finite_language(["xyz!"])), vocab)
    data, tokens = matcher.forced()
    assert data == b"xyz!"
    assert vocab.decode(tokens) == b"xyz!"


def test_utf8_character_split_across_tokens(vocab):
    automaton = doubles.json_like_record(keys=("name",))
    matcher = Matcher(doubles.FakeGrammar(automaton), vocab)
    walk(matcher, vocab, b'{"name": "')
    first_half = vocab.tokenize_bytes(b"\xe6\x97")[0]
    assert vocab.token_bytes(first_half) == b"\xe6\x97"
    assert first_half in matcher.allowed_token_ids()
    assert matcher.advance(first_half) is Status.ACCEPTED
    allowed = set(matcher.allowed_token_ids().tolist())
    assert vocab.tokenize_bytes(b"\xa5")[0] in allowed
    assert vocab.tokenize_bytes(b"a")[0] not in allowed  # a character cannot start mid-sequence
    assert matcher.advance(vocab.tokenize_bytes(b"\xa5")[0]) is Status.ACCEPTED
    walk(matcher, vocab, b'"}')
    assert matcher.is_finished()
    assert matcher.text_bytes().decode() == '{"name": "日"}'


def test_min_tokens_to_finish_is_an_achievable_path(vocab):
    automaton = doubles.json_like_record()
    matcher = Matcher(doubles.FakeGrammar(automaton), vocab)
    needed = matcher.min_tokens_to_finish()
    completion = automaton.shortest_completion(automaton.initial)
    assert 0 < needed <= len(completion)
    # Following the greedy path (the longest token spelling the rest of one completion)
    # reaches acceptance in exactly that many tokens.
    completion, position = matcher._completion(matcher.config), 0
    steps = 0
    while not matcher.is_accepting():
        config, position = matcher._greedy_token_step(matcher.config, completion, position)
        candidates = [t for t in matcher.allowed_token_ids().tolist() if matcher._end_state(matcher.config, t) == config]
        matcher.advance(candidates[0])
        steps += 1
    assert steps == needed


def test_budget_too_small_raises_with_the_minimum(vocab):
    grammar = doubles.FakeGrammar(doubles.json_like_record())
    needed = Matcher(grammar, vocab).min_tokens_to_finish()
    with pytest.raises(TokenBudgetError, match=str(needed)):
        Matcher(grammar, vocab, max_tokens=needed - 1)
    matcher = Matcher(grammar, vocab, max_tokens=needed)
    assert matcher.remaining_tokens == needed


def test_tight_budget_forces_completion(vocab):
    grammar = doubles.FakeGrammar(doubles.json_like_record())
    needed = Matcher(grammar, vocab).min_tokens_to_finish()
    matcher = Matcher(grammar, vocab, max_tokens=needed + 2)
    rng = np.random.default_rng(0)
    while not matcher.is_finished():
        allowed = matcher.allowed_token_ids()
        assert len(allowed), "a budgeted matcher never runs out of allowed tokens"
        # Prefer text tokens so the walk uses up the budget instead of stopping early.
        text = [t for t in allowed.tolist() if t not in vocab.eos_token_ids]
        choice = int(rng.choice(text)) if text else int(allowed[0])
        assert matcher.advance(choice) is not Status.REJECTED
    produced = [t for t in matcher.token_ids if t not in vocab.eos_token_ids]
    assert len(produced) <= needed + 2
    assert grammar.accepts(matcher.text_bytes())


def test_budget_rejects_tokens_that_leave_no_room(vocab):
    grammar = doubles.FakeGrammar(doubles.finite_language(["ab", "a" * 9 + "b"]))
    matcher = Matcher(grammar, vocab, max_tokens=2)
    a = vocab.tokenize_bytes(b"a")[0]
    assert a in matcher.allowed_token_ids()
    matcher.advance(a)
    # One token left: only "b" completes; another "a" would need more.
    assert matcher.allowed_token_ids().tolist() == vocab.tokenize_bytes(b"b")
    assert matcher.advance(a) is Status.REJECTED
    assert matcher.advance(vocab.tokenize_bytes(b"b")[0]) is Status.FINISHED
    assert matcher.remaining_tokens == 0


def test_masks_are_cached_and_shared_between_matchers(vocab):
    automaton = doubles.json_like_record()
    first = Matcher(doubles.FakeGrammar(automaton), vocab)
    walk(first, vocab, b'{"name": "he')
    first.allowed_token_ids()
    calls = automaton.step_calls
    second = Matcher(doubles.FakeGrammar(automaton), vocab)
    walk(second, vocab, b'{"name": "he')
    assert second.allowed_token_ids().tolist() == first.allowed_token_ids().tolist()
    assert automaton.step_calls == calls


def test_matcher_needs_a_grammar_and_a_vocabulary(vocab):
    with pytest.raises(TypeError, match="Grammar"):
        Matcher(object(), vocab)
    with pytest.raises(TypeError, match="TokenVocabulary"):
        Matcher(doubles.FakeGrammar(doubles.digits_then_letters()), object())
    with pytest.raises(ValueError, match="max_tokens"):
        Matcher(doubles.FakeGrammar(doubles.digits_then_letters()), vocab, max_tokens=-1)


def test_any_token_allows_exactly_one_whole_token(vocab):
    from surecall.engine import Grammar

    grammar = Grammar.from_ebnf("start ::= 'x' any! 'y';")
    automaton = grammar.automaton
    assert automaton.has_token_hooks
    matcher = Matcher(grammar, vocab)
    assert matcher.advance(vocab.tokenize_bytes(b"x")[0]) is Status.ACCEPTED
    allowed = set(matcher.allowed_token_ids().tolist())
    assert allowed == doubles.brute_force_allowed(automaton, vocab, matcher.config)
    assert set(vocab.normal_ids.tolist()) <= allowed
    assert matcher.advance(vocab.tokenize_bytes(b" world")[0]) is Status.ACCEPTED
    assert set(matcher.allowed_token_ids().tolist()) == doubles.brute_force_allowed(automaton, vocab, matcher.config)
    assert vocab.tokenize_bytes(b"ab")[0] not in matcher.allowed_token_ids()
    assert matcher.advance(vocab.tokenize_bytes(b"y")[0]) is Status.FINISHED
    assert grammar.accepts(matcher.text_bytes())


def test_except_with_a_token_limit_counts_tokens(vocab):
    from surecall.engine import Grammar

    grammar = Grammar.from_ebnf("start ::= except!('\\n\\n', 3) '\\n\\n';")
    automaton = grammar.automaton
    matcher = Matcher(grammar, vocab)
    a = vocab.tokenize_bytes(b"abc")[0]
    for _ in range(3):
        assert set(matcher.allowed_token_ids().tolist()) == doubles.brute_force_allowed(automaton, vocab, matcher.config)
        assert matcher.advance(a) is Status.ACCEPTED
    # Three tokens of free text are used up: only the terminator may follow.
    allowed = set(matcher.allowed_token_ids().tolist())
    assert allowed == doubles.brute_force_allowed(automaton, vocab, matcher.config)
    assert a not in allowed and vocab.tokenize_bytes(b"\n")[0] in allowed
    assert matcher.advance(a) is Status.REJECTED
    for _ in range(2):
        matcher.advance(vocab.tokenize_bytes(b"\n")[0])
    assert matcher.is_accepting()
    assert grammar.accepts(matcher.text_bytes())


def test_token_groups_are_persisted_per_vocabulary(tmp_path):
    from surecall.engine.token_groups import GROUP_SPECS, GroupTables

    vocab = doubles.sample_vocabulary()
    vocab.cache_root = tmp_path
    spec = next(s for s in GROUP_SPECS if s.name == "json_string")
    built = GroupTables(vocab).group(spec)
    assert len(list(tmp_path.glob("groups-*-json_string-*.npz"))) == 1
    loaded = GroupTables(vocab).group(spec)
    for name, array in built.to_arrays().items():
        assert np.array_equal(array, getattr(loaded, name)), name
    # Members are exactly the tokens made of whole characters inside a JSON string.
    for token_id in vocab.normal_ids.tolist():
        data = vocab.token_bytes(token_id)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        expected = text is not None and all(c not in '"\\' and ord(c) >= 0x20 for c in text)
        assert (token_id in built.member_ids) == expected, data


def test_prepare_stores_every_group(tmp_path):
    from surecall.engine.token_groups import GROUP_SPECS, GroupTables

    vocab = doubles.sample_vocabulary()
    vocab.cache_root = tmp_path
    GroupTables(vocab).prepare()
    stored = {path.name.split("-")[2] for path in tmp_path.glob("groups-*.npz")}
    assert stored == {spec.name for spec in GROUP_SPECS}


def test_mask_cache_is_bounded_by_bytes():
    from surecall.engine.matcher import MaskCache, MaskEntry

    cache = MaskCache(max_bytes=3000)
    entries = {key: MaskEntry(4096, np.arange(key, key + 10, dtype=np.int32), np.zeros(10, dtype=np.int32)) for key in range(5)}
    for key, entry in entries.items():
        cache.put(key, entry)
        assert cache.used <= 3000 or len(cache) == 1
    assert cache.get(4) is entries[4]
    assert cache.get(0) is None  # least recently used went first
    assert cache.used == sum(cache.get(k).nbytes for k in range(5) if cache.get(k) is not None)
    kept = [k for k in range(5) if cache.get(k) is not None]
    cache.discard(kept[0])
    cache.discard(kept[0])  # a key no longer there is no error
    assert cache.get(kept[0]) is None and len(cache) == len(kept) - 1
    assert cache.used == sum(cache.get(k).nbytes for k in kept[1:])


def test_mask_cache_counts_an_entry_as_stored_even_after_it_grows():
    from surecall.engine.matcher import MaskCache, MaskEntry

    cache = MaskCache(max_bytes=20_000)
    stored = {}
    for key in range(40):
        entry = MaskEntry(4096, np.arange(key, key + 300, dtype=np.int32), np.zeros(300, dtype=np.int32))
        cache.put(key, entry)
        stored[key] = entry.nbytes
        # Reading the sorted ids and ends makes arrays the entry keeps: it grows after it was counted.
        assert len(entry.ids) == 300 and len(entry.ends) == 300 and entry.nbytes > stored[key]
        held = [k for k in stored if cache.get(k) is not None]
        assert cache.used == sum(stored[k] for k in held)
        assert cache.used <= 20_000 or len(cache) == 1
    assert 0 < len(cache) < 40


@pytest.mark.parametrize(
    ("pattern", "prefix", "group"),
    [
        (r'"[^"\\]*"', b'"', "json_string"),
        (r'"[^"\\\x00-\x1f]*"', b'"', "json_string"),
        (r"[a-z]*!", b"", None),  # lowercase only: no group fits, the plain walk is used
        (r"[0-9]+", b"1", "digits"),
        (r'"[^"é]*"', b'"', "json_string_ascii"),  # one excluded character disables the non-ASCII group
        (r"(.|\n)*", b"", "text"),
    ],
)
def test_loop_group_choice_matches_the_grammar(vocab, pattern, prefix, group):
    from surecall.engine import Grammar

    grammar = Grammar.from_regex(pattern)
    matcher = Matcher(grammar, vocab)
    for token_id in vocab.tokenize_bytes(prefix) if prefix else []:
        matcher.advance(token_id)
    chosen = matcher._loop_group(matcher.config)
    assert (chosen.spec.name if chosen else None) == group
    assert set(matcher.allowed_token_ids().tolist()) - {0, 1} == doubles.brute_force_allowed(grammar.automaton, vocab, matcher.config)


def test_zero_budget_allows_only_the_end_when_the_empty_output_is_valid(vocab):
    grammar = doubles.FakeGrammar(doubles.finite_language(["", "ab"]))
    matcher = Matcher(grammar, vocab, max_tokens=0)
    assert set(matcher.allowed_token_ids().tolist()) == set(vocab.eos_token_ids)
    assert matcher.advance(vocab.tokenize_bytes(b"ab")[0]) is Status.REJECTED
    assert matcher.advance(EOS) is Status.FINISHED
    with pytest.raises(TokenBudgetError):
        Matcher(doubles.FakeGrammar(doubles.finite_language(["ab"])), vocab, max_tokens=0)


def test_group_tables_do_not_keep_their_vocabulary_alive():
    import gc
    import weakref

    from surecall.engine.token_groups import group_tables_for

    vocab = doubles.sample_vocabulary()
    group_tables_for(vocab)
    trie = weakref.ref(vocab.trie)
    del vocab
    gc.collect()
    assert trie() is None


def _brute_force_ends(automaton, vocab, config) -> dict[int, int]:
    ends = {}
    for token_id in vocab.normal_ids.tolist():
        end = automaton.step_bytes(config, vocab.token_bytes(token_id))
        if end != -1:
            ends[token_id] = end
    return ends


def _assert_mask_and_ends(matcher, expected: dict[int, int]) -> None:
    """The matcher's mask at its configuration allows exactly ``expected``'s tokens, and a
    walk that keeps each token's configuration (a token budget's) finds ``expected``."""
    assert matcher._entry(matcher.config).ids.tolist() == sorted(expected)
    assert doubles.walked_tokens(matcher, matcher.config) == expected


@pytest.mark.parametrize(
    ("pattern", "text", "groups"),
    [
        (r'"[^"\\]{0,6}"', b'"ab\xc3\xa9 "', {"json_string"}),  # a counter: members decided by their length
        (r'"[^"\\]{2,9}"', b'"\xe6\x97\xa5 ok"', {"json_string"}),
        (r"[a-z]{1,4}[0-9]{0,3}!", b"ab12!", {"digits"}),  # lowercase alone fits no group; digits count
        (r"[a-z]{1,4}!", b"ab!", set()),
        (r"[A-Za-z]{0,5}-[0-9]{1,3}", b"Ab-12", {"letters", "digits"}),
        (r'"[^"é]{0,7}"', b'"x y"', {"json_string_ascii"}),
        # a hostname label: letters chain along the counts, "-" and digits leave the group
        (r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,12}[A-Za-z0-9])?\.com", b"mail-01x.com", {"letters"}),
    ],
)
# A group under 1/share of the vocabulary is left to the plain walk: both ways must agree.
@pytest.mark.parametrize("walk_share", [1, 10**9], ids=["plain-walk", "group-walk"])
def test_chain_groups_agree_with_brute_force(vocab, monkeypatch, pattern, text, groups, walk_share):
    # Bounded repetitions give every count its own configuration: the group shortcut
    # follows the chain of counts, and must find the same tokens and end configurations
    # as stepping every token.
    from surecall.engine import Grammar
    from surecall.engine import matcher as matcher_module

    monkeypatch.setattr(matcher_module, "_GROUP_WALK_SHARE", walk_share)

    grammar = Grammar.from_regex(pattern)
    automaton = grammar.automaton
    matcher = Matcher(grammar, vocab)
    chains_seen = set()
    for value in text:
        found = matcher._chain_group(matcher.config)
        if found is not None and found[1] is not None:
            chains_seen.add(found[0].spec.name)
        expected = _brute_force_ends(automaton, vocab, matcher.config)
        _assert_mask_and_ends(matcher, expected)
        assert matcher.advance(vocab.tokenize_bytes(bytes([value]))[0]) is not Status.REJECTED
    assert chains_seen == groups
    assert matcher.is_accepting()


@pytest.mark.parametrize("budget", [0, 1, 3, 256])
def test_sparse_walk_hands_over_to_the_level_walk_without_losing_tokens(vocab, monkeypatch, budget):
    # The depth-first walk stops after ``budget`` node visits and passes what is still
    # pending to the level walk; wherever it stops, the masks stay exact.
    from surecall.engine import matcher as matcher_module

    monkeypatch.setattr(matcher_module, "_SPARSE_BUDGET", budget)
    automaton = doubles.json_like_record()
    matcher = Matcher(doubles.FakeGrammar(automaton), vocab)
    matcher._tables = matcher_module._AutomatonTables(vocab)  # masks of this budget only
    text = '{"name": "héllo 日本", "note": "x\\"y"}'.encode()
    for token_id in vocab.tokenize_bytes(text):
        expected = doubles.brute_force_allowed(automaton, vocab, matcher.config)
        assert set(matcher.allowed_token_ids().tolist()) == expected
        matcher.advance(token_id)
    assert matcher.text_bytes() == text


@pytest.mark.parametrize(
    ("pattern", "text", "excepted"),
    [
        # A free key next to known ones: any string, but "v" may start a known key.
        (r'"(var1|var2|[^"\\]*)"', b'"var3"', True),
        # Next to 20 known keys of 20 first letters (a settings object) as well.
        ("\"(" + "|".join(f"{letter}key" for letter in "abcdefghijklmnopqrst") + r'|[^"\\]*)"', b'"zz"', True),
        (r'"(abc|ab|[^"\\]{0,5})"', b'"abx"', True),  # the same with a counted string
        (r'"( "x|ab|[^"\\]*)"', b'"ab"', True),  # a token leaving the string after an excepted byte
        # An excepted byte leads where most characters die: a token leaving the string
        # after it ('{"') is not one leaving after a string character.
        (r'"(\{[0-9]+|a[0-9]+|[^{a"\\][^"\\]*)"', b'"{12"', True),
        (r'"(é|[^"\\]*)"', b'"\xc3\xa9x"', False),  # a multi-byte exception: the walk takes over
        # "h\xc3" ends inside a character after an excepted byte: walked below "h" alone.
        (r'"(hi|[^"\\]*)"', b'"hx"', True),
    ],
)
def test_near_uniform_groups_agree_with_brute_force(vocab, pattern, text, excepted):
    from surecall.engine import Grammar

    grammar = Grammar.from_regex(pattern)
    automaton = grammar.automaton
    matcher = Matcher(grammar, vocab)
    exceptions_seen = False
    for value in text:
        found = matcher._chain_group(matcher.config)
        exceptions_seen |= found is not None and found[2] is not None
        expected = _brute_force_ends(automaton, vocab, matcher.config)
        _assert_mask_and_ends(matcher, expected)
        assert matcher.advance(vocab.tokenize_bytes(bytes([value]))[0]) is not Status.REJECTED
    assert exceptions_seen == excepted
    assert matcher.is_accepting()


def _walk_with_brute_force(vocab, grammar, text: bytes) -> set[str]:
    """Step ``text`` a byte at a time, checking each mask and its token ends against
    stepping every token; the names of the groups without dead bytes the walks chose."""
    from surecall.engine import matcher as matcher_module

    matcher = Matcher(grammar, vocab)
    matcher._tables = matcher_module._AutomatonTables(vocab)  # group choices of this walk only
    chosen = set()
    for value in text:
        found = matcher._chain_group(matcher.config)
        if found is not None and found[0].dead_bytes is not None:
            chosen.add(found[0].spec.name)
        expected = _brute_force_ends(grammar.automaton, vocab, matcher.config)
        _assert_mask_and_ends(matcher, expected)
        assert matcher.advance(vocab.tokenize_bytes(bytes([value]))[0]) is not Status.REJECTED
    assert matcher.is_accepting()
    return chosen


@pytest.mark.parametrize(
    ("pattern", "text", "gain", "chosen"),
    [
        # A string leaving out some signs: the string's group less them, whose members
        # holding one ("hello", " world", "no") are not allowed.
        (r'"[^"\\o ]*"', b'"ab\xc3\xa9x"', 2, True),
        (r'"[^"\\o.<]{0,6}"', b'"ab\xe6\x97\xa5x"', 2, True),  # along a counter
        # After a first character the word group chains: the string's group less the
        # signs replaces it where it has more than ``gain`` times its members.
        (r'"[A-Za-z0-9_][^"\\<>*#.%&:+?/]{0,8}"', b'"Az x"', 1, True),
        (r'"[A-Za-z0-9_][^"\\<>*#.%&:+?/]{0,8}"', b'"Az x"', 10, False),
        # "o" dies for two characters only: no chain of the group without it holds.
        (r'"[^"\\o]{2}[^"\\]*"', b'"abox"', 2, False),
    ],
)
def test_groups_without_dead_bytes_agree_with_brute_force(vocab, monkeypatch, pattern, text, gain, chosen):
    from surecall.engine import Grammar, token_groups

    monkeypatch.setattr(token_groups, "WITHOUT_BYTES_GAIN", gain)
    assert bool(_walk_with_brute_force(vocab, Grammar.from_regex(pattern), text)) == chosen


def test_groups_without_dead_bytes_are_kept_until_forgotten(vocab):
    # Made once per set of bytes and vocabulary, shared by the grammars that leave the same
    # signs out; forgotten (as the benchmark does between schemas), made again alike.
    from surecall.engine import Grammar
    from surecall.engine.token_groups import forget_groups_without

    def chosen_group(pattern):
        from surecall.engine import matcher as matcher_module

        matcher = Matcher(Grammar.from_regex(pattern), vocab)
        matcher._tables = matcher_module._AutomatonTables(vocab)
        matcher.advance(vocab.tokenize_bytes(b'"')[0])
        return matcher._chain_group(matcher.config)[0]

    first = chosen_group(r'"[^"\\o ]*"')
    assert first.dead_bytes.tolist() == [ord(" "), ord("o")]
    assert chosen_group(r'"[^"\\ o]{0,9}"') is first
    forget_groups_without()
    again = chosen_group(r'"[^"\\o ]*"')
    assert again is not first
    assert again.member_ids.tolist() == first.member_ids.tolist()
    assert again.exit_nodes.tolist() == first.exit_nodes.tolist()


_SIGNS = b"o .<>ae1x:"


@settings(max_examples=25, deadline=None)
@given(
    dead=st.sets(st.sampled_from(list(_SIGNS)), min_size=1, max_size=5),
    longest=st.one_of(st.none(), st.integers(0, 7)),
    text=st.lists(st.sampled_from(list(_SIGNS + "é日".encode())), max_size=7),
)
def test_strings_leaving_out_signs_walk_as_brute_force_steps(vocab, dead, longest, text):
    # Any set of left-out signs, a loop or a counter: every mask and token end is the one
    # stepping each token finds, whatever group the walk chose.
    from surecall.engine import Grammar

    left_out = "".join(re.escape(chr(value)) for value in sorted(dead))
    body = bytes(value for value in text if value not in dead)[: longest if longest is not None else None]
    try:
        body.decode()
    except UnicodeDecodeError:
        body = b""
    quantifier = "*" if longest is None else f"{{0,{longest}}}"
    grammar = Grammar.from_regex(f'"[^"\\\\{left_out}]{quantifier}"')
    _walk_with_brute_force(vocab, grammar, b'"' + body + b'"')


def test_configurations_with_too_few_live_bytes_for_a_large_group_skip_the_choice_and_keep_their_masks(vocab):
    # Once every group is loaded, a configuration with fewer live ASCII bytes than any group
    # the walk takes whole needs (a forced literal, digits, a keyword's letters) is walked
    # from the root without choosing a group; its mask and ends are the brute force's.
    from surecall.engine import Grammar
    from surecall.engine import matcher as matcher_module
    from surecall.engine.token_groups import group_tables_for

    group_tables_for(vocab).prepare()
    grammar = Grammar.from_ebnf(
        r'''start ::= "{" "\"n\": " #'-?[0-9]+' ", \"s\": \"" #'[^"\\]*' "\", \"b\": " ("true" | "false") "}" ;'''
    )
    matcher = Matcher(grammar, vocab)
    matcher._tables = matcher_module._AutomatonTables(vocab)
    skipped = []
    chosen = Matcher._too_few_bytes_for_a_large_group

    def spy(self, config):
        answer = chosen(self, config)
        skipped.append(answer)
        return answer

    text = b'{"n": -120, "s": "a b", "b": false}'
    try:
        Matcher._too_few_bytes_for_a_large_group = spy
        for token_id in vocab.tokenize_bytes(text):
            expected = _brute_force_ends(grammar.automaton, vocab, matcher.config)
            _assert_mask_and_ends(matcher, expected)
            assert matcher.advance(token_id) is not Status.REJECTED
    finally:
        Matcher._too_few_bytes_for_a_large_group = chosen
    assert matcher.is_accepting()
    assert any(skipped) and not all(skipped)  # the digits and keywords skip, the string does not


def _successor_stats_by_definition(row: np.ndarray) -> tuple:
    from surecall.engine.token_groups import GROUP_SPECS

    by_group = []
    for spec in GROUP_SPECS:
        successors = [int(row[value]) for value in sorted(spec.ascii_bytes)]
        common = successors[0] if len(set(successors)) == 1 else None
        most = max(set(successors), key=successors.count)
        others = sum(successor != most for successor in successors)
        by_group.append((common, most, others) if 2 * others < len(successors) else (common, None, None))
    return int((row >= 0).sum()), tuple(by_group)


@settings(max_examples=300, deadline=None)
# Ties hold no majority: all 128 bytes split in halves, and the ten digits.
@example(common=0, changes=[(value, 1) for value in range(64)])
@example(common=2, changes=[(value, -1) for value in range(0x30, 0x35)])
@given(
    common=st.integers(-1, 3),
    changes=st.lists(st.tuples(st.integers(0, 127), st.integers(-1, 5)), max_size=90),
)
def test_successor_stats_natively_and_in_numpy_follow_their_definition(common, changes):
    # A row most of whose bytes share a successor, some bytes (up to most) changed: the
    # groups' shared successor, majority and the count of other bytes, both ways.
    from surecall.engine import token_groups

    row = np.full(128, common, dtype=np.int32)
    for value, successor in changes:
        row[value] = successor
    expected = _successor_stats_by_definition(row)
    if native.successor_stats is not None:
        assert token_groups.successor_stats(row) == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "successor_stats", None)
        assert token_groups.successor_stats(row) == expected


_MULTI_BYTE_SAMPLES = ["é", "߿", "ࠀ", "日", "\ud7ff", "\ue000", "￿", "𐀀", "😀", "\U0010ffff"]


@pytest.mark.parametrize(
    ("pattern", "prefix", "agrees"),
    [
        (r'"[^"\\]*"', b'"', True),
        (r'"[^"\\]{0,4}"', b'"ab', True),
        (r'"(x|[^"\\])*"', b'"', True),
        (r'"[^"é]*"', b'"', False),  # é goes elsewhere
        (r'"[a-z\u00e0-\u00ff]*"', b'"', False),  # only some two-byte characters
    ],
)
def test_utf8_agreement_read_off_the_nfa_matches_stepping(pattern, prefix, agrees):
    from surecall.engine import Grammar

    automaton = Grammar.from_regex(pattern).automaton
    config = automaton.step_bytes(automaton.initial, prefix)
    ascii_byte = ord("a")
    assert automaton.utf8_agrees(config, ascii_byte) == agrees
    if agrees:
        target = automaton.step(config, ascii_byte)
        for char in _MULTI_BYTE_SAMPLES:
            assert automaton.step_bytes(config, char.encode("utf-8", "surrogatepass")) == target, char


def _string_vocabulary():
    from surecall.engine.vocab import TokenVocabulary

    pieces = [b"a" * n for n in range(2, 17)] + [
        b"hello", b" world", "é".encode() * 3, "日本語".encode(), b'ab"', b'aaaaaaaa"', b"a\\", b"\xc3", b"a\xc3",
    ]
    table = [b"<|endoftext|>"] + [bytes([b]) for b in range(256)] + pieces
    return TokenVocabulary(table, special_ids={0}, eos_token_ids={0})


@pytest.mark.parametrize("low, high", [(0, 40), (3, 12), (20, 26), (1, 4)])
def test_masks_of_counted_strings_equal_brute_force_where_chains_count_on(low, high, monkeypatch):
    # A bounded string's chain of configurations (one per character count) is made by
    # counting on instead of stepping where it can: every mask and every token's end
    # must still be what stepping the token's bytes gives.
    from surecall.engine.automaton import ByteAutomaton
    from surecall.engine.grammar import Grammar
    from surecall.engine.ir import chars, literal, repeat, seq

    counted_on = []
    count_shifted = ByteAutomaton.count_shifted
    monkeypatch.setattr(
        ByteAutomaton, "count_shifted", lambda self, config, by: counted_on.append(by) or count_shifted(self, config, by)
    )
    vocab = _string_vocabulary()
    body = chars([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
    grammar = Grammar({"start": seq(literal('"'), repeat(body, low, high), literal('"'))})
    matcher = Matcher(grammar, vocab)
    automaton = matcher.automaton
    text = ('"' + "a" * min(high, 30) + '"').encode()
    for token_id in vocab.tokenize_bytes(text):
        config = matcher.config
        found = doubles.walked_tokens(matcher, config)
        assert set(found) == doubles.brute_force_allowed(automaton, vocab, config)
        for allowed, end in found.items():
            assert end == automaton.step_bytes(config, vocab.token_bytes(allowed)), allowed
        assert matcher.advance(token_id) != Status.REJECTED
    assert matcher.is_accepting()
    if high - low > 8:
        assert counted_on, "the chains never counted on"


def test_a_counted_chain_makes_what_a_mask_reads_and_the_rest_when_a_budget_reads_it():
    # Counting on leaves the configurations between unmade: the counts of the group's
    # exits are made for the mask, the members' ones only when their ends are read.
    from surecall.engine.grammar import Grammar
    from surecall.engine.ir import chars, literal, repeat, seq
    from surecall.engine.matcher import _LAZY

    vocab = _string_vocabulary()
    body = chars([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
    grammar = Grammar({"start": seq(literal('"'), repeat(body, 0, 40), literal('"'))})
    plain = Matcher(grammar, vocab)
    quote = vocab.tokenize_bytes(b'"')
    assert plain.advance_many(quote) != Status.REJECTED
    config, automaton = plain.config, plain.automaton
    allowed = plain.allowed_token_ids().tolist()
    group, chain, exceptions = plain._tables.chain_groups[config]
    assert exceptions is None
    assert (chain <= _LAZY).any() and (chain[group.chain_counts] > _LAZY).all()
    # A budgeted matcher of the same grammar shares the chain (the plain matcher's mask holds
    # its tokens' bits alone: it walks its own) and reads every token's end.
    budgeted = Matcher(grammar, vocab, max_tokens=60)
    assert budgeted.advance_many(quote) != Status.REJECTED
    entry = budgeted._entry(config)
    assert budgeted._tables.chain_groups[config][1] is chain and entry.ends_walked
    ends = dict(zip(entry.ids.tolist(), entry.ends.tolist()))
    assert sorted(ends) == allowed
    for token_id, end in ends.items():
        assert end == automaton.step_bytes(config, vocab.token_bytes(token_id)), token_id
    assert set(entry.distinct_ends().tolist()) == set(ends.values())
    assert budgeted.allowed_token_ids().tolist() == allowed  # every token fits 60


def _assert_walk_finds_what_stepping_finds(vocab, pattern: str, prefix: bytes) -> None:
    """At the configuration after ``prefix``, the walk's tokens and their ends (deferred ones
    read) are those that stepping each token's bytes gives."""
    from surecall.engine.grammar import Grammar

    matcher = Matcher(Grammar.from_regex(pattern), vocab)
    automaton = matcher.automaton
    config = automaton.step_bytes(automaton.initial, prefix)
    if config == DEAD:
        return
    expected = {}
    for token in vocab.trie.token_ids.tolist():
        end = automaton.step_bytes(config, vocab.token_bytes(token))
        if end != DEAD:
            expected[token] = end
    assert doubles.walked_tokens(matcher, config) == expected


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(st.one_of(_TOKEN_BYTES, _MIXED_BYTES), min_size=1, max_size=60),
    pattern=st.sampled_from(['"[^"a]*a[^"]*"', '"[^"é]*é[^"]*"', '"[^"]*"x', '"[a-h ]*"', '(a|[^a]b|日)*']),
    prefix=st.sampled_from([b"", b'"', b'"x', b'"xa', "\"日".encode()]),
)
def test_walks_taking_whole_character_subtrees_find_what_stepping_finds(pieces, pattern, prefix):
    # Where every ASCII byte below a trie node and every multi-byte character lead back to
    # the configuration, the walk takes the node's tokens at once when they go on in whole
    # characters: the tokens and their ends must be those that stepping each token finds.
    vocab = _vocabulary_of(pieces)
    _assert_walk_finds_what_stepping_finds(vocab, pattern, prefix)


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_walks_take_subtrees_of_whole_characters_at_once():
    # Below "y" every token goes on in whole characters that lead the in-string
    # configuration back to itself: the walk asks once whether multi-byte characters loop.
    from surecall.engine.grammar import Grammar

    words = [b"y", "yé".encode(), "y日本".encode(), "y日本語".encode(), b"yb", "yé日".encode(), b"a", b"x", b"xa"]
    vocab = _vocabulary_of(words)
    matcher = Matcher(Grammar.from_regex('"[^"a]*a[^"]*"'), vocab)
    automaton = matcher.automaton
    config = automaton.step_bytes(automaton.initial, b'"')
    asked = []
    agrees = automaton.utf8_agrees
    automaton.utf8_agrees = lambda at, ascii_byte: asked.append(at) or agrees(at, ascii_byte)
    found = doubles.walked_tokens(matcher, config)
    assert asked == [config], "the walk did not ask whether characters loop"
    assert found == {token: automaton.step_bytes(config, vocab.token_bytes(token)) for token in vocab.trie.token_ids.tolist()}


def test_an_equal_vocabulary_made_again_serves_a_grammar_after_the_first_is_gone():
    # Masks are shared by vocabularies with the same tokens; the token groups must come
    # from a trie that is still alive.
    import gc

    from surecall.engine.grammar import Grammar

    grammar = Grammar.from_regex('"[^"]*"')
    pieces = [b'"', b"ab", b"abc", b"a b", "é".encode(), b'c"']
    first = _vocabulary_of(pieces)
    Matcher(grammar, first)
    del first
    gc.collect()
    again = _vocabulary_of(pieces)
    matcher = Matcher(grammar, again)
    matcher.advance(again.tokenize_bytes(b'"')[0])
    assert {again.token_bytes(token) for token in matcher.allowed_token_ids().tolist()} == {
        b'"', b"ab", b"abc", b"a b", "é".encode(), b'c"'
    }


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(_TOKEN_BYTES, min_size=1, max_size=40),
    loops=st.lists(st.sets(st.integers(0x61, 0x68)), min_size=1, max_size=3),
    starts=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2)), min_size=1, max_size=6),
)
def test_native_walk_reports_the_tokens_at_its_starts_when_asked(pieces, loops, starts):
    trie = _vocabulary_of(pieces).trie
    edges = {state: dict.fromkeys(looping, state) for state, looping in enumerate(loops)}
    nodes = np.array([node % trie.num_nodes for node, _ in starts], dtype=np.int32)
    configs = np.array([config % len(loops) for _, config in starts], dtype=np.int32)
    found = {}
    for report_starts in (False, True):
        room = 2 * len(starts) * len(trie.token_ids)
        ids, ends = np.empty(room, dtype=np.int32), np.empty(room, dtype=np.int32)
        count = native.walk(
            doubles.LazyTableAutomaton(edges, {0}), trie.native_tables, nodes, configs, ids, ends,
            report_starts=report_starts,
        )
        found[report_starts] = sorted(zip(ids[:count].tolist(), ends[:count].tolist()))
    at_starts, owner = trie.tokens_at_nodes(nodes)
    assert found[True] == sorted(found[False] + list(zip(at_starts.tolist(), configs[owner].tolist())))


def _partial_character_vocabulary():
    from surecall.engine.vocab import TokenVocabulary

    # Enough whole-character pieces that the string's token group is walked as a group,
    # and pieces ending inside two- and three-byte characters, alone and after text.
    pieces = [bytes([a, b]) for a in range(0x61, 0x7B) for b in range(0x61, 0x7B)] + [
        "é".encode(), "日本".encode(), b"\xc3", b"\xe6", b"\xe6\x97", b"ab\xc3", b"a\xe6\x97", b'a"', b'"', b'",',
    ]
    table = [b"<|endoftext|>"] + [bytes([b]) for b in range(256)] + pieces
    return TokenVocabulary(table, special_ids={0}, eos_token_ids={0})


@pytest.mark.parametrize("pattern", ['"[^"\\\\]*"', '"[^"\\\\]{0,6}"', '"[^"\\\\]*",?'])
def test_masks_inside_strings_defer_the_configurations_inside_characters(pattern):
    # A token ending inside a character is allowed where every character leads on, without
    # building the configuration inside the character; a token budget reads those
    # configurations and must get what stepping the token's bytes gives.
    from surecall.engine.grammar import Grammar, clear_automaton_cache

    vocab = _partial_character_vocabulary()
    clear_automaton_cache()  # a fresh automaton: nothing computed by earlier tests
    grammar = Grammar.from_regex(pattern)
    matcher = Matcher(grammar, vocab)
    automaton = matcher.automaton
    config = automaton.step_bytes(automaton.initial, b'"')
    token_of = {vocab.token_bytes(token): token for token in vocab.trie.token_ids.tolist()}
    partial = [token_of[piece] for piece in (b"\xc3", b"\xe6", b"\xe6\x97", b"ab\xc3", b"a\xe6\x97")]
    ids, ends, base, deferred = matcher._walk_all(config)
    # The configuration inside each partial token's last character is not computed yet.
    for piece in (b"\xc3", b"\xe6", b"ab\xc3", b"a\xe6\x97"):
        lead = len(piece) - (2 if piece.endswith(b"\x97") else 1)
        before_character = automaton.step_bytes(config, piece[:lead])
        assert automaton.transition_table[before_character, piece[lead]] == -2, piece
    from surecall.engine.matcher import MaskEntry

    expected = doubles.brute_force_allowed(automaton, vocab, config)
    entry = MaskEntry(vocab.size, ids, ends, base, deferred)
    assert set(entry.ids.tolist()) == expected
    assert set(partial) <= expected
    assert deferred, "no token's configuration was deferred"
    for token, end in zip(entry.ids.tolist(), entry.ends.tolist()):
        assert end == automaton.step_bytes(config, vocab.token_bytes(token)), vocab.token_bytes(token)
    # A matcher without a budget keeps its masks' bits alone; a walk that keeps where tokens
    # lead (a budget's) defers the configurations inside characters, and a budget matcher
    # advances through a token that ends inside a character.
    unbudgeted = Matcher(grammar, vocab)
    assert unbudgeted.advance(token_of[b'"']) == Status.ACCEPTED
    assert set(partial) <= set(unbudgeted.allowed_token_ids().tolist())
    shared = unbudgeted._new_entry(config, ends=True)
    assert shared._deferred, "the entry deferred nothing"
    # The mask cache is bounded by bytes: what the deferred ends hold counts.
    held = shared.words.nbytes + sum(part.nbytes for part in shared._deferred)
    assert shared.nbytes >= held and all(part.nbytes > 0 for part in shared._deferred)
    budgeted = Matcher(grammar, vocab, max_tokens=6)
    assert budgeted.advance(token_of[b'"']) == Status.ACCEPTED
    allowed = set(budgeted.allowed_token_ids().tolist())
    assert set(partial) <= allowed
    assert budgeted.advance(token_of[b"\xe6\x97"]) == Status.ACCEPTED
    assert not set(budgeted.allowed_token_ids().tolist()) & {token_of[b'"'], token_of[b"a"]}
    assert budgeted.advance(token_of[b"\xa5"]) == Status.ACCEPTED
    assert budgeted.advance(token_of[b'"']) in (Status.ACCEPTED, Status.FINISHED)
    assert budgeted.is_accepting()


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_masks_where_every_member_of_a_group_stays_live_match_stepping_each_token(monkeypatch):
    # Inside a string that must hold "ab" somewhere (a pattern searched for), a letter leads
    # on or back, so no chain of configurations holds, yet every string of the group's
    # characters stays live: the walk allows the group whole, unstepped, and steps only the
    # paths leaving it.
    from surecall.engine.grammar import Grammar, clear_automaton_cache

    vocab = _partial_character_vocabulary()
    pattern = '"[^"\\\\]*ab[^"\\\\]*"'
    clear_automaton_cache()
    grammar = Grammar.from_regex(pattern)
    matcher = Matcher(grammar, vocab)
    automaton = matcher.automaton
    token_of = {vocab.token_bytes(token): token for token in vocab.trie.token_ids.tolist()}
    for prefix in (b'"', b'"xa', b'"\xe6\x97\xa5a', b'"xab'):
        config = automaton.step_bytes(automaton.initial, prefix)
        entry = matcher._entry(config)
        # Before "ab" the group is allowed as live, unstepped, with where its characters lead;
        # once "ab" is read, every character leads back: the group loops, and a matcher
        # without a budget keeps the mask's bits alone.
        assert entry.unwalked is not None
        assert (entry.unwalked.reach is None) == prefix.endswith(b"ab"), prefix
        assert set(entry.ids.tolist()) == doubles.brute_force_allowed(automaton, vocab, config), prefix
    for piece in (b'"', b"xa", b"\xe6\x97", b"\xa5", b"ab"):
        allowed = set(matcher.allowed_token_ids().tolist())
        assert token_of[piece] in allowed, piece
        # The closing quote waits for "ab".
        assert (token_of[b'"'] in allowed) == (matcher.text_bytes() == b""), piece
        assert matcher.advance(token_of[piece]) == Status.ACCEPTED, piece
    assert token_of[b'"'] in set(matcher.allowed_token_ids().tolist())
    assert matcher.advance(token_of[b'"']) == Status.FINISHED

    # A budget bounds the unwalked tokens by where the group's characters lead: with tokens
    # to spare the mask serves as it is.
    config = automaton.step_bytes(automaton.initial, b'"')
    generous = Matcher(grammar, vocab, max_tokens=40)
    assert generous.advance(token_of[b'"']) == Status.ACCEPTED
    assert not generous._entry(config).ends_walked
    assert set(generous.allowed_token_ids().tolist()) == doubles.brute_force_allowed(automaton, vocab, config)

    def budget_masks(grammar):
        budgeted = Matcher(grammar, vocab, max_tokens=4)
        masks = []
        for piece in (b'"', b"xa", b"b"):
            assert budgeted.advance(token_of[piece]) == Status.ACCEPTED, piece
            masks.append(set(budgeted.allowed_token_ids().tolist()))
        return budgeted, masks

    # Where they may not fit, the mask is walked again with every state: the budget then
    # allows what it allows without live groups.
    budgeted, masks = budget_masks(grammar)
    entry = budgeted._entry(config)
    assert entry.ends_walked
    for token, end in zip(entry.ids.tolist(), entry.ends.tolist()):
        assert end == automaton.step_bytes(config, vocab.token_bytes(token)), vocab.token_bytes(token)
    monkeypatch.setattr(Matcher, "_live_group", lambda self, config, larger_than=None: None)
    clear_automaton_cache()
    assert budget_masks(Grammar.from_regex(pattern))[1] == masks
    assert token_of[b"ab"] in masks[0] and token_of[b'"'] in masks[2]


@pytest.mark.skipif(not native.AVAILABLE, reason="native extension not built")
def test_masks_walked_for_their_bits_alone_are_walked_again_for_a_budget(vocab):
    # A matcher without a budget or token hooks reads no token's configuration (``advance``
    # steps a token's bytes itself): where the native walk covers a whole mask (a forced
    # literal, digits) it sets the mask's bits alone. A budget matcher sharing the masks
    # walks such a mask again, with every token's configuration.
    from surecall.engine import Grammar
    from surecall.engine import matcher as matcher_module

    grammar = Grammar.from_ebnf(r'''start ::= "{\"n\": " #'-?[0-9]+' "}" ;''')
    lean = Matcher(grammar, vocab)
    lean._tables = matcher_module._AutomatonTables(vocab)  # masks of this test only
    automaton = grammar.automaton
    text = b'{"n": -120}'
    configs, bits_only = [], 0
    for token_id in vocab.tokenize_bytes(text):
        config = lean.config
        entry = lean._entry(config)
        bits_only += entry.unwalked is not None and entry.unwalked.reach is None
        assert set(entry.ids.tolist()) == doubles.brute_force_allowed(automaton, vocab, config)
        configs.append(config)
        assert lean.advance(token_id) is not Status.REJECTED
    # A forced literal or a number's few live bytes: every mask here is one walk's bits.
    assert lean.is_accepting() and bits_only == len(configs)
    budgeted = Matcher(grammar, vocab, max_tokens=len(text))
    budgeted._tables = lean._tables
    for config, token_id in zip(configs, vocab.tokenize_bytes(text)):
        entry = budgeted._entry(config)
        assert entry.ends_walked
        assert dict(zip(entry.ids.tolist(), entry.ends.tolist())) == _brute_force_ends(automaton, vocab, config)
        assert budgeted.advance(token_id) is not Status.REJECTED
    assert budgeted.is_accepting()


def test_a_lean_matchers_bitmask_is_its_own_walk_and_exact(vocab):
    # Without a budget, token hooks or a text check, ``fill_bitmask`` reads the mask's entry
    # directly and makes it when new (``Matcher._mask_words``): asked first at every step,
    # with no other matcher's masks to share, its bits are the tokens stepping allows.
    from surecall.engine import Grammar
    from surecall.engine import matcher as matcher_module

    grammar = Grammar.from_ebnf(
        r'''start ::= "{" pair ("," pair)* "}" ; pair ::= #'"[a-z]{1,3}"' ":" (#'-?[0-9]+' | #'"[^"]*"') ;'''
    )
    matcher = Matcher(grammar, vocab)
    matcher._tables = matcher_module._AutomatonTables(vocab)
    assert matcher._lean_step is not None
    automaton = grammar.automaton
    text = '{"ab":-12,"c":"x y","dd":7}'.encode()
    buffer = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    for token_id in vocab.tokenize_bytes(text):
        matcher.fill_bitmask(buffer)
        bits = {i for i in range(vocab.size) if (int(buffer.view(np.uint32)[i >> 5]) >> (i & 31)) & 1}
        expected = doubles.brute_force_allowed(automaton, vocab, matcher.config)
        if automaton.is_accepting(matcher.config):
            expected |= set(vocab.eos_token_ids)
        assert bits == expected
        assert matcher.advance(token_id) is not Status.REJECTED
    # Nothing may follow the closing brace: the document is finished, no token is allowed.
    matcher.fill_bitmask(buffer)
    assert matcher.is_finished() and not buffer.any()


def _deferring_entries(matcher, config) -> list:
    """The deferred ends of the mask at ``config``, walked afresh (keeping where its tokens
    lead: a matcher without a budget keeps its masks' bits alone)."""
    matcher._tables.masks.discard(config)
    entry = matcher._entry(config) if matcher.max_tokens is not None else matcher._new_entry(config, ends=True)
    return entry.deferred or []


def test_budget_masks_bound_tokens_inside_characters_without_their_configurations():
    # Under a budget that does not bind, a token ending inside a character is allowed by
    # where its whole character leads: its own configuration is not built. Once the budget
    # binds, every token's cost decides, as each token's own state gives it.
    from surecall.engine.grammar import Grammar, clear_automaton_cache

    vocab = _partial_character_vocabulary()
    clear_automaton_cache()
    grammar = Grammar.from_regex('"[^"\\\\]{0,8}"')
    token_of = {vocab.token_bytes(token): token for token in vocab.trie.token_ids.tolist()}
    roomy = Matcher(grammar, vocab, max_tokens=40)
    assert roomy.advance(token_of[b'"']) == Status.ACCEPTED
    assert roomy._defers_partials_under_budget()
    config = roomy.config
    deferred = _deferring_entries(roomy, config)
    assert deferred, "the budget's mask deferred nothing"
    allowed = set(roomy.allowed_token_ids().tolist())
    assert roomy._entry(config).deferred, "a budget that does not bind resolved the deferred ends"
    for piece in (b"\xc3", b"\xe6\x97", b"ab\xc3"):
        lead = len(piece) - (2 if piece.endswith(b"\x97") else 1)
        before_character = roomy.automaton.step_bytes(config, piece[:lead])
        assert roomy.automaton.transition_table[before_character, piece[lead]] == -2, piece
    assert allowed == doubles.brute_force_allowed(roomy.automaton, vocab, config)
    for budget in range(3, 9):
        tight = Matcher(grammar, vocab, max_tokens=budget)
        assert tight.advance(token_of[b'"']) == Status.ACCEPTED
        while not tight.is_finished():
            expected = doubles.allowed_within_budget(tight)
            allowed = set(tight.allowed_token_ids().tolist()) - vocab.eos_token_ids
            assert allowed == expected, (budget, tight.remaining_tokens)
            # The longest allowed token first: pieces of characters, then their ends.
            choice = max(allowed | set(vocab.eos_token_ids) if tight.is_accepting() else allowed,
                         key=lambda token: (len(vocab.token_bytes(token)), token))
            assert tight.advance(choice) != Status.REJECTED
        assert tight.is_accepting()


def test_budget_masks_compute_every_state_where_a_byte_inside_characters_is_no_token():
    # Without a token for each byte that goes on with a character, finishing one is no
    # completion of tokens: the budget reads every state, as stepping gives it.
    from surecall.engine.grammar import Grammar
    from surecall.engine.vocab import TokenVocabulary

    # No token holds a byte that goes on with a character alone: a token ending inside one
    # ("\xc3") cannot be finished by any token at all.
    pieces = [bytes([b]) for b in range(256) if not 0x80 <= b < 0xC0] + ["é".encode(), "日".encode(), b"\xc3", b"\xe6\x97"]
    pieces += [bytes([a, b]) for a in range(0x61, 0x7B) for b in range(0x61, 0x7B)]
    vocab = TokenVocabulary([b"<eos>"] + pieces, special_ids={0}, eos_token_ids={0})
    grammar = Grammar.from_regex('"[^"\\\\]{0,8}"')
    matcher = Matcher(grammar, vocab, max_tokens=40)
    assert matcher.advance(vocab.tokenize_bytes(b'"')[0]) == Status.ACCEPTED
    assert not matcher._defers_partials_under_budget()
    assert not _deferring_entries(matcher, matcher.config)
    assert Matcher(grammar, vocab)._defers_partials_under_budget() is False
    # Under budgets, each token's own cost decides (a walk without one defers the ends).
    for budget in range(2, 9):
        tight = Matcher(grammar, vocab, max_tokens=budget)
        assert tight.advance(vocab.tokenize_bytes(b'"')[0]) == Status.ACCEPTED
        assert _deferring_entries(Matcher(grammar, vocab), tight.config), "nothing to defer without a budget either"
        expected = doubles.allowed_within_budget(tight)
        assert set(tight.allowed_token_ids().tolist()) - vocab.eos_token_ids == expected, budget
        assert vocab.tokenize_bytes(b"\xc3")[0] not in expected
        assert expected, budget


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(_MIXED_BYTES, min_size=1, max_size=40),
    pattern=st.sampled_from(['"[^"\\\\]*"', '"[^"\\\\]{2,9}"', '"([^"\\\\]|\\\\n)*",?', '"[^"\\\\é]*"x?']),
    prefix=st.sampled_from([b'"', b'"x', "\"日".encode()]),
)
def test_a_deferred_token_is_bounded_by_where_its_whole_character_leads(pieces, pattern, prefix):
    # What a budget's masks rely on: the completion bound of a token ending inside a
    # character is at most the bytes that finish the character plus the bound of where a
    # whole character leads from the token's start.
    from surecall.engine.grammar import Grammar
    from surecall.engine.token_groups import MOST_BYTES_TO_FINISH_A_CHARACTER

    pairs = [bytes([a, b]) for a in range(0x61, 0x7B) for b in range(0x61, 0x7B)]
    partial = [b"\xc3", b"\xe6", b"\xe6\x97", b"a\xc3", b"ab\xe6\x97", b"abc\xf0\x9f"]
    vocab = _vocabulary_of(pairs + [bytes([b]) for b in range(256)] + partial + pieces)
    matcher = Matcher(Grammar.from_regex(pattern), vocab, max_tokens=1000)
    automaton = matcher.automaton
    config = automaton.step_bytes(automaton.initial, prefix)
    assert config != DEAD
    for part in _deferring_entries(matcher, config):
        ends = part.resolve()
        bounds_after = [automaton.completion_bound(int(c), vocab.single_byte_tokens) for c in part.character_ends()]
        for end in ends.tolist():
            assert end != DEAD
            bound = automaton.completion_bound(end, vocab.single_byte_tokens)
            assert bound <= MOST_BYTES_TO_FINISH_A_CHARACTER + max(bounds_after)


def test_an_automaton_whose_masks_deferred_ends_is_freed_with_its_grammar():
    # Masks are kept per automaton in a table weakly keyed by it: nothing they hold (the
    # deferred ends included) may keep the automaton alive once its grammar is gone.
    import gc
    import weakref

    from surecall.engine.grammar import Grammar, clear_automaton_cache

    vocab = _partial_character_vocabulary()
    clear_automaton_cache()
    grammar = Grammar.from_regex('"[^"\\\\]*"')
    matcher = Matcher(grammar, vocab)
    matcher.advance(vocab.tokenize_bytes(b'"')[0])
    matcher.allowed_token_ids()
    # A walk keeping where tokens lead (a budget's) defers those inside characters.
    assert matcher._new_entry(matcher.config, ends=True)._deferred, "the mask deferred nothing"
    freed = weakref.ref(matcher.automaton)
    del grammar, matcher
    clear_automaton_cache()
    gc.collect()
    assert freed() is None, "the automaton outlived its grammar"



@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(_MIXED_BYTES, min_size=1, max_size=40),
    pattern=st.sampled_from([
        '"[^"\\\\]*"', '"[^"\\\\]{2,9}"', '"[^"\\\\]{0,3}"', '"[^"\\\\a]*a?[^"\\\\]*"', '"([^"\\\\]|\\\\n)*",?',
        '"[^"\\\\é]*"', '"[^"\\\\\\u00c0-\\u00ff]*"',
    ]),
    prefix=st.sampled_from([b'"', b'"x', "\"日".encode(), b'"ab']),
)
def test_masks_with_deferred_ends_find_what_stepping_finds(pieces, pattern, prefix):
    # Random pieces (whole characters, pieces of characters, bytes UTF-8 never uses) beside
    # enough ASCII pairs for the string's token group to be walked as a group: the tokens
    # allowed, and each one's configuration once read, are those stepping its bytes gives,
    # whatever the walk deferred (about two examples in three defer some; the test above
    # asserts that deferring happens).
    pairs = [bytes([a, b]) for a in range(0x61, 0x7B) for b in range(0x61, 0x7B)]
    partial = [b"\xc3", b"\xe6", b"\xe6\x97", b"a\xc3", b"ab\xe6\x97", b"abc\xf0\x9f"]
    vocab = _vocabulary_of(pairs + [bytes([b]) for b in range(256)] + partial + pieces)
    _assert_walk_finds_what_stepping_finds(vocab, pattern, prefix)



@pytest.mark.parametrize("max_tokens", [None, 10])
def test_an_end_of_sequence_token_that_spells_text_ends_the_sequence(max_tokens):
    # Without a budget, advancing steps a text token's bytes directly; an end-of-sequence
    # id ends the sequence (where the text may end) even when it also spells text.
    from surecall.engine import Grammar
    from surecall.engine.vocab import TokenVocabulary

    vocab = TokenVocabulary([b"a", b"b", b"ab", b"<e>"], special_ids=set(), eos_token_ids={3})
    matcher = Matcher(Grammar.from_regex("ab|a<e>b"), vocab, max_tokens=max_tokens)
    assert vocab.is_text_token(3)
    assert matcher.advance(0) is Status.ACCEPTED
    assert matcher.advance(3) is Status.REJECTED  # "a" is no whole text, though "a<e>" goes on
    assert matcher.advance(1) is Status.FINISHED  # "ab": nothing may follow
    matcher.reset()
    assert matcher.advance(2) is Status.FINISHED
    other = Matcher(Grammar.from_regex("a|ab"), vocab, max_tokens=max_tokens)
    assert other.advance(0) is Status.ACCEPTED
    assert other.advance(3) is Status.FINISHED and other.is_finished()
