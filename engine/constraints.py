"""Custom constraints written as incremental parsers.

A constraint is any object following the ``IncrementalParser`` protocol:

* ``append(text)`` parses more text and raises ``ParseFailure`` when the text can no
  longer become valid (required);
* ``copy()`` returns an independent parser in the same state (required);
* ``is_complete()`` says whether the text so far is a complete output, so the end of
  sequence may follow (required);
* ``can_continue()`` whether more text may follow (optional, default True);
* ``get_next()`` an exhaustive list of the strings that may come next, or an empty
  list when that is not known (optional);
* ``valid_token_group()`` / ``invalid_token_group()`` a token group (an object whose
  ``filter(token_text) -> bool`` selects tokens) that is certainly allowed / certainly
  not allowed next, or None (optional);
* ``shortest_completion()`` a shortest string completing the output (optional; needed
  for ``max_tokens`` and ``min_tokens_to_finish``).

``ConstraintMatcher(parser, vocab)`` turns such a parser into the matcher API
(``allowed_token_ids``, ``fill_bitmask``, ``advance``, ``forced``, ...). It walks the
token trie depth first, appending one character at a time to copies of the parser;
a failure prunes the whole subtree below, so a token is checked through the prefix it
shares with its neighbours only once. Tokens ending inside a multi-byte character are
allowed when some token extending them completes a character the parser accepts.
"""

from __future__ import annotations

import codecs
from typing import Any, Iterable, Sequence

import numpy as np

from .matcher import UNREACHABLE, MaskEntry, MatcherBase
from .vocab import TokenVocabulary

_MAX_FORCED_ROUNDS = 64


class ParseFailure(Exception):
    """Raised by ``IncrementalParser.append`` when the text can no longer be valid."""


class IncrementalParser:
    """Base class with the optional methods of the protocol given their neutral defaults."""

    def append(self, text: str) -> None:
        raise ParseFailure(f"{type(self).__name__} accepts no text")

    def copy(self) -> "IncrementalParser":
        raise TypeError(f"{type(self).__name__} must implement copy()")

    def is_complete(self) -> bool:
        return False

    def can_continue(self) -> bool:
        return True

    def get_next(self) -> list[str]:
        return []

    def valid_token_group(self):
        return None

    def invalid_token_group(self):
        return None


class OneOf(IncrementalParser):
    """The output is exactly one of ``options``."""

    def __init__(self, options: Iterable[str], _prefix: str = "") -> None:
        self.options = tuple(options)
        if not self.options:
            raise ValueError("OneOf needs at least one option")
        if not all(isinstance(option, str) for option in self.options):
            raise TypeError("OneOf options must be strings")
        self.prefix = _prefix

    def append(self, text: str) -> None:
        extended = self.prefix + text
        if not any(option.startswith(extended) for option in self.options):
            raise ParseFailure(f"{extended!r} starts none of the options")
        self.prefix = extended

    def copy(self) -> "OneOf":
        return OneOf(self.options, self.prefix)

    def is_complete(self) -> bool:
        return self.prefix in self.options

    def can_continue(self) -> bool:
        return any(len(option) > len(self.prefix) and option.startswith(self.prefix) for option in self.options)

    def get_next(self) -> list[str]:
        size = len(self.prefix)
        return sorted({o[size:] for o in self.options if len(o) > size and o.startswith(self.prefix)})

    def shortest_completion(self) -> str:
        size = len(self.prefix)
        return min((o[size:] for o in self.options if o.startswith(self.prefix)), key=len)


class _ParserState:
    """A parser plus the bytes of an unfinished UTF-8 character (immutable once in the history)."""

    __slots__ = ("parser", "pending")

    def __init__(self, parser: Any, pending: bytes = b"") -> None:
        self.parser = parser
        self.pending = pending


def _split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """(decoded text, trailing bytes of an unfinished character), or None if ``data`` is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    return text, decoder.getstate()[0]


def _group_filter(group) -> Any:
    if group is None:
        return None
    test = getattr(group, "filter", None)
    if callable(test):
        return test
    if callable(group):
        return group
    raise TypeError(f"a token group must have a filter(token) method, not {type(group).__name__}")


class ConstraintMatcher(MatcherBase):
    """The matcher API over an ``IncrementalParser`` (see the module docstring)."""

    def __init__(self, parser: Any, vocab: TokenVocabulary, *, max_tokens: int | None = None) -> None:
        for name in ("append", "copy", "is_complete"):
            if not callable(getattr(parser, name, None)):
                raise TypeError(f"a constraint parser needs an {name}() method; {type(parser).__name__} has none")
        if max_tokens is not None and not callable(getattr(parser, "shortest_completion", None)):
            raise TypeError(
                f"max_tokens needs the parser to define shortest_completion(); {type(parser).__name__} does not"
            )
        self.parser = parser
        self._memo: tuple[Any, MaskEntry] | None = None
        self._group_members: dict[int, tuple[Any, np.ndarray]] = {}
        self._decided_memo: dict[tuple[int, int], tuple[Any, Any, _Decided]] = {}
        super().__init__(vocab, max_tokens)

    def _initial_state(self) -> _ParserState:
        return _ParserState(self.parser.copy())

    # ------------------------------------------------------------ stepping
    def _accepting(self, state: _ParserState) -> bool:
        return not state.pending and bool(state.parser.is_complete())

    def _can_continue(self, state: _ParserState) -> bool:
        if state.pending:
            return True
        probe = getattr(state.parser, "can_continue", None)
        return bool(probe()) if callable(probe) else True

    def _append(self, state: _ParserState, data: bytes) -> _ParserState | None:
        split = _split_utf8(state.pending + data)
        if split is None:
            return None
        text, pending = split
        parser = state.parser
        if text:
            parser = parser.copy()
            try:
                parser.append(text)
            except ParseFailure:
                return None
        return _ParserState(parser, pending)

    def _end_state(self, state: _ParserState, token_id: int) -> _ParserState | None:
        data = self.vocab.token_bytes(token_id)
        new_state = self._append(state, data)
        if new_state is None or not new_state.pending:
            return new_state
        # Ending inside a character: fine when the parser lists a next string that
        # starts with these bytes, or when some longer token completes it acceptably.
        if not state.pending:
            options = _call_optional(state.parser, "get_next") or []
            if any(option.encode("utf-8").startswith(data) for option in options):
                return new_state
        path = self.vocab.trie.descend(data)
        if len(path) != len(data) or not self._subtree_viable(
            path[-1], new_state.parser, new_state.pending, bool(state.pending)
        ):
            return None
        return new_state

    # ---------------------------------------------------------------- masks
    def _entry(self, state: _ParserState) -> MaskEntry:
        if self._memo is not None and self._memo[0] is state:
            return self._memo[1]
        allowed: list[int] = []
        decided = None
        options = [] if state.pending else list(_call_optional(state.parser, "get_next") or [])
        if options:
            self._collect_from_options(state, options, allowed)
        else:
            decided = self._decided_tokens(state.parser) if not state.pending else None
            self._collect(0, state.parser, state.pending, allowed, decided, bool(state.pending))
        ids = np.unique(np.asarray(allowed, dtype=np.int32))
        if not options and decided is not None:
            ids = np.union1d(ids[~decided.known[ids]], decided.valid_ids).astype(np.int32)
        entry = MaskEntry(self.vocab.size, ids)
        self._memo = (state, entry)
        return entry

    def _collect_from_options(self, state: _ParserState, options: Sequence[str], allowed: list[int]) -> None:
        trie = self.vocab.trie
        seen: set[int] = set()
        for option in options:
            data = option.encode("utf-8")
            path = trie.descend(data)
            for node in path:
                for token_id in trie.tokens_at(node).tolist():
                    if token_id not in seen and self._end_state(state, token_id) is not None:
                        seen.add(token_id)
                        allowed.append(token_id)
            if len(path) == len(data) and data:
                after = self._append(state, data)
                if after is not None:
                    self._collect(path[-1], after.parser, after.pending, allowed, None)

    def _collect(
        self, node: int, parser: Any, partial: bytes, allowed: list[int], decided, spell_out: bool = False
    ) -> bool:
        """Depth-first walk below ``node``; appends allowed tokens; True if any character completed acceptably.

        ``spell_out``: a token ending inside a character is also viable when the
        character can be finished byte by byte (the walk began inside a character).
        """
        trie = self.vocab.trie
        start, end = int(trie.child_start[node]), int(trie.child_end[node])
        any_ok = False
        for child in range(start, end):
            # Inside a character the walk goes on regardless: it must learn whether
            # any completion of the character is accepted.
            if decided is not None and not partial and not decided.undecided_below[child]:
                continue
            data = partial + bytes((int(trie.byte[child]),))
            split = _split_utf8(data)
            if split is None:
                continue
            text, pending = split
            if text:
                next_parser = parser.copy()
                try:
                    next_parser.append(text)
                except ParseFailure:
                    continue
                any_ok = True
            else:
                next_parser = parser
            below = self._collect(child, next_parser, pending, allowed, decided, spell_out)
            if pending and not below:
                if not (spell_out and _completes_character(next_parser, pending)):
                    continue
                below = True
            any_ok = any_ok or below
            if trie.has_tokens(child):
                allowed.extend(trie.tokens_at(child).tolist())
        return any_ok

    def _subtree_viable(self, node: int, parser: Any, partial: bytes, spell_out: bool = False) -> bool:
        if self._collect(node, parser, partial, [], None, spell_out):
            return True
        return spell_out and bool(partial) and _completes_character(parser, partial)

    def _decided_tokens(self, parser: Any):
        """Tokens settled by the parser's token groups, and which trie nodes still need a walk."""
        valid = _group_filter(_call_optional(parser, "valid_token_group"))
        invalid = _group_filter(_call_optional(parser, "invalid_token_group"))
        if valid is None and invalid is None:
            return None
        key = (id(valid), id(invalid))
        cached = self._decided_memo.get(key)
        if cached is not None and cached[0] is valid and cached[1] is invalid:
            return cached[2]
        known = np.zeros(self.vocab.size, dtype=bool)
        for group in (valid, invalid):
            if group is not None:
                known |= self._members(group)
        trie = self.vocab.trie
        undecided = np.zeros(trie.num_nodes, dtype=bool)
        owner = np.repeat(np.arange(trie.num_nodes), np.diff(trie.token_start))
        undecided[owner[~known[trie.token_ids]]] = True
        for depth in range(trie.max_depth, 0, -1):
            lo, hi = int(trie.level_start[depth]), int(trie.level_start[depth + 1])
            np.logical_or.at(undecided, trie.parent[lo:hi], undecided[lo:hi])
        valid_ids = np.flatnonzero(self._members(valid)) if valid is not None else np.zeros(0, dtype=np.int64)
        decided = _Decided(undecided, known, valid_ids.astype(np.int32))
        self._decided_memo[key] = (valid, invalid, decided)
        return decided

    def _members(self, group) -> np.ndarray:
        """Boolean over token ids: complete-UTF-8 text tokens the group's filter selects."""
        cached = self._group_members.get(id(group))
        if cached is not None and cached[0] is group:
            return cached[1]
        members = np.zeros(self.vocab.size, dtype=bool)
        for token_id in self.vocab.normal_ids.tolist():
            try:
                text = self.vocab.token_bytes(token_id).decode("utf-8")
            except UnicodeDecodeError:
                continue
            members[token_id] = bool(group(text))
        self._group_members[id(group)] = (group, members)
        return members

    # ---------------------------------------------------------------- forced
    def _forced_bytes(self, state: _ParserState) -> bytes:
        if state.pending:
            return b""
        parser = state.parser
        out = ""
        for _ in range(_MAX_FORCED_ROUNDS):
            if parser.is_complete():
                break
            options = list(_call_optional(parser, "get_next") or [])
            if not options:
                break
            common = _common_prefix(options)
            if not common:
                break
            parser = parser.copy()
            try:
                parser.append(common)
            except ParseFailure:
                break
            out += common
            if len(options) > 1 or common != options[0]:
                break
        return out.encode("utf-8")

    def _extends_past(self, state: _ParserState, node: int) -> bool:
        return self._subtree_viable(node, state.parser, state.pending)

    # ---------------------------------------------------------------- budget
    def _cost(self, state: _ParserState) -> int:
        """Greedy token path along shortest completions (see ``Matcher``)."""
        if not callable(getattr(state.parser, "shortest_completion", None)):
            raise TypeError(
                "min_tokens_to_finish needs the parser to define shortest_completion(); "
                f"{type(state.parser).__name__} does not"
            )
        steps = 0
        while not self._accepting(state):
            if state.pending:
                return UNREACHABLE
            completion = state.parser.shortest_completion()
            if completion is None:
                return UNREACHABLE
            next_state = self._greedy_token(state, completion.encode("utf-8"))
            if next_state is None:
                return UNREACHABLE
            state = next_state
            steps += 1
        return steps

    def _greedy_token(self, state: _ParserState, completion: bytes) -> _ParserState | None:
        trie = self.vocab.trie
        path = trie.descend(completion)
        for length in range(len(path), 0, -1):
            node = path[length - 1]
            if trie.has_tokens(node):
                after = self._append(state, completion[:length])
                if after is not None and not after.pending:
                    return after
        return None

    def _end_costs(self, entry: MaskEntry, limit: int) -> np.ndarray:
        state = self._state
        costs = np.zeros(len(entry.ids), dtype=np.int64)
        for index, token_id in enumerate(entry.ids.tolist()):
            after = self._end_state(state, token_id)
            if after is None:
                costs[index] = UNREACHABLE
                continue
            completion = after.parser.shortest_completion() if not after.pending else None
            if completion is not None and len(completion.encode("utf-8")) <= (self.remaining_tokens or 0) - 1:
                costs[index] = len(completion.encode("utf-8"))
            else:
                costs[index] = self._cost(after)
        return costs


class _Decided:
    """Token-group verdicts: tokens already known (valid or invalid), the valid ones, nodes left to walk."""

    __slots__ = ("undecided_below", "known", "valid_ids")

    def __init__(self, undecided_below: np.ndarray, known: np.ndarray, valid_ids: np.ndarray) -> None:
        self.undecided_below = undecided_below
        self.known = known
        self.valid_ids = valid_ids


def _utf8_length(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _completes_character(parser: Any, pending: bytes) -> bool:
    """Whether some continuation of the unfinished character ``pending`` is accepted (at most two bytes missing)."""
    missing = _utf8_length(pending[0]) - len(pending)
    if missing > 2:
        return False
    for value in range(0x80, 0xC0):
        data = pending + bytes((value,))
        split = _split_utf8(data)
        if split is None:
            continue
        text, rest = split
        if rest:
            if _completes_character(parser, rest):
                return True
            continue
        probe = parser.copy()
        try:
            probe.append(text)
        except ParseFailure:
            continue
        return True
    return False


def _call_optional(parser: Any, name: str):
    method = getattr(parser, name, None)
    return method() if callable(method) else None


def _common_prefix(strings: Sequence[str]) -> str:
    first, last = min(strings), max(strings)
    size = 0
    while size < len(first) and size < len(last) and first[size] == last[size]:
        size += 1
    return first[:size]
