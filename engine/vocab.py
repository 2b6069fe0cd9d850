"""The token vocabulary of a model: the exact bytes of every token, and its trie.

``TokenVocabulary.from_tokenizer`` accepts, by duck typing (nothing is imported from
transformers or tiktoken):

* Hugging Face tokenizers (``transformers`` fast or slow tokenizers, or a bare
  ``tokenizers.Tokenizer``) with byte-level BPE vocabularies (GPT-2, SmolLM2, Llama 3,
  Qwen, DeepSeek: tokens are spelled in the printable ``bytes_to_unicode`` alphabet)
  or SentencePiece vocabularies (``▁`` stands for a space, ``<0xNN>`` for a raw byte);
* tiktoken-style tokenizers, whose tokens are given as bytes (a ``tiktoken.Encoding``
  or a wrapper exposing ``_mergeable_ranks``/``mergeable_ranks`` and special tokens).

Special tokens (control tokens such as ``<|im_end|>``) are kept apart: they are never
produced by matching text, only end-of-sequence ids are allowed, and only when the
text is complete. Added tokens that are not special are ordinary text tokens.

Building the table for 150k tokens is a few vectorised passes; the result (token
bytes and trie) is cached on disk under ``$SURECALL_CACHE/vocab`` (default
``~/.cache/surecall/vocab``), keyed by a hash of the vocabulary.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .trie import TokenTrie, pack_ids

CACHE_FORMAT = 1

# Special tokens that end a turn or a document in common chat templates.
END_OF_TURN_TOKENS = frozenset(
    {
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|end_of_text|>",
        "<|end|>",
        "<end_of_turn>",
        "<|return|>",
        "</s>",
        "<｜end▁of▁sentence｜>",
        "<|EOT|>",
    }
)

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to the printable character that spells it in byte-level vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for value in range(256):
        if value not in printable:
            printable.append(value)
            chars.append(256 + extra)
            extra += 1
    return {value: chr(char) for value, char in zip(printable, chars)}


_BYTE_LEVEL_TRANSLATION = {ord(char): value for value, char in bytes_to_unicode().items()}


def default_cache_dir() -> Path:
    """Root of surecall's on-disk caches: ``$SURECALL_CACHE``, else ``~/.cache/surecall``."""
    root = os.environ.get("SURECALL_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "surecall"


class TokenVocabulary:
    """Exact bytes of every token id, which ids are special, which end the sequence, and the token trie.

    ``size`` is the number of logits the model produces; ids at or beyond the
    tokenizer's table (padding rows of a larger embedding matrix) are never allowed.
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        *,
        special_ids: Iterable[int] = (),
        eos_token_ids: Iterable[int] = (),
        size: int | None = None,
    ) -> None:
        table = [b"" if value is None else bytes(value) for value in token_bytes]
        lengths = np.fromiter(map(len, table), dtype=np.int64, count=len(table))
        offsets = np.zeros(len(table) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        special = frozenset(int(i) for i in special_ids)
        normal = [i for i in range(len(table)) if table[i] and i not in special]
        trie = TokenTrie.build([table[i] for i in normal], normal)
        self._init(b"".join(table), offsets, special, frozenset(int(i) for i in eos_token_ids), size, trie)

    def _init(
        self, blob: bytes, offsets: np.ndarray, special: frozenset, eos: frozenset, size, trie: TokenTrie
    ) -> None:
        count = len(offsets) - 1
        self._blob = blob
        self._offsets = offsets
        self._special_ids = special
        self._eos_token_ids = eos
        self.trie = trie
        self.size = max(count, int(size or 0), max(eos, default=-1) + 1)
        for token_id in eos:
            if not 0 <= token_id < self.size:
                raise ValueError(f"end-of-sequence id {token_id} is outside the vocabulary")
        self._num_table_tokens = count
        # Per-token reads on every step (advance): a memoryview's items are Python ints,
        # cheaper to read than numpy's scalars.
        self._offset_of = memoryview(np.ascontiguousarray(offsets, dtype=np.int64))
        text = np.diff(offsets) > 0
        text[[token_id for token_id in special if 0 <= token_id < count]] = False
        self._text_flags = text.astype(np.uint8).tobytes()
        # Where derived per-vocabulary tables (token groups) are persisted; None: memory only.
        self.cache_root: Path | None = None
        self.normal_ids = np.sort(trie.token_ids).astype(np.int32)
        self._holding: dict = {}
        self._single_byte_tokens: int | None = None
        self.eos_array = np.array(sorted(eos), dtype=np.int32)
        digest = hashlib.sha256(blob)
        digest.update(offsets.tobytes())
        digest.update(repr((sorted(special), sorted(eos), self.size)).encode())
        self.fingerprint = digest.hexdigest()[:24]

    # ------------------------------------------------------------------ access
    @property
    def special_ids(self) -> frozenset:
        return self._special_ids

    @property
    def eos_token_ids(self) -> frozenset:
        return self._eos_token_ids

    def __len__(self) -> int:
        return self.size

    @property
    def single_byte_tokens(self) -> int:
        """The bytes that are text tokens by themselves (a 256-bit set): a string of them is
        spelled by as many tokens as it has bytes."""
        if self._single_byte_tokens is None:
            trie = self.trie
            self._single_byte_tokens = sum(
                1 << value for value in range(256) if (node := trie.child(0, value)) >= 0 and trie.has_tokens(node)
            )
        return self._single_byte_tokens

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes the token stands for (for special tokens: their text; b"" past the table)."""
        token_id = int(token_id)
        if not 0 <= token_id < self.size:
            raise IndexError(f"token id {token_id} outside the vocabulary of {self.size}")
        if token_id >= self._num_table_tokens:
            return b""
        return self._blob[self._offset_of[token_id] : self._offset_of[token_id + 1]]

    def text_token_bytes(self, token_ids: list[int]) -> list[bytes]:
        """``token_bytes`` of each of ``token_ids``, text tokens all (as an allowed mask's):
        one slice each, without ``token_bytes``'s checks per call."""
        blob, offset_of, count = self._blob, self._offset_of, self._num_table_tokens
        if token_ids and not 0 <= min(token_ids) <= max(token_ids) < count:
            raise IndexError("a token id outside the vocabulary's table of token bytes")
        return [blob[offset_of[token_id] : offset_of[token_id + 1]] for token_id in token_ids]

    def text_bytes_of(self, token_id: int) -> bytes | None:
        """``token_bytes`` of a text token (``is_text_token``), None for any other id: one
        call where a matcher advances."""
        if 0 <= token_id < self._num_table_tokens and self._text_flags[token_id] == 1:
            return self._blob[self._offset_of[token_id] : self._offset_of[token_id + 1]]
        return None

    def is_text_token(self, token_id: int) -> bool:
        """True for tokens that stand for text (not special, not empty, inside the table)."""
        token_id = int(token_id)
        return 0 <= token_id < self._num_table_tokens and self._text_flags[token_id] == 1

    def tokens_holding(self, values: bytes) -> np.ndarray:
        """Per token id: whether its bytes contain any of ``values`` (special tokens: False; cached)."""
        key = bytes(sorted(set(values)))
        found = self._holding.get(key)
        if found is None:
            trie = self.trie
            wanted = np.zeros(256, dtype=bool)
            wanted[list(key)] = True
            on_path = wanted[trie.byte]
            on_path[0] = False
            # Level by level a node's path holds a wanted byte if its parent's does.
            for depth in range(2, trie.max_depth + 1):
                low, high = int(trie.level_start[depth]), int(trie.level_start[depth + 1])
                on_path[low:high] |= on_path[trie.parent[low:high]]
            found = np.zeros(self.size, dtype=bool)
            found[trie.token_ids] = on_path[trie.token_nodes]
            self._holding[key] = found
        return found

    def tokens_holding_in_order(self, sequence: bytes) -> np.ndarray:
        """Per token id: whether the bytes of ``sequence`` occur in its bytes in that order,
        not necessarily next to each other (special tokens: False; cached)."""
        key = ("in order", bytes(sequence))
        found = self._holding.get(key)
        if found is None:
            trie = self.trie
            wanted = np.frombuffer(bytes(sequence), dtype=np.uint8)
            # How many bytes of the sequence a node's path has met, level by level.
            progress = np.zeros(trie.num_nodes, dtype=np.int32)
            for depth in range(1, trie.max_depth + 1 if len(wanted) else 1):
                low, high = int(trie.level_start[depth]), int(trie.level_start[depth + 1])
                before = progress[trie.parent[low:high]]
                pending = before < len(wanted)
                meets = pending & (trie.byte[low:high] == wanted[np.minimum(before, len(wanted) - 1)])
                progress[low:high] = before + meets
            found = np.zeros(self.size, dtype=bool)
            found[trie.token_ids] = progress[trie.token_nodes] == len(wanted)
            self._holding[key] = found
        return found

    def tokens_holding_words(self, values: bytes) -> np.ndarray:
        """``tokens_holding`` as a packed bitset (uint32 words, as masks are; cached)."""
        return self._packed(("words", bytes(sorted(set(values)))), lambda: self.tokens_holding(values))

    def tokens_holding_in_order_words(self, sequence: bytes) -> np.ndarray:
        """``tokens_holding_in_order`` as a packed bitset (cached)."""
        return self._packed(("in order words", bytes(sequence)), lambda: self.tokens_holding_in_order(sequence))

    def _packed(self, key: tuple, flags_of) -> np.ndarray:
        found = self._holding.get(key)
        if found is None:
            found = self._holding[key] = pack_ids(np.flatnonzero(flags_of()), self.size)
        return found

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenated bytes of text tokens (special tokens contribute nothing)."""
        return b"".join(self.token_bytes(i) for i in token_ids if self.is_text_token(i))

    def tokenize_bytes(self, data: bytes) -> list[int]:
        """Greedy longest-match tokenization over the trie: a valid, not necessarily canonical, split."""
        trie = self.trie
        result: list[int] = []
        position = 0
        while position < len(data):
            node, best_node, best_end = 0, -1, position
            for index in range(position, len(data)):
                node = trie.child(node, data[index])
                if node < 0:
                    break
                if trie.has_tokens(node):
                    best_node, best_end = node, index + 1
            if best_node < 0:
                raise ValueError(
                    f"no token of the vocabulary starts with byte {data[position]:#04x} (at offset {position})"
                )
            result.append(int(trie.tokens_at(best_node)[0]))
            position = best_end
        return result

    def with_size(self, size: int) -> "TokenVocabulary":
        """The same vocabulary for a model with ``size`` logits (at least the tokenizer's table)."""
        clone = object.__new__(TokenVocabulary)
        clone._init(self._blob, self._offsets, self._special_ids, self._eos_token_ids, size, self.trie)
        clone.cache_root = self.cache_root
        return clone

    def __repr__(self) -> str:
        return (
            f"TokenVocabulary(size={self.size}, text_tokens={len(self.normal_ids)}, "
            f"special={len(self._special_ids)})"
        )

    # ---------------------------------------------------------------- building
    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        *,
        cache_dir: str | os.PathLike | None = None,
        model_vocab_size: int | None = None,
    ) -> "TokenVocabulary":
        """Read a Hugging Face or tiktoken-style tokenizer (see the module docstring).

        ``model_vocab_size``: number of logits of the model when it exceeds the tokenizer's table.
        ``cache_dir``: where the built table is cached (default ``$SURECALL_CACHE`` or ``~/.cache/surecall``);
        ``False`` disables the disk cache.
        """
        spec = _describe_tokenizer(tokenizer)
        key = spec.cache_key()
        cache_file = None
        vocab = None
        if cache_dir is not False:
            cache_folder = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "vocab"
            cache_file = cache_folder / f"{key}.npz"
            vocab = _load_cached(cache_file)
        if vocab is None:
            vocab = spec.build()
            if cache_file is not None:
                _store_cached(vocab, cache_file)
        if cache_file is not None:
            vocab.cache_root = cache_file.parent
        return vocab.with_size(model_vocab_size) if model_vocab_size else vocab


# ------------------------------------------------------------- tokenizer reading
class _TokenizerSpec:
    """What was read from a tokenizer: raw token spellings by id, their encoding, and the special ids."""

    def __init__(
        self, kind: str, spellings: list, special_ids: set[int], eos_ids: set[int], raw_text_ids: set[int], size: int
    ) -> None:
        self.kind = kind  # "byte_level" | "sentencepiece" | "bytes"
        self.spellings = spellings  # id -> str (or bytes for kind "bytes"); None for holes
        self.special_ids = special_ids
        self.eos_ids = eos_ids
        self.raw_text_ids = raw_text_ids  # added tokens spelled as plain text, not in the vocabulary alphabet
        self.size = size

    def cache_key(self) -> str:
        digest = hashlib.sha256(f"{CACHE_FORMAT}|{self.kind}|{self.size}".encode())
        if self.kind == "bytes":
            digest.update(b"\xff".join(b"\xfe" if s is None else s for s in self.spellings))
        else:
            joined = "\x00".join("\x01" if s is None else s for s in self.spellings)
            digest.update(joined.encode("utf-8", "surrogatepass"))
        digest.update(repr((sorted(self.special_ids), sorted(self.eos_ids), sorted(self.raw_text_ids))).encode())
        return digest.hexdigest()[:32]

    def build(self) -> TokenVocabulary:
        # Special tokens are spelled as plain text too (they never take part in matching).
        table = _spellings_to_bytes(self.kind, self.spellings, self.raw_text_ids | self.special_ids)
        return TokenVocabulary(table, special_ids=self.special_ids, eos_token_ids=self.eos_ids, size=self.size)


def _spellings_to_bytes(kind: str, spellings: list, raw_text_ids: set[int]) -> list[bytes | None]:
    if kind == "bytes":
        table = [s if s is None or isinstance(s, bytes) else s.encode("utf-8") for s in spellings]
    elif kind == "byte_level":
        plain = list(spellings)
        for token_id in raw_text_ids:
            plain[token_id] = None
        table = _byte_level_to_bytes(plain)
    elif kind == "sentencepiece":
        table = [None if s is None else _sentencepiece_to_bytes(s) for s in spellings]
    else:
        raise ValueError(f"unknown vocabulary kind {kind!r}")
    for token_id in raw_text_ids:
        spelling = spellings[token_id]
        if spelling is not None:
            table[token_id] = spelling if isinstance(spelling, bytes) else spelling.encode("utf-8")
    return table


def _byte_level_to_bytes(spellings: list) -> list[bytes | None]:
    # Every character of a byte-level spelling stands for one byte, so the whole
    # vocabulary converts in one str.translate over the joined spellings.
    texts = ["" if s is None else s for s in spellings]
    joined = "".join(texts).translate(_BYTE_LEVEL_TRANSLATION)
    try:
        blob = joined.encode("latin-1")
    except UnicodeEncodeError:
        return [None if s is None else _byte_level_token(s) for s in spellings]
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(lengths).tolist()
    starts = [0] + ends[:-1]
    return [None if s is None else blob[a:b] for s, a, b in zip(spellings, starts, ends)]


def _byte_level_token(spelling: str) -> bytes:
    """One token whose spelling leaves the byte-level alphabet: such characters stand for their UTF-8."""
    out = bytearray()
    for char in spelling:
        value = _BYTE_LEVEL_TRANSLATION.get(ord(char))
        out.extend(bytes((value,)) if value is not None else char.encode("utf-8"))
    return bytes(out)


def _sentencepiece_to_bytes(spelling: str) -> bytes:
    fallback = _BYTE_FALLBACK.fullmatch(spelling)
    if fallback:
        return bytes((int(fallback.group(1), 16),))
    return spelling.replace("\u2581", " ").encode("utf-8")


def _describe_tokenizer(tokenizer: Any) -> _TokenizerSpec:
    ranks = _first_attribute(tokenizer, ("_mergeable_ranks", "mergeable_ranks"))
    if ranks is None:
        inner = getattr(tokenizer, "_tokenizer", None)
        ranks = _first_attribute(inner, ("_mergeable_ranks", "mergeable_ranks")) if inner is not None else None
        if ranks is not None:
            tokenizer = inner
    if isinstance(ranks, dict) and ranks and isinstance(next(iter(ranks)), bytes):
        return _describe_tiktoken(tokenizer, ranks)
    if callable(getattr(tokenizer, "get_vocab", None)):
        return _describe_hugging_face(tokenizer)
    raise TypeError(
        f"cannot read a vocabulary from {type(tokenizer).__name__}: expected a Hugging Face tokenizer "
        "(with get_vocab()) or a tiktoken-style tokenizer (with mergeable ranks)"
    )


def _first_attribute(obj: Any, names: Sequence[str]):
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value() if callable(value) else value
    return None


def _describe_tiktoken(tokenizer: Any, ranks: dict) -> _TokenizerSpec:
    special = _first_attribute(tokenizer, ("_special_tokens", "special_tokens")) or {}
    special = {str(k): int(v) for k, v in dict(special).items()}
    size = max([*ranks.values(), *special.values()], default=-1) + 1
    spellings: list = [None] * size
    for token, rank in ranks.items():
        spellings[rank] = token
    for text, token_id in special.items():
        spellings[token_id] = text.encode("utf-8")
    eos = {token_id for text, token_id in special.items() if text in END_OF_TURN_TOKENS}
    for name in ("eos_token_id", "eod_id", "eot_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            eos.add(value)
    n_vocab = getattr(tokenizer, "n_vocab", None)
    if isinstance(n_vocab, int):
        size = max(size, n_vocab)
    return _TokenizerSpec("bytes", spellings, set(special.values()), eos, set(), size)


def _describe_hugging_face(tokenizer: Any) -> _TokenizerSpec:
    try:
        vocab = tokenizer.get_vocab(with_added_tokens=True)
    except TypeError:
        vocab = tokenizer.get_vocab()
    added = _added_tokens(tokenizer)
    size = max([*vocab.values(), *added.keys()], default=-1) + 1
    spellings: list = [None] * size
    for text, token_id in vocab.items():
        spellings[token_id] = text
    special_ids: set[int] = set()
    raw_text_ids: set[int] = set()
    for token_id, (content, is_special) in added.items():
        spellings[token_id] = content
        (special_ids if is_special else raw_text_ids).add(token_id)
    declared = getattr(tokenizer, "all_special_ids", None) or ()
    special_ids.update(int(i) for i in declared if i is not None and 0 <= int(i) < size)
    raw_text_ids -= special_ids
    eos: set[int] = set()
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos_id, int):
        eos.add(eos_id)
    eos.update(token_id for token_id in special_ids if spellings[token_id] in END_OF_TURN_TOKENS)
    special_ids |= eos
    kind = _hugging_face_kind(tokenizer, spellings, special_ids | raw_text_ids)
    try:
        size = max(size, len(tokenizer))
    except TypeError:
        pass
    return _TokenizerSpec(kind, spellings, special_ids, eos, raw_text_ids, size)


def _added_tokens(tokenizer: Any) -> dict[int, tuple[str, bool]]:
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if decoder is None and callable(getattr(tokenizer, "get_added_tokens_decoder", None)):
        decoder = tokenizer.get_added_tokens_decoder()
    result: dict[int, tuple[str, bool]] = {}
    for token_id, token in dict(decoder or {}).items():
        content = getattr(token, "content", token)
        result[int(token_id)] = (str(content), bool(getattr(token, "special", True)))
    return result


def _hugging_face_kind(tokenizer: Any, spellings: list, excluded: set[int]) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None) or tokenizer
    decoder = getattr(backend, "decoder", None)
    if decoder is not None and hasattr(decoder, "__getstate__"):
        try:
            state = decoder.__getstate__()
            description = json.dumps(json.loads(state)) if isinstance(state, (bytes, str)) else ""
        except (TypeError, ValueError):
            description = ""
        if '"ByteLevel"' in description:
            return "byte_level"
        if '"ByteFallback"' in description or '"Metaspace"' in description or "\u2581" in description:
            return "sentencepiece"
    if hasattr(tokenizer, "byte_decoder"):
        return "byte_level"
    if hasattr(tokenizer, "sp_model"):
        return "sentencepiece"
    # No decoder to inspect: judge from the spellings themselves.
    sample = [s for i, s in enumerate(spellings) if s is not None and i not in excluded]
    metaspace = sum("\u2581" in s for s in sample)
    byte_level = sum(("\u0120" in s) or ("\u010a" in s) for s in sample)
    return "sentencepiece" if metaspace > byte_level else "byte_level"


# ----------------------------------------------------------------- disk cache
def _load_cached(path: Path) -> TokenVocabulary | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    try:
        vocab = object.__new__(TokenVocabulary)
        vocab._init(
            arrays["blob"].tobytes(),
            arrays["offsets"].astype(np.int64),
            frozenset(arrays["special_ids"].tolist()),
            frozenset(arrays["eos_ids"].tolist()),
            int(arrays["size"][0]),
            TokenTrie.from_arrays(arrays),
        )
    except (KeyError, ValueError, IndexError):
        return None
    return vocab


def _store_cached(vocab: TokenVocabulary, path: Path) -> None:
    arrays = {
        "blob": np.frombuffer(vocab._blob, dtype=np.uint8),
        "offsets": vocab._offsets,
        "special_ids": np.array(sorted(vocab.special_ids), dtype=np.int64),
        "eos_ids": np.array(sorted(vocab.eos_token_ids), dtype=np.int64),
        "size": np.array([vocab.size], dtype=np.int64),
        **vocab.trie.to_arrays(),
    }
    store_arrays(path, arrays)


def store_arrays(path: Path, arrays: dict) -> None:
    """Write ``arrays`` as one .npz file atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as handle:
            handle.write(buffer.getvalue())
        os.replace(handle.name, path)
    except OSError:
        # A read-only or full cache directory only costs a rebuild next time.
        pass
