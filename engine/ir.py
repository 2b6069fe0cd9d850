"""Grammar intermediate representation.

Every front end (EBNF text, regular expressions, JSON Schema) builds these nodes;
the automaton compiler consumes them. Nodes are immutable and hashable so that
identical sub-expressions can be shared and compiled grammars cached by value.

All terminals are byte-level. ``CharSet`` is the one place where Unicode enters:
it matches exactly one code point, encoded as UTF-8, so an automaton built from it
never accepts half of a multi-byte character.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

MAX_CODE_POINT = 0x10FFFF
#: The deepest nesting of groups the parsers accept: the automaton is built by recursion
#: over a grammar's nesting, and a deeper one would exhaust Python's stack there.
MAX_GROUP_DEPTH = 100


class Node:
    """Base class of grammar expressions."""

    __slots__ = ()

    def __getstate__(self):
        # The memoised hash is left out: string hashes differ from process to process.
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state


@dataclass(frozen=True)
class Bytes(Node):
    """A literal byte string (the empty string matches nothing but succeeds)."""

    value: bytes


@dataclass(frozen=True)
class ByteSet(Node):
    """Exactly one byte whose value lies in one of the inclusive ``ranges``."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class CharSet(Node):
    """Exactly one Unicode code point (UTF-8 encoded) in ``ranges``, or outside them if ``negated``.

    Surrogates (U+D800..U+DFFF) are never matched: they have no UTF-8 encoding.
    """

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclass(frozen=True)
class Seq(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt(Node):
    """Alternation; ``Alt(())`` matches nothing at all."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat(Node):
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Node
    min: int = 0
    max: int | None = None


@dataclass(frozen=True)
class Ref(Node):
    """A reference to a named rule of the enclosing grammar."""

    name: str


@dataclass(frozen=True)
class AnyToken(Node):
    """``any!``: exactly one token of the vocabulary, whatever its bytes."""


@dataclass(frozen=True)
class Except(Node):
    """``except!(strings, n)``: text containing none of ``strings``, spread over at most ``max_tokens`` tokens.

    The exclusion is stateful (see the engine design seed): an excluded string may not
    start anywhere inside the text this node matched, even if it would end in what follows.
    """

    strings: tuple[bytes, ...]
    max_tokens: int | None = None


@dataclass(frozen=True)
class Intersect(Node):
    """Strings matched by every item. Items must be regular (no recursion, no token-level nodes)."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Complement(Node):
    """Byte strings ``item`` (regular) does not match; only as an item of an ``Intersect``,
    whose other items say which strings there are to choose from."""

    item: Node


def _hash_once(cls: type) -> None:
    """Memoise the hash of a node: a dataclass hashes its whole subtree every time, and
    compiled grammars are cached by their rules (shared subtrees would be hashed once
    per path to them)."""
    field_hash = cls.__hash__

    def __hash__(self) -> int:
        found = self.__dict__.get("_hash")
        if found is None:
            # Frozen dataclasses refuse attribute assignment; the instance dict takes it.
            found = self.__dict__["_hash"] = field_hash(self)
        return found

    cls.__hash__ = __hash__


for _node_class in (Bytes, ByteSet, CharSet, Seq, Alt, Repeat, Ref, AnyToken, Except, Intersect, Complement):
    _hash_once(_node_class)

EMPTY = Seq(())
NOTHING = Alt(())

Expr = Union[Node, str, bytes]


def lift(expr: Expr) -> Node:
    """Accept plain ``str``/``bytes`` wherever a node is expected."""
    if isinstance(expr, Node):
        return expr
    if isinstance(expr, str):
        return Bytes(expr.encode("utf-8"))
    if isinstance(expr, (bytes, bytearray)):
        return Bytes(bytes(expr))
    raise TypeError(f"not a grammar expression: {expr!r}")


def literal(text: str | bytes) -> Bytes:
    return Bytes(text.encode("utf-8") if isinstance(text, str) else bytes(text))


def seq(*items: Expr) -> Node:
    flat: list[Node] = []
    for item in map(lift, items):
        if isinstance(item, Seq):
            flat.extend(item.items)
        else:
            flat.append(item)
    if any(type(item) is Alt and not item.items for item in flat):
        return NOTHING
    merged: list[Node] = []
    for item in flat:
        if isinstance(item, Bytes) and merged and isinstance(merged[-1], Bytes):
            merged[-1] = Bytes(merged[-1].value + item.value)
        elif not (isinstance(item, Bytes) and not item.value):
            merged.append(item)
    return merged[0] if len(merged) == 1 else Seq(tuple(merged))


def alt(*items: Expr) -> Node:
    flat: list[Node] = []
    seen: set[Node] = set()
    for item in map(lift, items):
        members = item.items if isinstance(item, Alt) else (item,)
        for member in members:
            if member not in seen:
                seen.add(member)
                flat.append(member)
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def repeat(item: Expr, min: int = 0, max: int | None = None) -> Node:
    if min < 0 or (max is not None and max < min):
        raise ValueError(f"bad repetition bounds {{{min},{max}}}")
    node = lift(item)
    if max == 0:
        return EMPTY
    if min == 1 and max == 1:
        return node
    return Repeat(node, min, max)


def optional(item: Expr) -> Node:
    return repeat(item, 0, 1)


def star(item: Expr) -> Node:
    return repeat(item, 0, None)


def plus(item: Expr) -> Node:
    return repeat(item, 1, None)


def byte_set(values: Iterable[int]) -> ByteSet:
    """Exactly one of the bytes ``values``, runs of consecutive values as one range."""
    ranges: list[tuple[int, int]] = []
    for value in sorted(values):
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return ByteSet(tuple(ranges))


def chars(ranges: Iterable[tuple[int, int]], negated: bool = False) -> CharSet:
    """A set of code points, ranges normalised (sorted, merged)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if not (0 <= lo <= hi <= MAX_CODE_POINT):
            raise ValueError(f"bad code point range {lo:#x}-{hi:#x}")
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return CharSet(tuple(merged), negated)
