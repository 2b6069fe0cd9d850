"""One adapter per structured-generation engine, all with the same small interface.

``Engine(tokenizer)`` does the per-tokenizer preparation (not part of any timing);
``engine.compile(schema_text)`` turns JSON Schema text into a ``Session`` that is
ready to produce its first mask. A session then repeats
``fill_mask()`` / ``allows(token_id)`` / ``advance(token_id)``; ``accepting()``
tells whether the text so far is a complete document (EOS allowed).

Every engine is configured for compact JSON (``,`` and ``:`` with no whitespace),
so all of them are asked to accept exactly the same token path.
"""

from __future__ import annotations

import abc
import json

import numpy as np

from bench.vocabularies import token_bytes_table, vocab_size

COMPACT_SEPARATORS = (",", ":")


class CompileError(Exception):
    """The engine refused the schema (unsupported feature, invalid grammar, ...)."""


def _bit_is_set(words: np.ndarray, token_id: int) -> bool:
    return bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)


class Session(abc.ABC):
    """A matcher positioned somewhere on a token path. Subclasses fill ``self.bitmask``."""

    eos_token_id: int

    @abc.abstractmethod
    def fill_mask(self) -> None:
        """Compute the full-vocabulary mask of the current position into ``self.bitmask``."""

    @abc.abstractmethod
    def advance(self, token_id: int) -> bool:
        """Consume one token; False when the engine rejects it."""

    @abc.abstractmethod
    def restart(self) -> "Session":
        """A fresh session over the same compiled grammar, at the start of the document."""

    def allows(self, token_id: int) -> bool:
        return _bit_is_set(self.bitmask, token_id)

    def accepting(self) -> bool:
        return self.allows(self.eos_token_id)

    def parse_states(self) -> int | None:
        """How many parse states the engine has built for this grammar so far, where it says."""
        return None


class Engine(abc.ABC):
    name: str = ""

    def __init__(self, tokenizer, logits_size: int | None = None):
        self.tokenizer = tokenizer
        # masks cover every logits row of the model when one is given (it may exceed the tokenizer)
        self.vocab_size = max(vocab_size(tokenizer), logits_size or 0)
        self.eos_token_id = tokenizer.eos_token_id

    @abc.abstractmethod
    def compile(self, schema_text: str) -> Session:
        """Schema text to a session ready for its first mask; CompileError when refused."""

    def clear_caches(self) -> None:
        """Forget anything learnt from earlier schemas, so each compile starts cold."""

    def _words(self) -> np.ndarray:
        return np.zeros((self.vocab_size + 31) // 32, dtype=np.int32)


# --------------------------------------------------------------------------- xgrammar


class XGrammarSession(Session):
    def __init__(self, engine: "XGrammarEngine", compiled):
        import xgrammar

        self._engine = engine
        self._compiled = compiled
        self._matcher = xgrammar.GrammarMatcher(compiled)
        self._torch_mask = xgrammar.allocate_token_bitmask(1, engine.vocab_size)
        self.bitmask = self._torch_mask[0].numpy()
        self.eos_token_id = engine.eos_token_id

    def fill_mask(self) -> None:
        self._matcher.fill_next_token_bitmask(self._torch_mask)

    def advance(self, token_id: int) -> bool:
        return bool(self._matcher.accept_token(token_id))

    def restart(self) -> Session:
        return XGrammarSession(self._engine, self._compiled)


class XGrammarEngine(Engine):
    name = "xgrammar"

    def __init__(self, tokenizer, logits_size: int | None = None):
        super().__init__(tokenizer, logits_size)
        import xgrammar

        self._info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size)
        self._compiler = xgrammar.GrammarCompiler(self._info, max_threads=1, cache_enabled=False)

    def compile(self, schema_text: str) -> Session:
        try:
            # strict_mode=False keeps JSON Schema's meaning (extra properties allowed unless forbidden)
            compiled = self._compiler.compile_json_schema(
                schema_text, any_whitespace=False, separators=COMPACT_SEPARATORS, strict_mode=False
            )
        except Exception as error:
            raise CompileError(str(error)) from error
        return XGrammarSession(self, compiled)

    def clear_caches(self) -> None:
        self._compiler.clear_cache()


# --------------------------------------------------------------------------- llguidance


class LLGuidanceSession(Session):
    def __init__(self, engine: "LLGuidanceEngine", grammar: str):
        import llguidance

        self._engine = engine
        self._grammar = grammar
        self._matcher = llguidance.LLMatcher(engine.lltokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise CompileError(self._matcher.get_error())
        self.bitmask = engine._words()
        self.eos_token_id = engine.eos_token_id

    def fill_mask(self) -> None:
        self._matcher.unsafe_compute_mask_ptr(self.bitmask.ctypes.data, self.bitmask.nbytes)
        if self._matcher.is_error():
            raise CompileError(self._matcher.get_error())

    def advance(self, token_id: int) -> bool:
        return bool(self._matcher.consume_token(token_id)) and not self._matcher.is_error()

    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    def restart(self) -> Session:
        return LLGuidanceSession(self._engine, self._grammar)


class LLGuidanceEngine(Engine):
    name = "llguidance"

    def __init__(self, tokenizer, logits_size: int | None = None):
        super().__init__(tokenizer, logits_size)
        import llguidance.hf

        self.lltokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size)

    def compile(self, schema_text: str) -> Session:
        import llguidance

        options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema_text, defaults=options)
        except Exception as error:
            raise CompileError(str(error)) from error
        return LLGuidanceSession(self, grammar)


# --------------------------------------------------------------------------- outlines-core


class OutlinesCoreSession(Session):
    def __init__(self, engine: "OutlinesCoreEngine", index):
        import outlines_core

        self._engine = engine
        self._index = index
        self._guide = outlines_core.Guide(index)
        self.bitmask = engine._words()
        self.eos_token_id = engine.eos_token_id

    def fill_mask(self) -> None:
        self._guide.write_mask_into(self.bitmask.ctypes.data, self.bitmask.size, 4)

    def advance(self, token_id: int) -> bool:
        try:
            self._guide.advance(token_id, return_tokens=False)
        except Exception:
            return False
        return True

    def restart(self) -> Session:
        return OutlinesCoreSession(self._engine, self._index)


class OutlinesCoreEngine(Engine):
    name = "outlines-core"

    def __init__(self, tokenizer, logits_size: int | None = None):
        super().__init__(tokenizer, logits_size)
        import outlines_core

        by_bytes: dict[bytes, list[int]] = {}
        for token_id, token in enumerate(token_bytes_table(tokenizer)):
            if token is not None and token_id != self.eos_token_id:
                by_bytes.setdefault(token, []).append(token_id)
        self._vocabulary = outlines_core.Vocabulary(self.eos_token_id, by_bytes)

    def compile(self, schema_text: str) -> Session:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        try:
            regex = build_regex_from_schema(schema_text, whitespace_pattern="")
            index = outlines_core.Index(regex, self._vocabulary)
        except BaseException as error:  # the Rust side raises pyo3 PanicException, a BaseException
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            raise CompileError(str(error)) from error
        return OutlinesCoreSession(self, index)


# --------------------------------------------------------------------------- lm-format-enforcer


class LMFormatEnforcerSession(Session):
    def __init__(self, engine: "LMFormatEnforcerEngine", schema: dict):
        from lmformatenforcer import CharacterLevelParserConfig, JsonSchemaParser, TokenEnforcer

        self._engine = engine
        self._schema = schema
        config = CharacterLevelParserConfig(max_consecutive_whitespaces=0)
        try:
            parser = JsonSchemaParser(schema, config=config)
            self._enforcer = TokenEnforcer(engine.tokenizer_data, parser)
        except Exception as error:
            raise CompileError(str(error)) from error
        # the enforcer identifies states by the whole token sequence, prompt included
        self._sequence = list(engine.prompt_ids)
        self.bitmask = engine._words()
        self.eos_token_id = engine.eos_token_id

    def fill_mask(self) -> None:
        allowed = self._enforcer.get_allowed_tokens(self._sequence).allowed_tokens
        self.bitmask[:] = 0
        ids = np.asarray(allowed, dtype=np.int64)
        np.bitwise_or.at(self.bitmask.view(np.uint32), ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))

    def advance(self, token_id: int) -> bool:
        self._sequence.append(token_id)
        return True

    def restart(self) -> Session:
        return LMFormatEnforcerSession(self._engine, self._schema)


class LMFormatEnforcerEngine(Engine):
    name = "lm-format-enforcer"

    def __init__(self, tokenizer, logits_size: int | None = None):
        super().__init__(tokenizer, logits_size)
        self.tokenizer_data = self._tokenizer_data(tokenizer)
        self.prompt_ids = tokenizer.encode("Answer:", add_special_tokens=False)

    def _tokenizer_data(self, tokenizer):
        # lm-format-enforcer's own transformers integration does not import under
        # transformers 5, so its tokenizer data is built here the same way it builds it:
        # each token's text, and whether it starts a word (decoded after a "0" token).
        from lmformatenforcer import TokenEnforcerTokenizerData

        zero_token = tokenizer.encode("0", add_special_tokens=False)[-1]
        special_ids = set(tokenizer.all_special_ids)
        regular_tokens = []
        for token_id in range(len(tokenizer)):
            if token_id in special_ids:
                continue
            after_zero = tokenizer.decode([zero_token, token_id])[1:]
            alone = tokenizer.decode([token_id])
            regular_tokens.append((token_id, after_zero, len(after_zero) > len(alone)))

        def decode(token_ids: list[int]) -> str:
            return tokenizer.decode(token_ids).rstrip("\ufffd")

        return TokenEnforcerTokenizerData(regular_tokens, decode, self.eos_token_id, False, self.vocab_size)

    def compile(self, schema_text: str) -> Session:
        try:
            schema = json.loads(schema_text)
        except ValueError as error:
            raise CompileError(str(error)) from error
        return LMFormatEnforcerSession(self, schema)


# --------------------------------------------------------------------------- surecall


class SurecallSession(Session):
    def __init__(self, engine: "SurecallEngine", grammar):
        from surecall.engine import Matcher, Status

        self._engine = engine
        self._grammar = grammar
        self._matcher = Matcher(grammar, engine.vocabulary, max_tokens=engine.max_tokens)
        self.bitmask = engine._words()
        self.eos_token_id = engine.eos_token_id
        # Looked up once: an import inside ``advance`` would be timed with every step.
        self._rejected = Status.REJECTED

    def fill_mask(self) -> None:
        self._matcher.fill_bitmask(self.bitmask)

    def advance(self, token_id: int) -> bool:
        return self._matcher.advance(token_id) != self._rejected

    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    def parse_states(self) -> int:
        return self._matcher.automaton.num_configs

    def forget_mask(self) -> None:
        """Drop the current state's cached mask and token-group choice (its parse states
        and transitions stay built), so that the next ``fill_mask`` walks it again."""
        matcher = self._matcher
        tables = matcher._tables
        tables.masks.discard(matcher.config)
        tables.chain_groups.pop(matcher.config, None)

    def restart(self) -> Session:
        return SurecallSession(self._engine, self._grammar)


class SurecallEngine(Engine):
    """surecall on the language the peers compile: an object's listed properties in the
    schema's order (xgrammar and llguidance refuse ``{"b":2,"a":1}`` for properties ``a``,
    ``b`` too), which is also what generation writes by default."""

    name = "surecall"
    max_tokens: int | None = None
    property_order = "schema"

    def __init__(self, tokenizer, logits_size: int | None = None):
        super().__init__(tokenizer, logits_size)
        from surecall.engine import TokenVocabulary

        self.vocabulary = TokenVocabulary.from_tokenizer(tokenizer)
        self.vocab_size = max(self.vocab_size, self.vocabulary.size)
        # Token groups are per-vocabulary tables, prepared with the tokenizer as the
        # peers prepare theirs, not at the first schema that happens to need one.
        from surecall.engine.token_groups import group_tables_for

        group_tables_for(self.vocabulary).prepare()

    def compile(self, schema_text: str) -> Session:
        from surecall import grammar_from_schema

        try:
            grammar = grammar_from_schema(
                json.loads(schema_text), whitespace="compact", property_order=self.property_order
            )
            return SurecallSession(self, grammar)
        except (ValueError, RecursionError) as error:
            raise CompileError(f"{type(error).__name__}: {error}") from error

    def clear_caches(self) -> None:
        # Per-schema work is cached per process: compiled automata (with their masks) by
        # grammar hash; intersections' operands, searches' tails (a pattern unanchored at
        # both ends) and some translation pieces (formats, character classes) by value,
        # shared between grammars. Per-tokenizer tables (token groups, kept on disk)
        # stay, like the peers' tokenizer preprocessing.
        from surecall import schema, schema_strings
        from surecall.engine import automaton, grammar, token_groups

        clear = getattr(grammar, "clear_automaton_cache", None)
        if clear is not None:
            clear()
        for name in ("_operand_cache", "_search_cache"):
            shared = getattr(automaton, name, None)
            if shared is not None:
                shared.clear()
        # Groups without the bytes some pattern leaves out are learnt from a schema.
        forget = getattr(token_groups, "forget_groups_without", None)
        if forget is not None:
            forget()
        # Memoised pure functions: a format's language, a pattern's texts and a character class's spellings.
        for module, name in ((automaton, "utf8_sequences"), (schema, "_format_language"),
                             (schema, "_pattern_texts"), (schema_strings, "_encoded_char_ranges")):
            memoised = getattr(module, name, None)
            if memoised is not None and hasattr(memoised, "cache_clear"):
                memoised.cache_clear()


class SurecallAnyOrderEngine(SurecallEngine):
    """surecall accepting an object's listed properties in any order, as JSON Schema does:
    the instances that list them otherwise pass too, at the price of a larger language
    (at a key position every key not yet written, and which required ones are missing)."""

    name = "surecall-any-order"
    property_order = "any"


class SurecallBudgetEngine(SurecallEngine):
    """surecall with a token budget, as generation always runs it: every new mask also
    checks that each allowed token leaves a completion within the tokens left. The
    budget is larger than any bench path, so it never masks a token of one; the cost is
    the bookkeeping (a completion search per new state a token leads to)."""

    name = "surecall-budget"
    max_tokens = 4096


ENGINES: dict[str, type[Engine]] = {
    engine.name: engine
    for engine in (
        SurecallEngine, SurecallAnyOrderEngine, SurecallBudgetEngine, XGrammarEngine, LLGuidanceEngine,
        OutlinesCoreEngine, LMFormatEnforcerEngine,
    )
}
SURECALL_NAMES = ("surecall", "surecall-any-order", "surecall-budget")
PEER_NAMES = tuple(name for name in ENGINES if name not in SURECALL_NAMES)


def surecall_available() -> bool:
    """Whether surecall's schema translation and matcher can run here."""
    try:
        from surecall import grammar_from_schema
        from surecall.engine import Matcher, TokenVocabulary  # noqa: F401

        grammar_from_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    except Exception:
        return False
    return True
