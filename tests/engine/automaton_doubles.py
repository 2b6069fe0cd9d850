"""Small table-driven byte automata following the ByteAutomaton contract, for matcher tests.

They let the token side be tested against automata whose language is known exactly,
independently of the grammar compiler.
"""

from __future__ import annotations

from collections import deque

import numpy as np

DEAD = -1

UTF8_SEQUENCES = (
    ((0xC2, 0xDF), ((0x80, 0xBF),)),
    ((0xE0, 0xE0), ((0xA0, 0xBF), (0x80, 0xBF))),
    ((0xE1, 0xEC), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xED, 0xED), ((0x80, 0x9F), (0x80, 0xBF))),
    ((0xEE, 0xEF), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xF0, 0xF0), ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF1, 0xF3), ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF4, 0xF4), ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))),
)


class TableAutomaton:
    """A DFA over bytes; states that cannot reach acceptance are removed (so every live state can finish)."""

    has_token_hooks = False

    def __init__(self, edges: dict[int, dict[int, int]], accepting: set[int], initial: int = 0):
        states = set(edges) | {t for row in edges.values() for t in row.values()} | set(accepting) | {initial}
        size = max(states) + 1
        table = np.full((size, 256), DEAD, dtype=np.int32)
        for source, row in edges.items():
            for value, target in row.items():
                table[source, value] = target
        # Co-accessible states: those from which an accepting state is reachable.
        good = set(accepting)
        changed = True
        while changed:
            changed = False
            for state in range(size):
                if state not in good and any(int(t) in good for t in table[state] if t != DEAD):
                    good.add(state)
                    changed = True
        for state in range(size):
            for value in range(256):
                if table[state, value] != DEAD and int(table[state, value]) not in good:
                    table[state, value] = DEAD
        self.table = table
        self.accepting = frozenset(accepting)
        self.initial = initial if initial in good else DEAD
        self.step_calls = 0
        self._completion = self._shortest_completions()

    def _shortest_completions(self) -> dict[int, bytes]:
        # Backward BFS from the accepting states gives every state a shortest completion.
        size = self.table.shape[0]
        reverse: dict[int, list[tuple[int, int]]] = {s: [] for s in range(size)}
        for source in range(size):
            for value in range(256):
                target = int(self.table[source, value])
                if target != DEAD:
                    reverse[target].append((source, value))
        completion = {s: b"" for s in self.accepting}
        queue = deque(sorted(self.accepting))
        while queue:
            target = queue.popleft()
            for source, value in reverse[target]:
                if source not in completion:
                    completion[source] = bytes((value,)) + completion[target]
                    queue.append(source)
        return completion

    def step(self, config: int, value: int) -> int:
        if config == DEAD:
            return DEAD
        return int(self.table[config, value])

    def step_many(self, configs, values):
        configs = np.asarray(configs, dtype=np.int32)
        self.step_calls += 1
        values = np.asarray(values, dtype=np.uint8)
        return np.where(configs == DEAD, DEAD, self.table[np.maximum(configs, 0), values]).astype(np.int32)

    def is_accepting(self, config: int) -> bool:
        return config in self.accepting

    def can_continue(self, config: int) -> bool:
        return bool((self.table[config] != DEAD).any())

    def next_bytes(self, config: int) -> bytes:
        return bytes(np.flatnonzero(self.table[config] != DEAD).tolist())

    def min_bytes_to_accept(self, config: int) -> int:
        return len(self._completion[config])

    def shortest_completion(self, config: int) -> bytes:
        return self._completion[config]

    def after_any_token(self, config: int) -> int:
        return DEAD

    def on_token_boundary(self, config: int) -> int:
        return config

    def accepts(self, data: bytes) -> bool:
        config = self.initial
        for value in data:
            config = self.step(config, value)
            if config == DEAD:
                return False
        return self.is_accepting(config)


class FakeGrammar:
    def __init__(self, automaton):
        self.automaton = automaton

    def accepts(self, text) -> bool:
        data = text.encode() if isinstance(text, str) else text
        return self.automaton.accepts(data)


class Builder:
    """Assembles DFA edges state by state."""

    def __init__(self):
        self.edges: dict[int, dict[int, int]] = {}
        self.count = 0

    def state(self) -> int:
        self.count += 1
        self.edges.setdefault(self.count - 1, {})
        return self.count - 1

    def edge(self, source: int, values, target: int) -> None:
        for value in ([values] if isinstance(values, int) else values):
            self.edges.setdefault(source, {})[value] = target

    def literal(self, source: int, data: bytes) -> int:
        for value in data:
            target = self.state()
            self.edge(source, value, target)
            source = target
        return source

    def utf8_loop(self, state: int) -> None:
        """Every well-formed multi-byte UTF-8 character leads ``state`` back to itself."""
        for (lead_lo, lead_hi), continuations in UTF8_SEQUENCES:
            current = self.state()
            self.edge(state, range(lead_lo, lead_hi + 1), current)
            for index, (lo, hi) in enumerate(continuations):
                target = state if index == len(continuations) - 1 else self.state()
                self.edge(current, range(lo, hi + 1), target)
                current = target


def finite_language(strings) -> TableAutomaton:
    builder = Builder()
    root = builder.state()
    accepting = set()
    index: dict[bytes, int] = {b"": root}
    for text in strings:
        data = text.encode() if isinstance(text, str) else text
        for end in range(1, len(data) + 1):
            if data[:end] not in index:
                index[data[:end]] = builder.state()
                builder.edge(index[data[: end - 1]], data[end - 1], index[data[:end]])
        accepting.add(index[data])
    return TableAutomaton(builder.edges, accepting)


def json_like_record(keys=("name", "note")) -> TableAutomaton:
    """``{"k1": STRING, "k2": STRING}`` with compact spacing; strings hold any UTF-8 text and escapes."""
    builder = Builder()
    current = builder.literal(builder.state(), b"{")
    for position, key in enumerate(keys):
        prefix = (b"" if position == 0 else b", ") + b'"' + key.encode() + b'": "'
        current = builder.literal(current, prefix)
        inside = current
        builder.edge(inside, [b for b in range(0x20, 0x80) if b not in (0x22, 0x5C)], inside)
        builder.utf8_loop(inside)
        escape = builder.state()
        builder.edge(inside, 0x5C, escape)
        builder.edge(escape, b'"\\/bfnrt', inside)
        current = builder.state()
        builder.edge(inside, 0x22, current)
    end = builder.literal(current, b"}")
    return TableAutomaton(builder.edges, {end})


def digits_then_letters() -> TableAutomaton:
    """``[0-9]+[a-z]*``: accepting after the first digit, looping on digits, then on letters."""
    builder = Builder()
    start, digits, letters = builder.state(), builder.state(), builder.state()
    builder.edge(start, b"0123456789", digits)
    builder.edge(digits, b"0123456789", digits)
    builder.edge(digits, range(ord("a"), ord("z") + 1), letters)
    builder.edge(letters, range(ord("a"), ord("z") + 1), letters)
    return TableAutomaton(builder.edges, {digits, letters})


SAMPLE_PIECES = [
    b'{"', b'":', b' "', b'",', b'"}', b'", "', b"name", b"na", b"me", b"note", b"no", b"te",
    b"hello", b" world", b"wor", b"ld", b" ", b"  ", b"\n", b"\\\"", b"\\", b'"', b"12", b"123", b"abc", b"ab",
    "日本".encode(), "日".encode(), b"\xe6\x97", b"\xa5", b"\xe6", "é".encode(), b"\xc3", b"h\xc3",
    b'{"name', b'{"name": "', b' "h', b"x", b"xy", b"xyz",
]


def sample_vocabulary(extra_logits: int = 0):
    """All 256 single bytes, some longer pieces (including partial UTF-8), and special tokens 0..2."""
    from surecall.engine.vocab import TokenVocabulary

    specials = [b"<|endoftext|>", b"<|im_end|>", b"<|im_start|>"]
    table = specials + [bytes([b]) for b in range(256)] + SAMPLE_PIECES
    return TokenVocabulary(table, special_ids={0, 1, 2}, eos_token_ids={0, 1}, size=len(table) + extra_logits)


def walked_tokens(matcher, config: int) -> dict[int, int]:
    """Token id -> configuration after it, as the matcher's trie walk finds them at ``config``
    (configurations the walk deferred computed as a token budget has them computed)."""
    from surecall.engine.matcher import MaskEntry

    ids, ends, base, deferred = matcher._walk_all(config)
    assert len(set(ids.tolist())) == len(ids), "every token is reported once"
    entry = MaskEntry(matcher.vocab.size, ids, ends, base, deferred)
    return dict(zip(entry.ids.tolist(), entry.ends.tolist()))


def brute_force_allowed(automaton, vocab, config) -> set[int]:
    """Allowed text tokens by stepping every token of the vocabulary (the reference for masks)."""
    allowed = set()
    for token_id in vocab.normal_ids.tolist():
        current = config
        for value in vocab.token_bytes(token_id):
            current = automaton.step(current, value)
            if current == DEAD:
                break
        if current != DEAD and automaton.has_token_hooks:
            current = _boundary(automaton, current)
        if current == DEAD and automaton.has_token_hooks:
            any_end = automaton.after_any_token(config)
            current = DEAD if any_end == DEAD else _boundary(automaton, any_end)
        if current != DEAD and (not automaton.has_token_hooks or can_finish_with_tokens(automaton, vocab, current)):
            allowed.add(token_id)
    return allowed


def allowed_within_budget(matcher) -> set[int]:
    """The reference for a budget's mask at ``matcher``'s state: the tokens stepping allows
    whose own state's cost fits the tokens left after them."""
    automaton, vocab, here = matcher.automaton, matcher.vocab, matcher.config
    left = matcher.remaining_tokens - 1
    return {
        token for token in brute_force_allowed(automaton, vocab, here)
        if matcher._cost(automaton.step_bytes(here, vocab.token_bytes(token))) <= left
    }


_FINISHABLE: dict = {}


def can_finish_with_tokens(automaton, vocab, config) -> bool:
    """Whether some token sequence leads ``config`` to acceptance (breadth first over configurations)."""
    key = (id(automaton), config)
    if key in _FINISHABLE:
        return _FINISHABLE[key]
    seen, frontier, found = {config}, [config], False
    while frontier and not found and len(seen) < 5000:
        following = []
        for current in frontier:
            if automaton.is_accepting(current):
                found = True
                break
            for token_id in vocab.normal_ids.tolist():
                end = _token_end(automaton, vocab, current, token_id)
                if end != DEAD and end not in seen:
                    seen.add(end)
                    following.append(end)
        frontier = following
    _FINISHABLE[key] = found
    return found


def _token_end(automaton, vocab, config, token_id):
    current = config
    for value in vocab.token_bytes(token_id):
        current = automaton.step(current, value)
        if current == DEAD:
            break
    if current != DEAD:
        current = _boundary(automaton, current)
    if current == DEAD:
        any_end = automaton.after_any_token(config)
        current = DEAD if any_end == DEAD else _boundary(automaton, any_end)
    return current


def _boundary(automaton, config):
    end = automaton.on_token_boundary(config)
    if end != DEAD and not automaton.is_accepting(end) and not automaton.can_continue(end):
        return DEAD
    return end


class LazyTableAutomaton(TableAutomaton):
    """A TableAutomaton exposing ``transition_table`` as the real automaton does: entries
    start unknown (-2) and are filled by ``step``, which moves the table to a new, larger
    array every few fills (as the real one does when it grows)."""

    UNKNOWN = -2

    def __init__(self, edges, accepting, initial: int = 0, *, fail_on: tuple[int, int] | None = None):
        super().__init__(edges, accepting, initial)
        self._lazy = np.full(self.table.shape, self.UNKNOWN, dtype=np.int32)
        self.fills = 0
        self.fail_on = fail_on

    @property
    def transition_table(self) -> np.ndarray:
        return self._lazy

    def step(self, config: int, value: int) -> int:
        if config == DEAD:
            return DEAD
        if (config, value) == self.fail_on:
            raise RuntimeError(f"cannot compute the entry ({config}, {value})")
        if self.fills % 7 == 0:
            grown = np.full((self._lazy.shape[0] + 1, 256), self.UNKNOWN, dtype=np.int32)
            grown[: self._lazy.shape[0]] = self._lazy
            self._lazy = grown
        self.fills += 1
        found = int(self.table[config, value])
        self._lazy[config, value] = found
        return found


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is whole, well-formed UTF-8 (Python's strict decoder agrees)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def walk_randomly_inside_budget(matcher, rng) -> bytes:
    """Advance by random allowed tokens until finished, checking the budget never strands
    the walk and holds; returns the text."""
    budget, steps = matcher.max_tokens, 0
    while not matcher.is_finished():
        allowed = matcher.allowed_token_ids()
        assert len(allowed), "a budgeted matcher never runs out of allowed tokens"
        matcher.advance(int(rng.choice(allowed)))
        steps += 1
    assert steps <= budget + 1  # the closing end-of-sequence token is free
    return matcher.text_bytes()
