"""``Grammar``: a validated, immutable set of IR rules with a lazily compiled automaton.

Compiled automata are shared between structurally equal grammars through an LRU cache
of at most ``AUTOMATON_CACHE_SIZE`` entries (each automaton keeps its lazily built
transition table, so the cache bounds the memory spent on compiled grammars).
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock
from types import MappingProxyType
from typing import Any, Mapping

from .automaton import ByteAutomaton, build_nfa, utf8_sequences
from .gc_pause import collector_paused
from .errors import GrammarError
from .ir import Alt, AnyToken, Bytes, ByteSet, CharSet, Complement, Except, Intersect, Node, Ref, Repeat, Seq

#: Number of compiled automata kept alive across all grammars (least recently used evicted).
AUTOMATON_CACHE_SIZE = 64

_cache: OrderedDict = OrderedDict()
_cache_lock = Lock()


def _nests_too_deeply() -> GrammarError:
    # Grammars nest only so deep from the parsers and the schema translation; one built
    # otherwise (IR nodes directly) may nest deeper than the checks and the build recurse.
    return GrammarError("the grammar nests too deeply to compile")


def _cached_automaton(key, rules: dict[str, Node], start: str, text_mode: bool) -> ByteAutomaton:
    cache_key = (key, text_mode)
    with _cache_lock:
        found = _cache.get(cache_key)
        if found is not None:
            _cache.move_to_end(cache_key)
            return found
    with collector_paused(promote=True):
        try:
            automaton = ByteAutomaton(build_nfa(rules, start), text_mode=text_mode)
        except RecursionError:
            raise _nests_too_deeply() from None
    with _cache_lock:
        _cache[cache_key] = automaton
        while len(_cache) > AUTOMATON_CACHE_SIZE:
            _cache.popitem(last=False)
    return automaton


def clear_automaton_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _children(node: Node) -> tuple[Node, ...]:
    t = type(node)
    if t is Seq or t is Alt or t is Intersect:
        return node.items
    if t is Repeat or t is Complement:
        return (node.item,)
    return ()


def _check_node(node: Node, rule: str, rules: Mapping[str, Node], checked: set[int]) -> None:
    """Raise GrammarError for a malformed node under ``node``. Subtrees shared with nodes
    checked before (their ids in ``checked``, which the rules keep alive) are skipped."""
    stack = [node]
    intersected: set[int] = set()  # complements met as items of an intersection
    while stack:
        n = stack.pop()
        if id(n) in checked:
            continue
        checked.add(id(n))
        if not isinstance(n, Node):
            raise GrammarError(f"not a grammar node: {n!r}", rule=rule)
        t = type(n)
        if t is Intersect:
            intersected.update(id(item) for item in n.items if type(item) is Complement)
        elif t is Complement and id(n) not in intersected:
            raise GrammarError("a complement is only allowed as an item of an intersection", rule=rule)
        if t is Ref:
            if n.name not in rules:
                raise GrammarError(f"undefined rule {n.name!r}", rule=rule)
        elif t is Repeat:
            if n.min < 0 or (n.max is not None and n.max < n.min):
                raise GrammarError(f"bad repetition bounds {{{n.min},{n.max}}}", rule=rule)
        elif t is Except:
            if not n.strings or any(not s for s in n.strings):
                raise GrammarError("except! needs at least one non-empty string", rule=rule)
            if n.max_tokens is not None and n.max_tokens < 0:
                raise GrammarError("except! token limit must be non-negative", rule=rule)
        elif t is Bytes:
            if not isinstance(n.value, bytes):
                raise GrammarError(f"Bytes value must be bytes, got {type(n.value).__name__}", rule=rule)
        elif t is ByteSet:
            for lo, hi in n.ranges:
                if not (0 <= lo <= hi <= 255):
                    raise GrammarError(f"bad byte range {lo}-{hi}", rule=rule)
        elif t is CharSet:
            for lo, hi in n.ranges:
                if not (0 <= lo <= hi <= 0x10FFFF):
                    raise GrammarError(f"bad code point range {lo:#x}-{hi:#x}", rule=rule)
        stack.extend(_children(n))


def _productive(node: Node, known: set[str]) -> bool:
    t = type(node)
    if t is Bytes or t is AnyToken or t is Except or t is Complement:
        # A complement's strings are those of the intersection it is in: whether any are
        # left shows when the automaton is built (an empty intersection is an error there).
        return True
    if t is ByteSet:
        return any(lo <= hi for lo, hi in node.ranges)
    if t is CharSet:
        return bool(utf8_sequences(node.ranges, node.negated))
    if t is Seq or t is Intersect:
        return all(_productive(item, known) for item in node.items)
    if t is Alt:
        return any(_productive(item, known) for item in node.items)
    if t is Repeat:
        return node.min == 0 or _productive(node.item, known)
    if t is Ref:
        return node.name in known
    return False


def _productive_rules(rules: Mapping[str, Node], assumed: set[str]) -> set[str]:
    known = set(assumed)
    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            if name not in known and _productive(node, known):
                known.add(name)
                changed = True
    return known


def check_productive(rules: Mapping[str, Node]) -> None:
    """Raise for a rule that cannot derive any finite string, naming the root cause.

    A rule that is unproductive only because it uses another unproductive rule is not
    the one to report: prefer a rule that stays unproductive even when every other
    failing rule is assumed to work.
    """
    known = _productive_rules(rules, set())
    failing = [name for name in rules if name not in known]
    if not failing:
        return
    culprit = failing[0]
    for name in failing:
        others = known | (set(failing) - {name})
        if not _productive(rules[name], others):
            culprit = name
            break
    raise GrammarError(f"rule {culprit!r} can never derive a finite string", rule=culprit)


def _rebuild_grammar(cls, rules, start, extra):
    grammar = Grammar.__new__(cls)
    Grammar.__init__(grammar, rules, start)
    for name, value in extra.items():
        object.__setattr__(grammar, name, value)
    return grammar


class Grammar:
    """An immutable grammar: named IR rules and a start rule."""

    __slots__ = ("_rules", "_start", "_key", "_hash", "_automaton", "_text_automaton")

    def __init__(self, rules: Mapping[str, Node], start: str = "start") -> None:
        if not isinstance(rules, Mapping) or not rules:
            raise GrammarError("a grammar needs at least one rule")
        frozen = dict(rules)
        for name in frozen:
            if not isinstance(name, str) or not name:
                raise GrammarError(f"rule names must be non-empty strings, got {name!r}")
        if start not in frozen:
            raise GrammarError(f"start rule {start!r} is not defined", rule=start)
        checked: set[int] = set()
        for name, node in frozen.items():
            _check_node(node, name, frozen, checked)
        try:
            check_productive(frozen)
        except RecursionError:
            raise _nests_too_deeply() from None
        self._rules = MappingProxyType(frozen)
        self._start = start
        self._key = (start, tuple(sorted(frozen.items(), key=lambda item: item[0])))
        self._hash = None
        self._automaton = None
        self._text_automaton = None

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def from_ebnf(cls, text: str) -> "Grammar":
        from .ebnf import parse_ebnf

        rules, start = parse_ebnf(text)
        return cls(rules, start)

    @classmethod
    def from_regex(cls, pattern: str) -> "Grammar":
        from .regex import regex_to_ir

        return cls({"start": regex_to_ir(pattern)})

    @classmethod
    def from_ir(cls, node: Node) -> "Grammar":
        return cls({"start": node})

    # -- properties -------------------------------------------------------------------
    @property
    def rules(self) -> Mapping[str, Node]:
        return self._rules

    @property
    def start(self) -> str:
        return self._start

    @property
    def automaton(self) -> ByteAutomaton:
        """The token-level byte automaton (compiled on first use, shared via the LRU cache)."""
        if self._automaton is None:
            self._automaton = _cached_automaton(self._key, dict(self._rules), self._start, False)
        return self._automaton

    @property
    def text_automaton(self) -> ByteAutomaton:
        """The automaton for whole-string checks (``any!`` = any non-empty string)."""
        if self._text_automaton is None:
            automaton = self.automaton
            if automaton.has_token_hooks:
                automaton = _cached_automaton(self._key, dict(self._rules), self._start, True)
            self._text_automaton = automaton
        return self._text_automaton

    def accepts(self, text: str | bytes) -> bool:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        automaton = self.text_automaton
        return automaton.is_accepting(automaton.step_bytes(automaton.initial, data))

    def to_ebnf(self) -> str:
        from .ebnf import rules_to_ebnf

        return rules_to_ebnf(self._rules, self._start)

    # -- value semantics --------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grammar) and self._key == other._key

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._key)
        return self._hash

    def __repr__(self) -> str:
        return f"Grammar({len(self._rules)} rules, start={self._start!r})"

    def __reduce__(self):
        # Subclasses may add slots (metadata); carry them along, never the compiled automata.
        extra = {}
        for cls in type(self).__mro__:
            if cls is Grammar:
                break
            for name in getattr(cls, "__slots__", ()):
                if hasattr(self, name):
                    extra[name] = getattr(self, name)
        return (_rebuild_grammar, (type(self), dict(self._rules), self._start, extra))


class CheckedGrammar(Grammar):
    """A :class:`Grammar` with a run-time ``text_check`` (or None): a stateful condition on
    the text that no grammar can express (see docs/grammars.md). The matcher masks the
    tokens the check refuses, and :meth:`accepts` applies it to whole texts."""

    __slots__ = ("text_check",)

    def __init__(self, rules: Mapping[str, Node], start: str = "start", *, text_check: Any = None) -> None:
        super().__init__(rules, start)
        object.__setattr__(self, "text_check", text_check)

    def accepts(self, text: str | bytes) -> bool:
        if not super().accepts(text):
            return False
        check = getattr(self, "text_check", None)
        if check is None:
            return True
        return check.accepts(text.encode("utf-8") if isinstance(text, str) else bytes(text))
