"""TokenVocabulary: reading tokenizers by duck typing, the trie, greedy tokenization, the disk cache."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surecall.engine import native
from surecall.engine.trie import TokenTrie, bits_holding, distinct, pack_ids, set_ids, unpack_ids
from surecall.engine.vocab import TokenVocabulary, bytes_to_unicode

BYTE_CHARS = bytes_to_unicode()


def byte_level(data: bytes) -> str:
    return "".join(BYTE_CHARS[b] for b in data)


class AddedToken:
    def __init__(self, content: str, special: bool = True):
        self.content = content
        self.special = special


class FakeHFTokenizer:
    """The parts of a Hugging Face tokenizer that TokenVocabulary reads."""

    def __init__(self, vocab: dict[str, int], added: dict[int, AddedToken], eos_token_id: int | None):
        self._vocab = dict(vocab)
        self.added_tokens_decoder = added
        self.eos_token_id = eos_token_id
        for token_id, token in added.items():
            self._vocab[token.content] = token_id
        self.all_special_ids = [i for i, t in added.items() if t.special]

    def get_vocab(self):
        return dict(self._vocab)

    def __len__(self):
        return len(self._vocab)


class FakeTiktoken:
    def __init__(self, ranks: dict[bytes, int], special: dict[str, int]):
        self._mergeable_ranks = ranks
        self._special_tokens = special
        self.eot_token = special.get("<|endoftext|>")


def byte_level_tokenizer() -> FakeHFTokenizer:
    pieces = [bytes([b]) for b in range(256)] + [b" hello", b"\xe6\x97", "日本".encode(), b'{"', b"\n\n"]
    vocab = {byte_level(p): 3 + i for i, p in enumerate(pieces)}
    added = {0: AddedToken("<|endoftext|>"), 1: AddedToken("<|im_end|>"), 2: AddedToken("<|im_start|>")}
    added[len(pieces) + 3] = AddedToken("<tool>", special=False)
    return FakeHFTokenizer(vocab, added, eos_token_id=1)


def test_byte_level_spellings_become_exact_bytes(tmp_path):
    tok = byte_level_tokenizer()
    vocab = TokenVocabulary.from_tokenizer(tok, cache_dir=tmp_path)
    for text, token_id in tok.get_vocab().items():
        if token_id >= 3 and text != "<tool>":
            assert vocab.token_bytes(token_id) == bytes(BYTE_CHARS_INV[c] for c in text)
    assert vocab.token_bytes(tok.get_vocab()[byte_level(b" hello")]) == b" hello"
    assert vocab.token_bytes(tok.get_vocab()[byte_level(b"\xe6\x97")]) == b"\xe6\x97"
    # A non-special added token is plain text, spelled as itself rather than in the byte alphabet.
    assert vocab.token_bytes(tok.get_vocab()["<tool>"]) == b"<tool>"
    assert vocab.is_text_token(tok.get_vocab()["<tool>"])


BYTE_CHARS_INV = {c: b for b, c in BYTE_CHARS.items()}


def test_special_tokens_are_kept_apart_and_end_of_turn_tokens_end_the_sequence(tmp_path):
    vocab = TokenVocabulary.from_tokenizer(byte_level_tokenizer(), cache_dir=tmp_path)
    assert vocab.special_ids == {0, 1, 2}
    assert vocab.eos_token_ids == {0, 1}  # eos_token_id plus <|endoftext|>, not <|im_start|>
    assert not set(vocab.normal_ids.tolist()) & vocab.special_ids
    # Matching text never produces a special token, even one spelled like the text.
    assert all(i not in vocab.special_ids for i in vocab.tokenize_bytes(b"<|im_end|>"))


def test_sentencepiece_spellings():
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581Hello", "\u2581", "lo", "日"]
    tok = FakeHFTokenizer({p: i for i, p in enumerate(pieces)}, {1: AddedToken("<s>"), 2: AddedToken("</s>")}, 2)
    tok.sp_model = object()  # marks a slow SentencePiece tokenizer
    vocab = TokenVocabulary.from_tokenizer(tok, cache_dir=False)
    ids = {p: i for i, p in enumerate(pieces)}
    assert vocab.token_bytes(ids["\u2581Hello"]) == b" Hello"
    assert vocab.token_bytes(ids["\u2581"]) == b" "
    assert vocab.token_bytes(ids["<0x0A>"]) == b"\n"
    assert vocab.token_bytes(ids["<0xE6>"]) == b"\xe6"
    assert vocab.token_bytes(ids["日"]) == "日".encode()
    assert vocab.eos_token_ids == {2}


def test_tiktoken_style_vocabulary(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"hello": 256, b" world": 257, b"\xe4\xb8": 258})
    vocab = TokenVocabulary.from_tokenizer(FakeTiktoken(ranks, {"<|endoftext|>": 259, "<|im_end|>": 260}), cache_dir=tmp_path)
    assert vocab.token_bytes(258) == b"\xe4\xb8"
    assert vocab.eos_token_ids == {259, 260}
    assert vocab.special_ids == {259, 260}
    assert vocab.size == 261
    assert vocab.tokenize_bytes(b"hello world") == [256, 257]


def test_model_vocab_larger_than_tokenizer(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    vocab = TokenVocabulary.from_tokenizer(FakeTiktoken(ranks, {"<|endoftext|>": 256}), cache_dir=tmp_path, model_vocab_size=300)
    assert vocab.size == 300
    assert vocab.token_bytes(299) == b""
    assert not vocab.is_text_token(299)


def test_unreadable_tokenizer_is_a_clear_error():
    with pytest.raises(TypeError, match="cannot read a vocabulary"):
        TokenVocabulary.from_tokenizer(object())


def test_disk_cache_round_trip_and_corruption(tmp_path):
    tok = byte_level_tokenizer()
    built = TokenVocabulary.from_tokenizer(tok, cache_dir=tmp_path)
    files = list((tmp_path / "vocab").glob("*.npz"))
    assert len(files) == 1
    loaded = TokenVocabulary.from_tokenizer(tok, cache_dir=tmp_path)
    assert loaded.fingerprint == built.fingerprint
    assert [loaded.token_bytes(i) for i in range(loaded.size)] == [built.token_bytes(i) for i in range(built.size)]
    assert np.array_equal(loaded.trie.token_ids, built.trie.token_ids)
    files[0].write_bytes(b"not a cache file")
    rebuilt = TokenVocabulary.from_tokenizer(tok, cache_dir=tmp_path)
    assert rebuilt.fingerprint == built.fingerprint


def test_cache_key_changes_with_the_vocabulary(tmp_path):
    TokenVocabulary.from_tokenizer(byte_level_tokenizer(), cache_dir=tmp_path)
    other = byte_level_tokenizer()
    other._vocab[byte_level(b"xyz")] = max(other._vocab.values()) + 1
    vocab = TokenVocabulary.from_tokenizer(other, cache_dir=tmp_path)
    assert len(list((tmp_path / "vocab").glob("*.npz"))) == 2
    assert vocab.tokenize_bytes(b"xyz") == [other._vocab[byte_level(b"xyz")]]


def test_environment_variable_selects_the_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("SURECALL_CACHE", str(tmp_path))
    TokenVocabulary.from_tokenizer(byte_level_tokenizer())
    assert list((tmp_path / "vocab").glob("*.npz"))


def test_greedy_tokenization_takes_the_longest_token():
    vocab = TokenVocabulary([b"a", b"b", b"ab", b"abc", b"abcd"])
    assert vocab.tokenize_bytes(b"abcab") == [3, 2]
    assert vocab.tokenize_bytes(b"abcdb") == [4, 1]
    with pytest.raises(ValueError, match="no token"):
        vocab.tokenize_bytes(b"abz")


# Short strings over a five-letter alphabet, so that tokens share many prefixes.
byte_strings = st.lists(
    st.binary(min_size=1, max_size=6).map(lambda b: bytes(x % 5 + 97 for x in b)), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(byte_strings)
def test_trie_invariants(strings):
    trie = TokenTrie.build(strings, list(range(len(strings))))
    # Every token ends at the node its bytes lead to.
    for token_id, data in enumerate(strings):
        path = trie.descend(data)
        assert len(path) == len(data)
        assert token_id in trie.tokens_at(path[-1]).tolist()
    # Breadth-first numbering: parents precede children, levels are contiguous, and
    # each node's children are a contiguous range sorted by byte.
    assert (trie.parent[1:] < np.arange(1, trie.num_nodes)).all()
    assert (np.diff(trie.depth) >= 0).all()
    for node in range(trie.num_nodes):
        children = list(range(trie.child_start[node], trie.child_end[node]))
        assert all(trie.parent[c] == node for c in children)
        assert list(trie.byte[children]) == sorted(set(trie.byte[children]))
    # Node count equals the number of distinct non-empty prefixes.
    prefixes = {s[:k] for s in strings for k in range(1, len(s) + 1)}
    assert trie.num_nodes == len(prefixes) + 1
    # The root's children by byte, as one lookup, are the ones a search of the root finds.
    assert trie.root_children.tolist() == [trie.child(0, value) for value in range(256)]


@pytest.mark.parametrize("packer", ["native", "numpy"])
@settings(max_examples=40, deadline=None)
@given(ids=st.sets(st.integers(0, 99)), others=st.sets(st.integers(0, 99)))
def test_packed_bitsets(packer, ids, others):
    if packer == "native" and native.set_bits is None:
        pytest.skip("the native extension is not built")
    ids_array = np.array(sorted(ids), dtype=np.int32)
    with pytest.MonkeyPatch.context() as patch:
        if packer == "numpy":
            patch.setattr(native, "set_bits", None)
            patch.setattr(native, "bit_ids", None)
        words = pack_ids(ids_array, 100)
        assert len(words) == 4
        for token_id in range(100):
            assert bool(words[token_id >> 5] >> (token_id & 31) & 1) == (token_id in ids)
        assert unpack_ids(words, 100).tolist() == sorted(ids)
        # Bits past the vocabulary's size (a mask's last word) are no ids; words that stop
        # short of it (a token group's, at its last member) hold the ids they cover.
        assert unpack_ids(words, 50).tolist() == sorted(i for i in ids if i < 50)
        assert unpack_ids(words[:2], 100).tolist() == sorted(i for i in ids if i < 64)
        # Setting ids into words that hold others keeps those (a mask on top of a group's).
        set_ids(words, np.array(sorted(others), dtype=np.int32))
        assert unpack_ids(words, 100).tolist() == sorted(ids | others)


@settings(max_examples=60, deadline=None)
@given(ids=st.sets(st.integers(0, 4998), max_size=400))
def test_unpacking_expands_few_set_words_alone_with_the_same_ids(ids):
    # Masks of a few keys set a handful of 157 words: those words alone are expanded.
    words = pack_ids(np.array(sorted(ids), dtype=np.int32), 4999)
    assert unpack_ids(words, 4999).tolist() == sorted(ids)
    assert unpack_ids(words, 4999).dtype == np.int32


@pytest.mark.skipif(native.set_bits is None, reason="the native extension is not built")
def test_native_bit_setting_refuses_ids_outside_the_words():
    words = np.zeros(2, dtype=np.uint32)
    with pytest.raises(ValueError, match="outside 64 bits"):
        native.set_bits(np.array([3, 64], dtype=np.int32), words)
    with pytest.raises(ValueError, match="outside"):
        native.set_bits(np.array([-1], dtype=np.int32), words)
    assert not words.any(), "a refused call sets no bit"


@pytest.mark.skipif(native.bit_ids is None, reason="the native extension is not built")
def test_native_bit_reading_refuses_what_does_not_fit():
    words = np.array([0b1011, 1 << 31], dtype=np.uint32)
    out = np.zeros(4, dtype=np.int32)
    assert native.bit_ids(words, 64, out) == 4 and out.tolist() == [0, 1, 3, 63]
    with pytest.raises(ValueError, match="do not fit"):
        native.bit_ids(words, 65, out)
    with pytest.raises(ValueError, match="room"):
        native.bit_ids(words, 64, np.zeros(3, dtype=np.int32))


def test_text_token_bytes_are_token_bytes_of_each():
    vocab = TokenVocabulary([b"a", b"bc", b"", b"<eos>"], special_ids=[3], eos_token_ids=[3])
    assert vocab.text_token_bytes([1, 0, 1]) == [b"bc", b"a", b"bc"] == [vocab.token_bytes(i) for i in (1, 0, 1)]
    assert vocab.text_token_bytes([]) == []
    with pytest.raises(IndexError):
        vocab.text_token_bytes([0, vocab.size])


def test_text_bytes_of_are_a_text_tokens_bytes_and_none_for_any_other_id():
    vocab = TokenVocabulary([b"a", b"bc", b"", b"<eos>"], special_ids=[3], eos_token_ids=[3], size=6)
    for token_id in range(-2, vocab.size + 2):
        expected = vocab.token_bytes(token_id) if vocab.is_text_token(token_id) else None
        assert vocab.text_bytes_of(token_id) == expected, token_id
    assert [vocab.text_bytes_of(i) for i in range(4)] == [b"a", b"bc", None, None]


@settings(max_examples=60, deadline=None)
@given(byte_strings, st.binary(min_size=1, max_size=3).map(lambda b: bytes(x % 6 + 97 for x in b)))
def test_tokens_holding_matches_a_scan_of_each_token(strings, wanted):
    vocab = TokenVocabulary(strings + [b"<eos>"], special_ids=[len(strings)], eos_token_ids=[len(strings)])
    holding = vocab.tokens_holding(wanted)
    assert holding.shape == (vocab.size,)
    for token_id, data in enumerate(strings):
        assert holding[token_id] == any(value in data for value in wanted)
    assert not holding[len(strings)], "special tokens hold no text"
    assert unpack_ids(vocab.tokens_holding_words(wanted), vocab.size).tolist() == np.flatnonzero(holding).tolist()


_EDGE_BYTES = [0x00, 0x20, 0x3F, 0x40, 0x61, 0x7F, 0xC3, 0xA9]


@settings(max_examples=60, deadline=None)
@given(
    # Bytes at the edges of each 64-bit half, and past ASCII (in no set).
    st.lists(st.lists(st.sampled_from(_EDGE_BYTES), min_size=1, max_size=6).map(bytes), min_size=1, max_size=30),
    st.sets(st.sampled_from([value for value in _EDGE_BYTES if value < 0x80]), min_size=1, max_size=3),
)
def test_ascii_bits_of_paths_and_tokens_match_a_scan(strings, wanted):
    # A node's set is the ASCII bytes of its path; a token id stands for its node.
    vocab = TokenVocabulary(strings + [b"<eos>"], special_ids=[len(strings)], eos_token_ids=[len(strings)])
    trie = vocab.trie
    paths = [b""] * trie.num_nodes
    for node in range(1, trie.num_nodes):
        paths[node] = paths[int(trie.parent[node])] + bytes([int(trie.byte[node])])
    nodes = np.arange(trie.num_nodes)
    low, high = trie.ascii_bits(nodes)
    for node, path in enumerate(paths):
        assert [value for value in range(64) if int(low[node]) >> value & 1] == sorted({b for b in path if b < 64})
        assert [value + 64 for value in range(64) if int(high[node]) >> value & 1] == sorted(
            {b for b in path if 64 <= b < 128}
        )
    assert bits_holding((low, high), wanted).tolist() == [any(b in wanted for b in path) for path in paths]
    text_ids = [token_id for token_id, data in enumerate(strings) if data]
    by_token = bits_holding(trie.ascii_bits(text_ids, by_token=True), wanted)
    assert by_token.tolist() == [any(value in strings[token_id] for value in wanted) for token_id in text_ids]
    with pytest.raises(ValueError, match="below 128"):
        bits_holding((low, high), [200])


def _holds_in_order(data: bytes, sequence: bytes) -> bool:
    position = 0
    for value in sequence:
        position = data.find(bytes([value]), position) + 1
        if position == 0:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(byte_strings, st.binary(max_size=3).map(lambda b: bytes(x % 6 + 97 for x in b)))
def test_tokens_holding_in_order_matches_a_scan_of_each_token(strings, sequence):
    vocab = TokenVocabulary(strings + [b"<eos>"], special_ids=[len(strings)], eos_token_ids=[len(strings)])
    holding = vocab.tokens_holding_in_order(sequence)
    assert holding.shape == (vocab.size,)
    for token_id, data in enumerate(strings):
        assert holding[token_id] == (bool(data) and _holds_in_order(data, sequence)), (data, sequence)
    assert not holding[len(strings)], "special tokens hold no text"
    packed = vocab.tokens_holding_in_order_words(sequence)
    assert unpack_ids(packed, vocab.size).tolist() == np.flatnonzero(holding).tolist()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=4).map(lambda b: bytes(x % 7 + 95 for x in b)), min_size=1, max_size=40),
    st.lists(st.integers(94, 102), max_size=4),
)
def test_group_members_without_first_bytes_match_a_scan_of_each_member(strings, excluded):
    from surecall.engine.token_groups import GROUP_SPECS, group_tables_for

    vocab = TokenVocabulary(strings + [b"<eos>"], special_ids=[len(strings)], eos_token_ids=[len(strings)])
    group = group_tables_for(vocab).group(next(spec for spec in GROUP_SPECS if spec.name == "word"))
    members = group.member_ids.tolist()
    for _ in range(2):  # computed, then from the group's cache
        words = group.member_words_without_first(vocab.trie, np.array(excluded, dtype=np.int64))
        expected = sorted(t for t in members if vocab.token_bytes(t)[0] not in excluded)
        assert unpack_ids(words, vocab.size).tolist() == expected


@settings(max_examples=40, deadline=None)
@given(
    size=st.sampled_from([0, 1, 5, 9000, 20000]), high=st.sampled_from([1, 3, 50, 30000, 2**31 - 1]),
    low=st.sampled_from([0, -5]), dtype=st.sampled_from([np.int32, np.int64]), seed=st.integers(0, 2**16),
)
def test_distinct_values_are_numpys_unique_ones(size, high, low, dtype, seed):
    # Sorted or counted (many small non-negative values), with the input's dtype, and the
    # inverse mapping each value to its place among them.
    values = np.random.default_rng(seed).integers(low, high, size).astype(dtype)
    found = distinct(values)
    assert found.dtype == values.dtype
    assert found.tolist() == np.unique(values).tolist()
    again, inverse = distinct(values, return_inverse=True)
    assert again.tolist() == found.tolist() and (again[inverse] == values).all()
