"""Byte-level automata compiled from the grammar IR.

Compilation has two stages:

1. The IR becomes a Thompson-style NFA over bytes (``_NfaBuilder``). Rules that do not
   recurse are inlined at every reference, so a regular grammar is a single NFA with
   no calls. Recursive rules (and large rules referenced from many places) are compiled
   once and entered through ``CALL`` positions.
2. ``ByteAutomaton`` determinises that NFA lazily. A *configuration* is an interned set
   of items ``(position, origin, watch, token_state)``. Without calls this is exactly
   the subset construction, so a regular grammar becomes a lazily built DFA. With calls
   the items form Earley sets whose origins name earlier configurations (a graph
   structured stack), which makes left recursion and ambiguous rules terminate.

Item fields:

* ``origin`` is ``None`` at top level, else ``(config_id, watch_at_call)``; the
  configuration being built refers to itself with ``config_id == SELF``. A return reads
  only the origin configuration's callers table, so ``config_id`` is the first
  configuration interned with that table (``_settle_context``): calls made with the same
  continuations from different configurations (an object's key position reached again,
  the same rule called again for the same place) give their callees the same items, and
  the configurations inside the call are built once.
* ``watch`` tracks ``except!`` exclusions that started inside an ``except!`` region
  and may still complete in the text that follows it (a frozenset of
  ``(except_id, string_index, matched_length)``), or ``None``.
* ``token_state`` is ``(tokens_used, touched_in_current_token)`` inside an
  ``except!(.., n)`` region, ``PENDING`` for an ``any!`` reached in the middle of a
  token (it may only start at a token boundary), the tuple of operand states inside
  an intersection, the number of finished iterations inside the body of a counted
  repetition, else ``None``.

Counted repetitions. ``x{m,n}`` with a large ``n`` and a plain body (regular, not
nullable, no ``any!``/``except!``/intersection/counted repetition inside) is compiled
as one copy of ``x`` between a ``COUNT_ENTER`` and a ``COUNT_HUB`` position: the
items of the body carry the iteration count, and the hub either starts another
iteration (below ``n``) or leaves (from ``m`` on). The automaton is the same as with
``n`` unrolled copies, but the NFA, and the time to build it, no longer grow with ``n``.
``x{m,}`` with a large ``m`` counts its first ``m`` copies the same way.

Intersections run their (regular) operands as separate automata in lockstep; a
product state is only kept if some byte string completes every operand at once, so
an intersection never leaves the automaton in a state that cannot finish.

Transitions are memoised in a dense ``int32`` table ``[configs, 256]`` (``-2`` = not
computed) so that ``step_many`` is a numpy lookup that computes only unseen entries. Bytes
that scan the same items form one part of a row, computed with one closure when one of
its bytes is first asked for; a whole row (``row``, ``next_bytes``) computes every part.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import threading
from collections import defaultdict
from functools import lru_cache

import numpy as np

from . import native
from .errors import EmptyLanguageError, GrammarError
from .gc_pause import collector_paused
from .ir import (
    MAX_CODE_POINT,
    Alt,
    AnyToken,
    Bytes,
    ByteSet,
    CharSet,
    Complement,
    Except,
    Intersect,
    Node,
    Ref,
    Repeat,
    Seq,
    seq,
    star,
)
from .trie import ASCII_BYTES, distinct

DEAD = -1
_UNKNOWN = -2
SELF = -1
PENDING = "pending"

# NFA position kinds.
(_BYTE, _EPS, _CALL, _END, _ACCEPT, _ANY_START, _ANY_INSIDE, _EX_ENTER, _EX_EXIT, _ISECT_ENTER, _ISECT,
 _COUNT_ENTER, _COUNT_HUB) = range(13)
_CONSUMING = (_BYTE, _ANY_START, _ANY_INSIDE, _ISECT)
# Kinds whose fields hold no position but in ``out``: a run of them can be copied elsewhere.
_COPYABLE_KINDS = frozenset((_BYTE, _EPS, _CALL, _EX_ENTER, _EX_EXIT, _COUNT_ENTER, _COUNT_HUB))

#: A subtree emitted this many times, of at least this many positions, is copied from
#: then on instead of emitted again.
_TEMPLATE_AFTER = 3
_MIN_TEMPLATE_POSITIONS = 8

#: Limits that turn pathological grammars into a clear error instead of a hang.
#: (``MAX_PRODUCT_STATES`` bounds the search that proves an intersection state can finish.)
MAX_NFA_POSITIONS = 500_000
#: How far past MAX_NFA_POSITIONS a grammar's size estimate may go before building is not tried.
_ESTIMATE_SLACK = 4
MAX_CONFIGS = 200_000
MAX_ITEMS_PER_CONFIG = 50_000
MAX_SEARCH_EXPANSIONS = 200_000
#: ``completion``: expansions of the exact search (past its lower bound's bytes) before the
#: weighted one takes over, and the weight that search gives the lower bound.
EXACT_COMPLETION_EXPANSIONS = 32
SHORT_COMPLETION_WEIGHT = 2
MAX_PRODUCT_STATES = 20_000
#: The longest completion (by its cheap upper bound) an intersection's liveness check
#: searches for as a witness before it expands the product instead.
WITNESS_MAX_BYTES = 512
#: Every byte, as the 256-bit sets of bytes ``completion_bound`` spells with.
ALL_BYTES_MASK = (1 << 256) - 1
# The bytes of each such set met (one or two: every byte, a vocabulary's single-byte tokens).
_SPELLABLE_SETS: dict[int, np.ndarray] = {}
#: The byte ranges of every multi-byte UTF-8 character: lead bytes, then each continuation.
_UTF8_FORMS = (
    ((0xC2, 0xDF), ((0x80, 0xBF),)),
    ((0xE0, 0xE0), ((0xA0, 0xBF), (0x80, 0xBF))),
    ((0xE1, 0xEC), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xED, 0xED), ((0x80, 0x9F), (0x80, 0xBF))),
    ((0xEE, 0xEF), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xF0, 0xF0), ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF1, 0xF3), ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF4, 0xF4), ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))),
)
#: A non-recursive rule larger than this that is referenced more than once is called
#: instead of inlined, so shared definitions do not multiply the NFA size.
INLINE_LIMIT = 4_000
#: So is one whose copies past the first would add more positions than this (a member
#: every state of an any-order object accepts, referenced from each of dozens of them).
INLINE_COPIES_LIMIT = 50_000
#: The longest chain of inlined rule references: a rule deeper than this is called
#: instead (see ``_rules_cutting_deep_chains``).
MAX_INLINE_DEPTH = 64
#: Bounded repetitions with at least this upper bound keep one copy of their body and
#: count the iterations in the items (see ``_NfaBuilder.counts``) instead of unrolling.
COUNTER_MIN = 4

_ALL_BYTES = (1 << 256) - 1
# Kernels are kept for good as closure keys: the native frozenset leaves the garbage
# collector's tracking when its items are plain values, as the native items are.
_frozen = frozenset if native.states is None else native.states.frozen


# ---------------------------------------------------------------------------
# UTF-8


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


def _utf8_split(lo: int, hi: int, out: list) -> None:
    """Byte-range sequences matching exactly the UTF-8 encodings of ``lo..hi`` (same length)."""
    if lo > hi:
        return
    length = len(_encode(lo))
    for i in range(1, length):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                _utf8_split(lo, lo | m, out)
                _utf8_split((lo | m) + 1, hi, out)
                return
            if hi & m != m:
                _utf8_split(lo, (hi & ~m) - 1, out)
                _utf8_split(hi & ~m, hi, out)
                return
    out.append(tuple(zip(_encode(lo), _encode(hi))))


def _code_point_ranges(charset: CharSet) -> list[tuple[int, int]]:
    """The set's ranges with negation applied and surrogates removed."""
    ranges = sorted(charset.ranges)
    if charset.negated:
        complement, nxt = [], 0
        for lo, hi in ranges:
            if lo > nxt:
                complement.append((nxt, lo - 1))
            nxt = max(nxt, hi + 1)
        if nxt <= MAX_CODE_POINT:
            complement.append((nxt, MAX_CODE_POINT))
        ranges = complement
    result = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
            if a <= b:
                result.append((a, b))
    return result


@lru_cache(maxsize=4096)
def utf8_sequences(ranges: tuple[tuple[int, int], ...], negated: bool) -> tuple[tuple[tuple[int, int], ...], ...]:
    """UTF-8 byte-range sequences for a character set (each sequence is one character)."""
    out: list = []
    for lo, hi in _code_point_ranges(CharSet(ranges, negated)):
        for a, b in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODE_POINT)):
            _utf8_split(max(lo, a), min(hi, b), out)
    return tuple(out)


@lru_cache(maxsize=4096)
def _sequence_template(sequences) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Byte positions matching the byte-range ``sequences``, as (masks, successors, heads):
    position ``i`` reads ``masks[i]`` and goes to position ``successors[i]`` (-1: past the
    character). Sequences share the positions of equal suffixes, and first bytes leading
    to the same position are one position: a character class costs a dozen positions."""
    masks: list[int] = []
    successors: list[int] = []
    tails: dict = {}

    def tail(suffix) -> int:
        found = tails.get(suffix)
        if found is None:
            follow = tail(suffix[1:]) if len(suffix) > 1 else -1
            masks.append(_range_mask(*suffix[0]))
            successors.append(follow)
            found = tails[suffix] = len(masks) - 1
        return found

    first_bytes: dict[int, int] = {}
    for sequence in sequences:
        follow = tail(sequence[1:]) if len(sequence) > 1 else -1
        first_bytes[follow] = first_bytes.get(follow, 0) | _range_mask(*sequence[0])
    heads = []
    for follow, mask in first_bytes.items():
        masks.append(mask)
        successors.append(follow)
        heads.append(len(masks) - 1)
    return tuple(masks), tuple(successors), tuple(heads)


def _range_mask(lo: int, hi: int) -> int:
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


def _byteset_mask(ranges) -> int:
    mask = 0
    for lo, hi in ranges:
        if not (0 <= lo <= hi <= 255):
            raise GrammarError(f"bad byte range {lo}-{hi}")
        mask |= _range_mask(lo, hi)
    return mask


# ---------------------------------------------------------------------------
# IR -> NFA


def recursive_components(rules: dict[str, Node], references: dict[str, list[str]]) -> list[frozenset[str]]:
    """The sets of rules that reach each other through references (Tarjan's strongly
    connected components), those of one rule only where it refers to itself;
    ``references`` holds each rule's ``_references_list``."""
    graph = {name: sorted(set(references[name]) & rules.keys()) for name in rules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[frozenset[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            name, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[name] = min(low[name], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
            if low[name] == index[name]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == name:
                        break
                if len(component) > 1 or name in graph[name]:
                    result.append(frozenset(component))
    return result


def regular_cycles(
    rules: dict[str, Node], components: list[frozenset[str]], *, single_rules: bool
) -> dict[str, frozenset[str]]:
    """The rules of each component that refer to each other only as the last thing they
    match (a right-linear cycle: an automaton written one rule per state), by name. Such
    a cycle matches a regular language, so it may be inlined as one piece of the NFA, each
    reference a jump, where calling it would push one return point per reference and
    build new parse states at every step through it. A rule that refers only to itself
    counts with ``single_rules`` (where nothing may be called); otherwise it is called and
    keeps its own jump (see ``_NfaBuilder.build``)."""
    found: dict[str, frozenset[str]] = {}
    for component in components:
        if (single_rules or len(component) > 1) and all(_refers_only_last(rules[name], component) for name in component):
            found.update(dict.fromkeys(component, component))
    return found


def _refers_only_last(node: Node, names: frozenset[str]) -> bool:
    """Whether every reference in ``node`` to one of ``names`` is the last thing ``node`` matches."""
    stack = [(node, True)]
    while stack:
        item, last = stack.pop()
        t = type(item)
        if t is Ref:
            if not last and item.name in names:
                return False
        elif t is Alt:
            stack.extend((option, last) for option in item.items)
        elif t is Seq:
            stack.extend((part, last and i == len(item.items) - 1) for i, part in enumerate(item.items))
        elif t is Repeat or t is Complement:
            stack.append((item.item, False))
        elif t is Intersect:
            stack.extend((part, False) for part in item.items)
    return True


class _Nfa:
    """Flat arrays describing NFA positions (see the ``_BYTE`` .. ``_EX_EXIT`` kinds)."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.mask: list[int] = []  # consumed bytes as a 256-bit int (consuming kinds; 0 for the others)
        self.out: list = []  # successor; list of targets for _EPS; (body, after) for _COUNT_*
        self.arg: list[int] = []  # rule index (_CALL/_END), except id (_EX_*, tagged _BYTE), counter (_COUNT_*), else -1
        self.owner: list[int] = []  # called rule whose body holds the position (-1: top level)
        self.rule_names: list[str] = []
        self.rule_start: list[int] = []
        self.except_strings: list[tuple[bytes, ...]] = []
        self.except_limit: list[int | None] = []
        self.intersections: list[_Product] = []
        self.counters: list[tuple[int, int]] = []  # (min, max) of each counted repetition
        self.root = -1
        self.useful: list[bool] = []
        self.may_dead_end = False  # something matching nothing was emitted
        self._reverse: _ReverseGraph | None = None
        self.has_any = False
        self.has_calls = False
        # Search-shaped sequences' subsumption, once built (``_SearchTails``), or None.
        self.search_tails: _SearchTails | None = None

    def add(self, kind: int, mask: int, out, arg: int, owner: int) -> int:
        self.kind.append(kind)
        self.mask.append(mask)
        self.out.append(out)
        self.arg.append(arg)
        self.owner.append(owner)
        if len(self.kind) > MAX_NFA_POSITIONS:
            raise self.too_large()
        return len(self.kind) - 1

    def add_many(self, kind: int, masks, outs, arg: int, owner: int) -> int:
        """Add positions of one kind, in order; returns the first one's index."""
        first = len(self.kind)
        count = len(masks)
        self.kind.extend([kind] * count)
        self.mask.extend(masks)
        self.out.extend(outs)
        self.arg.extend([arg] * count)
        self.owner.extend([owner] * count)
        if len(self.kind) > MAX_NFA_POSITIONS:
            raise self.too_large()
        return first

    def reverse_graph(self) -> "_ReverseGraph":
        if self._reverse is None:
            self._reverse = _ReverseGraph(self)
        return self._reverse

    @staticmethod
    def too_large() -> GrammarError:
        return GrammarError(
            f"grammar too large: more than {MAX_NFA_POSITIONS} automaton positions "
            "(large repetition counts multiply the size of what they repeat)"
        )


def _rules_cutting_deep_chains(rules: dict[str, Node], references: dict[str, list[str]], called: set[str]) -> set[str]:
    """Rules to call instead of inline so that no chain of inlined references is longer
    than ``MAX_INLINE_DEPTH``: inlining (and sizing) follows references recursively, and a
    long chain (an object's optional properties in order, one rule per position) would
    exhaust Python's stack. ``called`` are the rules called anyway (the recursive ones, so
    that what is left to inline is acyclic)."""
    depth: dict[str, int] = {}  # of a rule's inlined references, itself included
    cut: set[str] = set()
    for root in rules:
        if root in depth or root in called:
            continue
        work = [(root, iter(references[root]))]
        while work:
            name, used = work[-1]
            for child in used:
                if child in rules and child not in called and child not in depth:
                    work.append((child, iter(references[child])))
                    break
            else:
                work.pop()
                deepest = max(
                    (depth[child] for child in references[name] if child in depth and child not in cut), default=0
                )
                depth[name] = deepest + 1
                if depth[name] > MAX_INLINE_DEPTH:
                    cut.add(name)
    return cut


class _NfaBuilder:
    def __init__(
        self, rules: dict[str, Node], start: str, references: dict[str, list[str]] | None = None, *,
        call_large_rules: bool = True,
    ) -> None:
        """``call_large_rules``: whether a large rule referenced more than once is called
        rather than copied at each reference (an intersection's operand, which may make no
        call, copies it)."""
        self.rules = rules
        self._call_large_rules = call_large_rules
        self.nfa = _Nfa()
        if references is None:
            memo: dict[int, tuple] = {}
            references = {name: _references_list(node, memo) for name, node in rules.items()}
        self._references = references
        components = recursive_components(rules, self._references)
        # Rules of regular cycles are inlined (see regular_cycles), every other recursive one called.
        self.cycles = regular_cycles(rules, components, single_rules=not call_large_rules)
        self.recursive = {name for component in components for name in component if name not in self.cycles}
        # The entry of each rule of a cycle inlined before, by (rule, continuation, owner).
        self._cycle_entries: dict[tuple[str, int, int], int] = {}
        # The positions a cycle is estimated to take (all of its rules are inlined together).
        self._cycle_sizes: dict[frozenset[str], int] = {}
        self._plain_memo: dict[int, tuple[Node, bool | None]] = {}
        self.called = self._choose_called_rules()
        self.rule_index: dict[str, int] = {}
        self.pending: list[tuple[int, str]] = []
        self.owner = -1
        self.rule = start
        # (end, head) of the called rule (``owner``) whose body is emitted (see build).
        self._tail_call: tuple[int, int] | None = None
        self._tail_call_used = False
        # Intersections of the same operands (a schema's format or pattern met at many
        # places) share one product, and with it its liveness memo.
        self._products: dict[tuple, int] = {}
        # Inlined rules referenced more than once: their positions, to copy at later references.
        self._templates: dict[str, tuple | None] = {}
        # Composite nodes met again (shared subtrees, bounded repetitions), by identity: the
        # node itself (so that its id stays its own), how often it was emitted, and its
        # template once made (see _emit_composite).
        self._subtrees: dict[int, tuple] = {}
        # Nodes emitted before with the same continuation, in the same rule body: the
        # positions already there match the node and go on as a new copy would, so a new
        # reference shares them. Composite nodes by identity ((node, entry), the node kept
        # so that its id stays its own), terminals by value (their entry).
        self._emitted: dict[tuple, int | tuple] = {}
        # Search-shaped sequences emitted (``X* body X*``): (their first position, the
        # position after their last, their tail's hub, the position after them, X),
        # analysed once the automaton is wired (``_SearchTails``).
        self._searches: list[tuple[int, int, int, int, Node]] = []

    # -- which rules are called instead of inlined ---------------------------------
    def _choose_called_rules(self) -> set[str]:
        called = set(self.recursive)
        # A cycle is inlined whole, never cut; the chains below it are cut as any others.
        called |= _rules_cutting_deep_chains(self.rules, self._references, called | self.cycles.keys())
        self.sizes: dict[str, int] = {}
        self.node_sizes: dict[int, int] = {}
        self.ref_counts = ref_counts = {}
        for names in self._references.values():
            for name in names:
                ref_counts[name] = ref_counts.get(name, 0) + 1
        self.called = called
        if self._call_large_rules:
            # Sorted: string hashes, and so a set's order, differ from process to process.
            for cycle in sorted(set(self.cycles.values()), key=min):
                inside = sum(name in cycle for member in cycle for name in self._references[member])
                copies = sum(ref_counts.get(member, 0) for member in cycle) - inside - 1
                if copies > 0 and self._too_large_to_copy(self._cycle_size(cycle), copies):
                    # Called like any other recursion: each rule of it jumps only to itself.
                    called |= cycle
                    for member in cycle:
                        del self.cycles[member]
                    self._forget_sizes()
        for name in self.rules:
            copies = ref_counts.get(name, 0) - 1
            if self._call_large_rules and name not in called and name not in self.cycles and copies > 0 and (
                self._too_large_to_copy(self.rule_size(name), copies)
            ):
                called.add(name)
                self._forget_sizes()
        return called

    @staticmethod
    def _too_large_to_copy(size: int, copies: int) -> bool:
        return size > INLINE_LIMIT or size * copies > INLINE_COPIES_LIMIT

    def _forget_sizes(self) -> None:
        # Sizes depend on which rules are called.
        self.sizes.clear()
        self.node_sizes.clear()
        self._cycle_sizes.clear()
        self._plain_memo.clear()

    def size(self, node: Node) -> int:
        """Estimated number of NFA positions ``node`` expands to (rules inlined where they will be)."""
        t = type(node)
        if t is Bytes:
            return len(node.value) + 1
        if t is Seq or t is Alt or t is Intersect or t is Repeat:
            # Nodes are shared between rules and repetitions: each is sized once per choice
            # of called rules (the rules' dictionary keeps the nodes, and so their ids, alive).
            found = self.node_sizes.get(id(node))
            if found is None:
                if t is Repeat:
                    if self.counts(node):
                        found = 2 + self.size(node.item)
                    elif self.counts_required(node):
                        found = 3 + 2 * self.size(node.item)
                    else:
                        copies = node.min + (1 if node.max is None else node.max - node.min)
                        found = 1 + self.size(node.item) * max(copies, 1)
                else:
                    found = 1 + sum(self.size(item) for item in node.items)
                self.node_sizes[id(node)] = found
            return found
        if t is Ref:
            if node.name in self.called:
                return 1
            cycle = self.cycles.get(node.name)
            return self.rule_size(node.name) if cycle is None else self._cycle_size(cycle)
        if t is CharSet:
            return 8
        return 4

    def _cycle_size(self, cycle: frozenset[str]) -> int:
        found = self._cycle_sizes.get(cycle)
        if found is None:
            # References inside the cycle are jumps: sized as one position while it is summed.
            self._cycle_sizes[cycle] = 1
            found = self._cycle_sizes[cycle] = sum(self.size(self.rules[name]) for name in sorted(cycle))
        return found

    def rule_size(self, name: str) -> int:
        if name not in self.sizes:
            self.sizes[name] = 1  # guards against cycles; recursive rules are called anyway
            self.sizes[name] = self.size(self.rules[name])
        return self.sizes[name]

    # -- counted repetitions ------------------------------------------------------------
    def counts(self, node: Repeat) -> bool:
        """Whether ``node`` is compiled with an iteration counter instead of unrolled."""
        return node.max is not None and node.max >= COUNTER_MIN and self._plain_nullable(node.item) is False

    def counts_required(self, node: Repeat) -> bool:
        """Whether ``node`` (unbounded) counts its required copies: ``x{m,}`` as ``x{m}`` then ``x*``."""
        return node.max is None and node.min >= COUNTER_MIN and self._plain_nullable(node.item) is False

    def _plain_nullable(self, node: Node) -> bool | None:
        """None if ``node`` cannot be the body of a counted repetition (it calls a rule,
        holds ``any!``, ``except!``, an intersection or a counted repetition, whose items
        use the same field as the counter); else whether it matches the empty string."""
        key = id(node)
        if key in self._plain_memo:
            return self._plain_memo[key][1]
        t = type(node)
        if t is Bytes:
            found = len(node.value) == 0
        elif t is ByteSet or t is CharSet:
            found = False
        elif t is Seq or t is Alt:
            parts = [self._plain_nullable(item) for item in node.items]
            if any(part is None for part in parts):
                found = None
            else:
                found = all(parts) if t is Seq else any(parts)
        elif t is Repeat:
            inner = self._plain_nullable(node.item)
            found = None if inner is None or self.counts(node) else (inner or node.min == 0)
        elif t is Ref and node.name in self.rules and node.name not in self.called and node.name not in self.cycles:
            found = self._plain_nullable(self.rules[node.name])
        else:
            found = None
        self._plain_memo[key] = (node, found)  # the node is kept so that its id stays its own
        return found

    # -- emitting -------------------------------------------------------------------
    def build(self, start: str) -> _Nfa:
        nfa = self.nfa
        estimate = self.size(Ref(start)) + sum(self.rule_size(name) for name in self.called)
        # The estimate counts every copy; positions shared between copies (see _emit_composite)
        # make the automaton smaller, often several times. Only a hopeless one fails here, the
        # rest when the positions themselves pass the limit.
        if estimate > _ESTIMATE_SLACK * MAX_NFA_POSITIONS:
            raise nfa.too_large()
        accept = nfa.add(_ACCEPT, 0, None, -1, -1)
        nfa.root = self.emit(Ref(start), accept)
        while self.pending:
            index, name = self.pending.pop()
            self.owner, self.rule = index, name
            end = nfa.add(_END, 0, None, index, index)
            # A call of the rule to itself right before its end (a right recursion: the
            # members of an any-order object while a required one is missing) jumps back to
            # this head instead: returning from it would only end the calling instance, so
            # no return point is kept, and every round of the recursion reaches the same
            # parse states instead of one more level of calls. The head comes before the
            # body's positions, so no template of the body holds a jump to it; unused, it
            # is left unreachable.
            head = nfa.add(_EPS, 0, [], -1, index)
            self._tail_call, self._tail_call_used = (end, head), False
            entry = self.emit(self.rules[name], end)
            nfa.out[head].append(entry)
            nfa.rule_start[index] = head if self._tail_call_used else entry
        self._tail_call = None
        # Without pieces that match nothing, only an intersection with no common string
        # can leave a position that cannot finish; when every one has a common string
        # (the usual case), all positions are useful and the reverse pass is skipped.
        if nfa.may_dead_end or not all(product.live(product.initial) for product in nfa.intersections):
            nfa.useful = _co_accessible(nfa, nfa.reverse_graph())
        else:
            nfa.useful = [True] * len(nfa.kind)
        # Epsilon targets were lists while the positions were wired; as tuples of ints the
        # garbage collector stops tracking them (tens of thousands in a large grammar).
        nfa.out = [tuple(target) if type(target) is list else target for target in nfa.out]
        if self._searches:
            nfa.search_tails = _SearchTails.of(nfa, self._searches, self._operand)
        return nfa

    def _new(self, kind: int, mask: int = 0, out=None, arg: int = -1) -> int:
        return self.nfa.add(kind, mask, out, arg, self.owner)

    def _nothing(self) -> int:
        self.nfa.may_dead_end = True
        return self._new(_EPS, out=[])

    def emit(self, node: Node, nxt: int) -> int:
        t = type(node)
        if t is Bytes or t is ByteSet or t is CharSet:
            # Terminals are shared by value (a literal or class written again), composite
            # nodes by identity (see _emit_composite). The key holds the node's fields, not
            # the node: their hashes are computed in C (bytes even keep theirs).
            if t is Bytes:
                key = (t, node.value, nxt, self.owner)
            elif t is ByteSet:
                key = (t, node.ranges, nxt, self.owner)
            else:
                key = (t, node.ranges, node.negated, nxt, self.owner)
            entry = self._emitted.get(key)
            if entry is None:
                entry = self._emitted[key] = self._emit_terminal(node, nxt)
            return entry
        if t is Seq or t is Alt or t is Repeat:
            return self._emit_composite(node, nxt)
        if t is Ref:
            return self._emit_ref(node.name, nxt)
        if t is AnyToken:
            self.nfa.has_any = True
            inside = self._new(_ANY_INSIDE, _ALL_BYTES, None, nxt)
            self.nfa.out[inside] = inside
            return self._new(_ANY_START, _ALL_BYTES, inside)
        if t is Except:
            return self._emit_except(node, nxt)
        if t is Intersect:
            return self._emit_intersect(node, nxt)
        # A Complement reaches here only outside an intersection, which grammar checks refuse first.
        raise GrammarError(f"not a grammar node: {node!r}", rule=self.rule)

    def _emit_terminal(self, node: Node, nxt: int) -> int:
        t = type(node)
        if t is Bytes:
            value = node.value
            if not value:
                return nxt
            first = len(self.nfa.kind)
            outs = list(range(first + 1, first + len(value)))
            outs.append(nxt)
            return self.nfa.add_many(_BYTE, [1 << b for b in value], outs, -1, self.owner)
        if t is ByteSet:
            mask = _byteset_mask(node.ranges)
            return self._new(_BYTE, mask, nxt) if mask else self._nothing()
        return self._emit_sequences(utf8_sequences(node.ranges, node.negated), nxt, -1)

    def _emit_composite(self, node: Node, nxt: int) -> int:
        """Emit a Seq, Alt or Repeat; a node emitted ``_TEMPLATE_AFTER`` times leaves a
        template of its positions, which later emissions copy instead of walking its
        subtree again."""
        key = (id(node), nxt, self.owner)
        shared = self._emitted.get(key)
        if shared is not None:
            return shared[1]
        met = self._subtrees.get(id(node))
        if met is not None and met[2]:
            entry = self._instantiate(met[2], nxt)
            self._emitted[key] = (node, entry)
            return entry
        nfa = self.nfa
        first, dead_end_before = len(nfa.kind), nfa.may_dead_end
        t = type(node)
        if t is Seq:
            items = node.items
            lead, tail, unit = _search_span(items)
            entry = nxt
            for index in range(len(items) - 1, -1, -1):
                if index == tail:
                    begin, after = len(nfa.kind), entry
                entry = self.emit(items[index], entry)
                if index == tail:
                    hub = entry
                elif index == lead and hub >= begin:
                    self._searches.append((begin, len(nfa.kind), hub, after, unit))
        elif t is Alt:
            entry = self._new(_EPS, out=[self.emit(item, nxt) for item in node.items]) if node.items else self._nothing()
        else:
            entry = self._emit_repeat(node, nxt)
        if met is None:
            self._subtrees[id(node)] = (node, 1, None)
        elif met[2] is None:
            # Most shared nodes are met twice, where a template would not pay for itself;
            # small runs emit as fast as they copy. False: not copyable, emit every time.
            template = None
            if met[1] + 1 >= _TEMPLATE_AFTER and len(nfa.kind) - first >= _MIN_TEMPLATE_POSITIONS:
                template = self._template(first, entry, nxt, dead_end_before) or False
            self._subtrees[id(node)] = (node, met[1] + 1, template)
        self._emitted[key] = (node, entry)
        return entry

    def _emit_repeat(self, node: Repeat, nxt: int) -> int:
        lo, hi = node.min, node.max
        if lo < 0 or (hi is not None and hi < lo):
            raise GrammarError(f"bad repetition bounds {{{lo},{hi}}}", rule=self.rule)
        if self.counts(node):
            nfa = self.nfa
            counter = len(nfa.counters)
            nfa.counters.append((lo, hi))
            hub = self._new(_COUNT_HUB, arg=counter)
            body = self.emit(node.item, hub)
            nfa.out[hub] = (body, nxt)
            return self._new(_COUNT_ENTER, out=(body, nxt), arg=counter)
        if self.counts_required(node):
            loop = self._emit_repeat(Repeat(node.item, 0, None), nxt)
            return self._emit_repeat(Repeat(node.item, lo, lo), loop)
        if hi is None:
            hub = self._new(_EPS, out=[])
            body = self.emit(node.item, hub)
            self.nfa.out[hub].extend((body, nxt))
            entry = hub if lo == 0 else body
            lo = max(lo - 1, 0)
        else:
            entry = nxt
            for _ in range(hi - lo):
                entry = self._new(_EPS, out=[self.emit(node.item, entry), nxt])
        for _ in range(lo):
            entry = self.emit(node.item, entry)
        return entry

    def _emit_ref(self, name: str, nxt: int) -> int:
        if name not in self.rules:
            raise GrammarError(f"undefined rule {name!r}", rule=self.rule)
        if name in self.called:
            index = self.rule_index.get(name)
            if index is None:
                index = self.rule_index[name] = len(self.nfa.rule_names)
                self.nfa.rule_names.append(name)
                self.nfa.rule_start.append(-1)
                self.pending.append((index, name))
                self.nfa.has_calls = True
            tail_call = self._tail_call
            if tail_call is not None and index == self.owner and tail_call[0] == nxt:
                self._tail_call_used = True
                return tail_call[1]
            key = (name, nxt, self.owner)
            call = self._emitted.get(key)
            if call is None:
                call = self._emitted[key] = self._new(_CALL, 0, nxt, index)
            return call
        if name in self.cycles:
            return self._emit_cycle(name, nxt)
        shared = self._emitted.get((id(self.rules[name]), nxt, self.owner))
        if shared is not None:
            return shared[1]
        template = self._templates.get(name)
        if template is not None:
            return self._instantiate(template, nxt)
        nfa = self.nfa
        first, dead_end_before = len(nfa.kind), nfa.may_dead_end
        outer = self.rule
        self.rule = name
        try:
            entry = self.emit(self.rules[name], nxt)
        finally:
            self.rule = outer
        if self.ref_counts.get(name, 0) > 1 and name not in self._templates:
            self._templates[name] = self._template(first, entry, nxt, dead_end_before)
        return entry

    def _emit_cycle(self, name: str, nxt: int) -> int:
        """The entry of rule ``name`` of a regular cycle going on to ``nxt``: every rule of
        the cycle is emitted once for this continuation, each behind a head of its own,
        and a reference between them (always the last thing a rule matches) jumps to the
        head of the rule it names."""
        key = (name, nxt, self.owner)
        entry = self._cycle_entries.get(key)
        if entry is not None:
            return entry
        members = sorted(self.cycles[name])
        heads = {member: self._new(_EPS, out=[]) for member in members}
        for member, head in heads.items():
            self._cycle_entries[(member, nxt, self.owner)] = head
        outer = self.rule
        try:
            for member, head in heads.items():
                self.rule = member
                self.nfa.out[head].append(self.emit(self.rules[member], nxt))
        finally:
            self.rule = outer
        return heads[name]

    def _template(self, first: int, entry: int, nxt: int, dead_end_before: bool):
        """The positions just emitted for an inlined rule, relative to ``first`` (-1: ``nxt``),
        so that further references copy them instead of emitting the rule again; None when
        they hold positions whose fields point elsewhere (any!, intersections)."""
        nfa = self.nfa
        last = len(nfa.kind)
        kinds = nfa.kind[first:last]
        if any(kind not in _COPYABLE_KINDS for kind in kinds):
            return None

        def relative(target: int) -> int:
            if target == nxt:
                return -1
            if not first <= target < last:
                raise LookupError
            return target - first

        try:
            outs = [
                relative(out) if type(out) is int else tuple(relative(target) for target in out)
                for out in nfa.out[first:last]
            ]
            start = relative(entry)  # -1 where the rule matches only the empty string
        except LookupError:
            return None
        dead_end = nfa.may_dead_end and not dead_end_before
        # Single successors relocate in one pass; epsilon lists and counter pairs after it.
        single = tuple(out if type(out) is int else 0 for out in outs)
        several = tuple((index, kinds[index], out) for index, out in enumerate(outs) if type(out) is not int)
        try:
            searches = tuple(
                (begin - first, end - first, hub - first, relative(after), unit)
                for begin, end, hub, after, unit in self._searches
                if first <= begin
            )
        except LookupError:
            return None
        return (
            tuple(kinds), tuple(nfa.mask[first:last]), tuple(nfa.arg[first:last]), single, several, start, dead_end,
            searches,
        )

    def _instantiate(self, template, nxt: int) -> int:
        kinds, masks, args, single, several, entry, dead_end, searches = template
        nfa = self.nfa
        base = len(nfa.kind)
        relocated = [nxt if out < 0 else base + out for out in single]
        for index, kind, targets in several:
            moved = [nxt if target < 0 else base + target for target in targets]
            # Epsilon targets stay a list, as wiring leaves them until the build ends.
            relocated[index] = moved if kind == _EPS else tuple(moved)
        nfa.kind.extend(kinds)
        nfa.mask.extend(masks)
        nfa.out.extend(relocated)
        nfa.arg.extend(args)
        nfa.owner.extend([self.owner] * len(kinds))
        if len(nfa.kind) > MAX_NFA_POSITIONS:
            raise nfa.too_large()
        if dead_end:
            nfa.may_dead_end = True
        for begin, end, hub, after, unit in searches:
            self._searches.append((base + begin, base + end, base + hub, nxt if after < 0 else base + after, unit))
        return nxt if entry < 0 else base + entry

    def _emit_sequences(self, sequences, nxt: int, tag: int) -> int:
        if not sequences:
            return self._nothing()
        masks, successors, heads = _sequence_template(sequences)
        first = len(self.nfa.kind)
        outs = [nxt if successor < 0 else first + successor for successor in successors]
        self.nfa.add_many(_BYTE, masks, outs, tag, self.owner)
        if len(heads) == 1:
            return first + heads[0]
        return self._new(_EPS, out=[first + head for head in heads])

    def _emit_except(self, node: Except, nxt: int) -> int:
        strings = tuple(bytes(s) for s in node.strings)
        if not strings or any(not s for s in strings):
            raise GrammarError("except! needs at least one non-empty string", rule=self.rule)
        if node.max_tokens is not None and node.max_tokens < 0:
            raise GrammarError("except! token limit must be non-negative", rule=self.rule)
        nfa = self.nfa
        eid = len(nfa.except_strings)
        nfa.except_strings.append(strings)
        nfa.except_limit.append(node.max_tokens)
        hub = self._new(_EPS, out=[])
        leave = self._new(_EX_EXIT, 0, nxt, eid)
        char = self._emit_sequences(utf8_sequences((), True), hub, eid)
        nfa.out[hub].extend((char, leave))
        return self._new(_EX_ENTER, 0, hub, eid)

    def _emit_intersect(self, node: Intersect, nxt: int) -> int:
        if not node.items:
            raise GrammarError("intersection of nothing", rule=self.rule)
        operands = []
        for item in node.items:
            try:
                operands.append(self._operand(item))
            except EmptyLanguageError:
                if type(item) is not Complement:
                    # An operand that matches nothing leaves the intersection nothing to match.
                    return self._nothing()
                # The complement of nothing is every string: it constrains nothing.
        if not operands:
            raise GrammarError("intersection of nothing but complements of nothing", rule=self.rule)
        parts = tuple(operands)
        index = self._products.get(parts)
        if index is None:
            index = self._products[parts] = len(self.nfa.intersections)
            self.nfa.intersections.append(_Product(parts))
        inside = self._new(_ISECT, _ALL_BYTES, index, nxt)
        return self._new(_ISECT_ENTER, 0, inside, index)

    def _operand(self, item: Node) -> "ByteAutomaton | _ComplementAutomaton":
        # An operand is its expression and the rules it reaches: the same in another
        # grammar (or another intersection of this one) is the same language, built once.
        used = _references_list(item)
        reached = _rules_reached(self.rules, self._references, used)
        key = (item, frozenset(reached.items())) if reached else item
        found = _operand_cache.get(key)
        if found is not None:
            return found
        if type(item) is Complement:
            found = _ComplementAutomaton(self._operand(item.item))
        else:
            references = {name: self._references[name] for name in reached}
            reached["\0operand"], references["\0operand"] = item, used
            sub = _NfaBuilder(reached, "\0operand", references, call_large_rules=False).build("\0operand")
            if sub.has_calls or sub.has_any or sub.except_strings:
                raise GrammarError(
                    "intersected expressions must be regular (no recursion, any! or except!)", rule=self.rule
                )
            found = ByteAutomaton(sub, text_mode=True)
        _keep_shared(_operand_cache, key, found)
        return found


#: Compiled intersection operands shared between grammars (insertion-ordered, oldest evicted),
#: by expression (and the rules it reaches, where it reaches some).
OPERAND_CACHE_SIZE = 256
_operand_cache: dict = {}
#: Most intersection states whose moves are kept (each holds a 256-entry array).
PRODUCT_MOVES_KEPT = 4096
#: The most operands whose moves ``native.product_moves`` finds (past it, numpy does).
NATIVE_PRODUCT_OPERANDS = 64
# A key of operand configurations below this takes one more operand within 64 bits.
_PRODUCT_KEY_LIMIT = (2**63 - 1) // (MAX_CONFIGS + 1) - 1


def _keep_shared(cache: dict, key, value) -> None:
    """Keep ``value`` in a cache shared between grammars, evicting the oldest past
    ``OPERAND_CACHE_SIZE`` (another thread may have evicted one first)."""
    cache[key] = value
    while len(cache) > OPERAND_CACHE_SIZE:
        cache.pop(next(iter(cache), None), None)


class _ComplementAutomaton:
    """An intersection operand accepting the byte strings ``base`` rejects: ``base``'s
    states with acceptance flipped, and one more state (``SINK``, accepting, looping on
    every byte) where ``base`` dies. It reads every byte: the intersection's other
    operands decide which strings there are."""

    #: Above every configuration number, within the product's key encoding (see ``_Product._moves``).
    SINK = MAX_CONFIGS

    def __init__(self, base: "ByteAutomaton") -> None:
        self.base = base
        self.initial = self.SINK if base.initial == DEAD else base.initial
        self._sink_row = np.full(256, self.SINK, dtype=np.int32)

    def is_accepting(self, state: int) -> bool:
        return state == self.SINK or not self.base.is_accepting(state)

    def row(self, state: int) -> np.ndarray:
        if state == self.SINK:
            return self._sink_row
        row = self.base.row(state)
        return np.where(row < 0, self.SINK, row).astype(np.int32, copy=False)

    def min_bytes_to_accept(self, state: int) -> int:
        # A lower bound: a string it accepts may need more than one byte.
        return 0 if self.is_accepting(state) else 1

    def consumed_masks(self) -> frozenset[int]:
        return self.base.consumed_masks()

    def utf8_agrees(self, state: int, ascii_byte: int) -> bool:
        # Where ``base`` dies, the sink reads every character alike.
        return state == self.SINK or self.base.utf8_agrees(state, ascii_byte)


def _completes(part, state: int, data: bytes) -> bool:
    """Whether ``data`` takes an intersection operand from ``state`` to acceptance."""
    step = getattr(part, "step", None)
    for value in data:
        state = step(state, value) if step is not None else int(part.row(state)[value])
        if state < 0:
            return False
    return bool(part.is_accepting(state))


def _numpy_moves(rows: list[np.ndarray]) -> tuple[np.ndarray, list[tuple]]:
    """``_Product._moves`` of the operands' ``rows`` with numpy: each byte's index among the
    distinct successors (-1 where an operand dies), and those successors in increasing order."""
    stacked = np.stack(rows)
    alive = np.all(stacked >= 0, axis=0)
    index = np.full(256, -1, dtype=np.int16)
    columns = stacked[:, alive]
    successors = []
    if columns.shape[1]:
        key = columns[0].astype(np.int64)
        for row in columns[1:]:
            if int(key.max()) > _PRODUCT_KEY_LIMIT:
                _, key = np.unique(key, return_inverse=True)  # renumbered to stay in 64 bits
            key = key * (MAX_CONFIGS + 1) + row
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        index[alive] = inverse
        successors = [tuple(column) for column in columns[:, first].T.tolist()]
    return index, successors


class _Product:
    """Regular automata run in lockstep; remembers which state tuples can still finish together."""

    def __init__(self, parts: tuple["ByteAutomaton", ...]) -> None:
        self.parts = parts
        self.initial = tuple(part.initial for part in parts)
        self._live: dict[tuple, bool] = {}
        self._masks: frozenset[int] | None = None
        self._move_memo: dict[tuple, tuple[np.ndarray, list[tuple]]] = {}
        self._shortest: dict[tuple[tuple, int], bytes | None] = {}

    def accepting(self, states: tuple) -> bool:
        return all(part.is_accepting(s) for part, s in zip(self.parts, states))

    def step(self, states: tuple, byte: int):
        index, successors = self._moves(states)
        found = index.item(byte)
        if found < 0:
            return None
        result = successors[found]
        return result if self.live(result) else None

    def step_each(self, states: tuple, values: list[int]) -> list[tuple | None]:
        """``step`` by each byte of ``values``."""
        index, successors = self._moves(states)
        live = [successor if self.live(successor) else None for successor in successors]
        return [live[found] if found >= 0 else None for found in index[values].tolist()]

    def _moves(self, states: tuple) -> tuple[np.ndarray, list[tuple]]:
        """(each byte's index among the successors, -1 where an operand dies; the distinct
        successors): made once per state, since rows computed by byte class step every
        class and the liveness search expands every successor."""
        found = self._move_memo.get(states)
        if found is None:
            if len(self._move_memo) >= PRODUCT_MOVES_KEPT:
                self._move_memo.clear()
            rows = [part.row(s) for part, s in zip(self.parts, states)]
            if native.product_moves is not None and len(rows) <= NATIVE_PRODUCT_OPERANDS:
                index = np.empty(256, dtype=np.int16)
                successors = native.product_moves(rows, index)
            else:
                index, successors = _numpy_moves(rows)
            found = self._move_memo[states] = (index, successors)
        return found

    def _successors(self, states: tuple) -> list[tuple]:
        return self._moves(states)[1]

    def live(self, states: tuple) -> bool:
        """Whether some byte string takes every operand from ``states`` to acceptance."""
        known = self._live.get(states)
        if known is not None:
            return known
        if self.accepting(states) or self._completed_by_a_witness(states):
            self._live[states] = True
            return True
        seen = {states}
        frontier = [states]
        while frontier:
            following = []
            for current in frontier:
                if self._live.get(current) or self.accepting(current):
                    self._live[states] = True
                    return True
                for nxt in self._successors(current):
                    if nxt not in seen and self._live.get(nxt) is not False:
                        seen.add(nxt)
                        following.append(nxt)
            if len(seen) > MAX_PRODUCT_STATES:
                raise GrammarError(f"intersection too large (more than {MAX_PRODUCT_STATES} states to explore)")
            frontier = following
        for dead in seen:  # everything reachable was explored: none of it can finish
            self._live[dead] = False
        return False

    def _completed_by_a_witness(self, states: tuple) -> bool:
        """Whether a completion of one operand (one it finds without a search of the
        product) takes every other operand to acceptance too: proof enough that ``states``
        is live, found by stepping along one string instead of expanding the product
        breadth first (inside a length-limited string under a ``pattern``, most states are
        live this way)."""
        for part, state in zip(self.parts, states):
            complete = getattr(part, "completion", None)
            if complete is None or state < 0:
                continue
            # A completion costs a search step a byte: past a few hundred bytes (a long
            # minLength) the breadth-first search of the product is the cheaper proof.
            bound = getattr(part, "completion_bound", None)
            if bound is not None and bound(state) > WITNESS_MAX_BYTES:
                continue
            try:
                witness = complete(state)
            except (ValueError, GrammarError):
                continue
            # Checked on every operand, its own too: the search may assume token boundaries.
            if all(_completes(other, other_state, witness) for other, other_state in zip(self.parts, states)):
                return True
        return False

    def min_bytes(self, states: tuple) -> int:
        return max(part.min_bytes_to_accept(s) for part, s in zip(self.parts, states))

    def shortest_bytes(self, states: tuple, spellable: int = ALL_BYTES_MASK) -> float:
        """Bytes of ``shortest_string``, inf when there is none."""
        found = self.shortest_string(states, spellable)
        return float("inf") if found is None else len(found)

    def shortest_string(self, states: tuple, spellable: int = ALL_BYTES_MASK) -> bytes | None:
        """A shortest string of the bytes in ``spellable`` (a 256-bit set) that takes every
        operand from ``states`` to acceptance at once (breadth first), None when there is
        none or the search passes ``MAX_PRODUCT_STATES``."""
        key = (states, spellable)
        if key in self._shortest:
            return self._shortest[key]
        found = None
        values = _bytes_of(spellable, _SPELLABLE_SETS)
        reached_by: dict[tuple, tuple | None] = {states: None}
        frontier = [states]
        while frontier and len(reached_by) <= MAX_PRODUCT_STATES:
            done = next((current for current in frontier if self.accepting(current)), None)
            if done is not None:
                path = bytearray()
                while reached_by[done] is not None:
                    done, value = reached_by[done]
                    path.append(value)
                found = bytes(reversed(path))
                break
            following = []
            for current in frontier:
                index, successors = self._moves(current)
                reached = index[values]
                # Each distinct successor once, by the first of its bytes.
                order = np.argsort(reached, kind="stable")
                ordered = reached[order]
                firsts = order[np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])]
                for value, found_index in zip(values[firsts].tolist(), reached[firsts].tolist()):
                    nxt = successors[found_index] if found_index >= 0 else None
                    if nxt is not None and nxt not in reached_by:
                        reached_by[nxt] = (current, value)
                        following.append(nxt)
            frontier = following
        self._shortest[key] = found
        return found

    def masks(self) -> frozenset[int]:
        if self._masks is None:
            self._masks = frozenset().union(*(part.consumed_masks() for part in self.parts))
        return self._masks


def _search_span(items: tuple) -> tuple[int, int, Node | None]:
    """(i, j, X) where ``items[i:j + 1]`` is a search, ``X* body X*`` (a JSON Schema
    ``pattern`` unanchored at both ends), the first and last such stars of the sequence;
    (-1, -1, None) when there is none."""
    stars = [
        index for index, item in enumerate(items)
        if type(item) is Repeat and item.min == 0 and item.max is None
    ]
    for lead in stars:
        for tail in reversed(stars):
            if tail - lead >= 2 and items[tail].item == items[lead].item:
                return lead, tail, items[lead].item
    return -1, -1, None


class _SearchTails:
    """Which items a search's tail makes redundant.

    In ``X* body X*`` the parse that has found ``body`` sits in the tail ``X*``, where any
    text of units may follow; the parses still looking for ``body`` (in the lead, or part
    way into ``body``) can only finish with such a text too. Kept, they make every
    configuration after a match differ from the next (a string under ``"pattern":
    "response"`` never returns to a plain string's configuration, so no token group holds
    and every mask walks the whole vocabulary). So when a configuration holds, with the same
    origin, watch and token state, an item at every position where the tail starts a unit
    (``starts``: together they go on with exactly ``X+`` and then what follows the
    search), its items at the search's positions whose own way to the search's end reads
    only ``X+`` (``droppable``, found by running that way against ``X+``'s automaton) say
    nothing more, and are dropped. What the configuration accepts does not change.

    Searches of one unit that go on at the same position (a pattern's top-level
    alternatives, ``foo|bar``) form a group: a match of any of them drops the droppable
    items of them all, the other alternatives' parses included."""

    def __init__(
        self, starts: dict[int, int], droppable: dict[int, int], counts: list[int], groups: list[int]
    ) -> None:
        #: Position -> the search whose tail starts a unit there.
        self.starts = starts
        #: Position -> the group of the search whose droppable position it is.
        self.droppable = droppable
        #: Per search: how many starts its tail has, and its group.
        self.counts = counts
        self.groups = groups

    @classmethod
    def of(cls, nfa: "_Nfa", searches, operand) -> "_SearchTails | None":
        starts: dict[int, int] = {}
        droppable: dict[int, int] = {}
        counts: list[int] = []
        groups: list[int] = []
        group_of: dict[tuple[int, Node], int] = {}
        for begin, end, hub, after, unit in searches:
            if _references_list(unit):
                # A unit naming rules may name the search's own (a recursive grammar): its
                # automaton would hold the search again, and analysing it would not end.
                continue
            # The same search emitted again (a pattern met at several places, in this
            # grammar or the next) has the same positions relative to its first.
            key = (unit, _relative_positions(nfa, begin, end, after), hub - begin)
            found = _search_cache.get(key, False)
            if found is False:
                try:
                    found = _search_positions(nfa, begin, end, hub, after, operand(seq(unit, star(unit))))
                except GrammarError:
                    found = None
                if found is not None:
                    found = tuple(tuple(p - begin for p in positions) for positions in found)
                _keep_shared(_search_cache, key, found)
            if found is None:
                continue
            tail_starts, dropped = (tuple(begin + p for p in positions) for positions in found)
            group = group_of.setdefault((after, unit), len(group_of))
            starts.update(dict.fromkeys(tail_starts, len(counts)))
            droppable.update(dict.fromkeys(dropped, group))
            counts.append(len(tail_starts))
            groups.append(group)
        return cls(starts, droppable, counts, groups) if counts else None

    def without_subsumed(self, items: frozenset) -> frozenset:
        """``items`` less those made redundant (``native.states.close`` does the same in C)."""
        starts = self.starts
        met: dict[tuple, int] = {}
        for item in items:
            number = starts.get(item[0])
            if number is not None:
                key = (number, item[1], item[2], item[3])
                met[key] = met.get(key, 0) + 1
        complete = {(self.groups[key[0]], *key[1:]) for key, count in met.items() if count == self.counts[key[0]]}
        if not complete:
            return items
        droppable = self.droppable
        return frozenset(
            item for item in items
            if (number := droppable.get(item[0])) is None or (number, item[1], item[2], item[3]) not in complete
        )


#: The most positions a search may have for its tail to be analysed (the analysis runs over
#: every position and state of ``X+``'s automaton; past this, the search is left as it is).
SEARCH_MAX_POSITIONS = 4096
#: Positions a search's way passes as it would an epsilon: a counted repetition's entry
#: and hub lead to its body or past it (every count allowed: more ways, never fewer).
_SEARCH_PASSES = (_EPS, _COUNT_ENTER, _COUNT_HUB)
#: Searches analysed (``_SearchTails``), by unit and positions relative to the first, oldest evicted.
_search_cache: dict = {}


def _relative_positions(nfa: "_Nfa", begin: int, end: int, after: int) -> tuple:
    """The kinds, byte sets, usefulness and successors of positions ``begin`` to ``end``,
    successors relative to ``begin`` (``after``: -1, elsewhere outside: None)."""

    def relative(target: int):
        return -1 if target == after else (target - begin if begin <= target < end else None)

    outs = [
        relative(out) if type(out) is int else tuple(relative(target) for target in out) if out is not None else None
        for out in nfa.out[begin:end]
    ]
    return tuple(nfa.kind[begin:end]), tuple(nfa.mask[begin:end]), tuple(nfa.useful[begin:end]), tuple(outs)


def _search_positions(nfa: "_Nfa", begin: int, end: int, hub: int, after: int, plus) -> tuple | None:
    """(the tail's starts, the droppable positions) of the search emitted at positions
    ``begin`` to ``end`` (see ``_SearchTails``), its tail's hub ``hub``, continuing at
    ``after``; ``plus`` the automaton of ``X+``. None when its positions are not plain
    bytes and epsilons that stay inside it."""
    if end - begin > SEARCH_MAX_POSITIONS:
        return None
    kind, out, mask, useful = nfa.kind, nfa.out, nfa.mask, nfa.useful
    for p in range(begin, end):
        if kind[p] == _BYTE:
            targets = (out[p],)
        elif kind[p] in _SEARCH_PASSES:
            targets = out[p]
        else:
            return None
        if any(not (begin <= target < end or target == after) for target in targets):
            return None
    starts, seen, stack = [], {hub}, [hub]
    while stack:
        p = stack.pop()
        if kind[p] == _EPS:
            for target in out[p]:
                if target != after and target not in seen:
                    seen.add(target)
                    stack.append(target)
        elif kind[p] != _BYTE:
            return None  # a unit that starts by counting: no item there to look for
        elif useful[p]:
            starts.append(p)
    if not starts:
        return None
    # Pairs (position, state of X+'s automaton after the bytes read from where the way
    # began): a pair is bad when some way on from it leaves X+ (its automaton dies) or
    # reaches the search's end outside acceptance.
    byte_sets: dict[int, np.ndarray] = {}
    moves: dict[tuple[int, int], tuple[int, ...]] = {}
    followers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    bad: list[tuple[int, int]] = []
    plain = [p for p in range(begin, end) if kind[p] == _BYTE and useful[p] and p not in seen]
    stack = [(p, plus.initial) for p in plain]
    reached = set(stack)
    while stack:
        pair = stack.pop()
        p, state = pair
        if state < 0 or (p == after and not plus.is_accepting(state)):
            bad.append(pair)
            continue
        if p == after:
            continue
        if kind[p] != _BYTE:
            following = [(target, state) for target in out[p]]
        else:
            key = (mask[p], state)
            states = moves.get(key)
            if states is None:
                row = plus.row(state)
                states = moves[key] = tuple(set(row[_bytes_of(mask[p], byte_sets)].tolist()))
            following = [(out[p], nxt) for nxt in states]
        for nxt in following:
            followers.setdefault(nxt, []).append(pair)
            if nxt not in reached:
                reached.add(nxt)
                stack.append(nxt)
    spoiled = set(bad)
    while bad:
        for earlier in followers.get(bad.pop(), ()):
            if earlier not in spoiled:
                spoiled.add(earlier)
                bad.append(earlier)
    droppable = [p for p in plain if (p, plus.initial) not in spoiled]
    return (tuple(starts), tuple(droppable)) if droppable else None


class _ReverseGraph:
    """Edges of an NFA pointing backwards, with the bytes each edge consumes.

    By default every path of the NFA is an edge path (counter bounds, exclusions and
    intersections ignored), so distances are lower bounds. With ``iterations``
    (``_counted_bodies``) only *realizable* edges are kept: plain bytes, epsilons, calls,
    a counted repetition entered for its minimum number of iterations and left from its
    hub, an intersection crossed along its shortest common string, each byte one of
    ``spellable``; positions whose every way out crosses ``any!`` or ``except!`` get no
    path at all.
    """

    def __init__(
        self, nfa: _Nfa, iterations: list[bytes | None] | None = None, spellable: int = 0
    ) -> None:
        kind, out, arg = nfa.kind, nfa.out, nfa.arg
        n = len(kind)
        self.predecessors: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.calls_returning_to: list[list[int]] = [[] for _ in range(n)]
        self.calls_of_rule: list[list[int]] = [[] for _ in nfa.rule_start]
        self.rule_starting_at = {start: index for index, start in enumerate(nfa.rule_start)}
        self.ends = [p for p in range(n) if kind[p] == _END or kind[p] == _ACCEPT]
        predecessors = self.predecessors
        if iterations is not None:
            self._add_realizable_edges(nfa, iterations, spellable)
            return
        for p in range(n):
            k = kind[p]
            if k == _EPS or k == _COUNT_ENTER or k == _COUNT_HUB:
                # Counter positions are taken as plain epsilons: their bounds only ever
                # remove paths, so costs stay lower bounds and usefulness an over-approximation.
                for q in out[p]:
                    predecessors[q].append((p, 0))
            elif k == _BYTE or k == _ANY_START:
                predecessors[out[p]].append((p, 1))
            elif k == _EX_ENTER or k == _EX_EXIT or k == _ISECT_ENTER:
                predecessors[out[p]].append((p, 0))
            elif k == _ANY_INSIDE or k == _ISECT:
                predecessors[arg[p]].append((p, 0))
            elif k == _CALL:
                self.calls_returning_to[out[p]].append(p)
                self.calls_of_rule[arg[p]].append(p)

    def _add_realizable_edges(self, nfa: _Nfa, iterations: list[bytes | None], spellable: int) -> None:
        kind, out, arg, mask = nfa.kind, nfa.out, nfa.arg, nfa.mask
        predecessors = self.predecessors
        # Byte sets repeat across positions (a schema's classes): each is tested once.
        spells: dict[int, bool] = {}
        for p, k in enumerate(kind):
            if k == _BYTE:
                byte_set = mask[p]
                found = spells.get(byte_set)
                if found is None:
                    found = spells[byte_set] = bool(byte_set & spellable)
                if found:
                    predecessors[out[p]].append((p, 1))
            elif k == _EPS:
                for q in out[p]:
                    predecessors[q].append((p, 0))
            elif k == _COUNT_ENTER:
                # Entering reads the minimum number of iterations before it may leave.
                low, iteration = nfa.counters[arg[p]][0], iterations[arg[p]]
                if low == 0 or iteration is not None:
                    predecessors[out[p][1]].append((p, low * len(iteration) if low else 0))
            elif k == _COUNT_HUB:
                # Leaving is allowed once the minimum is done; items in the body add
                # the iterations they still owe (``ByteAutomaton._bound_item``).
                predecessors[out[p][1]].append((p, 0))
            elif k == _ISECT_ENTER:
                predecessors[out[p]].append((p, 0))
            elif k == _ISECT:
                product = nfa.intersections[out[p]]
                shortest = product.shortest_bytes(product.initial, spellable)
                if shortest < float("inf"):
                    predecessors[arg[p]].append((p, shortest))
            elif k == _CALL:
                self.calls_returning_to[out[p]].append(p)
                self.calls_of_rule[arg[p]].append(p)


def _counted_bodies(nfa: _Nfa, spellable: int) -> tuple[dict[int, int], list[bytes | None]]:
    """(body position -> its counted repetition, the bytes of one iteration along each
    repetition's shortest body path of ``spellable`` bytes; None where a body holds
    anything but bytes and epsilons)."""
    kind, out, mask = nfa.kind, nfa.out, nfa.mask
    body_of: dict[int, int] = {}
    iterations: list[bytes | None] = [None] * len(nfa.counters)
    for p in range(len(kind)):
        if kind[p] != _COUNT_ENTER:
            continue
        counter = nfa.arg[p]
        entry = out[p][0]
        # 0-1 breadth-first search from the body's entry to its hub.
        distance = {entry: 0}
        reached_by: dict[int, tuple[int, int]] = {}
        queue = [(0, entry)]
        hub, plain = None, True
        while queue:
            d, q = heapq.heappop(queue)
            if d > distance.get(q, d):
                continue
            k = kind[q]
            if k == _COUNT_HUB:
                if nfa.arg[q] == counter:
                    hub = q
                    continue
                plain = False
                continue
            body_of[q] = counter
            if k == _BYTE:
                moves = ((out[q], d + 1, _lowest_byte(mask[q] & spellable)),) if mask[q] & spellable else ()
            elif k == _EPS:
                moves = tuple((target, d, -1) for target in out[q])
            else:
                plain = False
                continue
            for target, nd, value in moves:
                if nd < distance.get(target, float("inf")):
                    distance[target] = nd
                    reached_by[target] = (q, value)
                    heapq.heappush(queue, (nd, target))
        if plain and hub is not None:
            path = bytearray()
            current = hub
            while current != entry:
                current, value = reached_by[current]
                if value >= 0:
                    path.append(value)
            iterations[counter] = bytes(reversed(path))
    return body_of, iterations


def _lowest_byte(byte_set: int) -> int:
    return (byte_set & -byte_set).bit_length() - 1


def _order_key(value) -> tuple:
    """A key ordering item fields the same way in every process (set iteration order, and
    with it the order of an item set's items, follows object addresses: ``hash(None)``)."""
    if value is None:
        return (0,)
    if isinstance(value, bool):
        return (6, value)
    if isinstance(value, int):
        return (1, int(value))
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, tuple):
        return (3, tuple(map(_order_key, value)))
    if isinstance(value, frozenset):
        return (4, tuple(sorted(map(_order_key, value))))
    return (5, repr(value))


def _in_order(values):
    """``values`` (callers keys or entries) sorted by ``_order_key``: searches that keep the
    first of equally good candidates then choose alike in every process."""
    return sorted(values, key=_order_key)


class _RealizableDistances:
    """What ``ByteAutomaton.completion_bound`` reads for one set of spellable bytes:
    realizable distances to rule ends, counted repetitions, and memos."""

    def __init__(self, nfa: _Nfa, spellable: int) -> None:
        self.spellable = spellable
        # The position each one's shortest path goes on to: the static paths themselves.
        self.via: list[int] = [-1] * len(nfa.kind)
        with collector_paused():
            self.body_of, self.iterations = _counted_bodies(nfa, spellable)
            self.dist = _distances_to_ends(nfa, _ReverseGraph(nfa, self.iterations, spellable), self.via)
        self.continuation: dict = {}
        # Configuration -> {(rule, watch): (return position, what follows it)}: the caller
        # each continuation's cost came from (``ByteAutomaton._continuation_table``).
        self.continuation_from: dict = {}
        self.bounds: dict[int, float] = {}
        self.rule_paths: dict[int, bytes | None] = {}
        self._native_tables = None

    def native_tables(self, nfa: _Nfa):
        """These distances as ``native.states.bound_tables`` (made on first use)."""
        if self._native_tables is None:
            self._native_tables = native.states.bound_tables(self.dist, self.body_of, self.iterations, nfa.owner)
        return self._native_tables


def _distances_to_ends(nfa: _Nfa, graph: _ReverseGraph, via: list[int] | None = None) -> list[float]:
    """Bytes from each NFA position to the end of its rule along ``graph``'s edges.

    One Dijkstra pass backwards from rule ends; a call edge costs the callee's own
    minimum, which is final once the callee's start position is settled (Knuth's
    generalisation of Dijkstra to grammars), so no outer fixpoint is needed. ``via``, when
    given, receives the position each position's shortest path goes on to.
    """
    inf = float("inf")
    dist = [inf] * len(nfa.kind)
    settled = [False] * len(nfa.kind)
    rule_min = [inf] * len(nfa.rule_start)
    heap = [(0, p) for p in graph.ends]
    for p in graph.ends:
        dist[p] = 0
    arg, out = nfa.arg, nfa.out
    while heap:
        d, q = heapq.heappop(heap)
        if settled[q]:
            continue
        settled[q] = True
        candidates = [(p, d + cost) for p, cost in graph.predecessors[q]]
        for call in graph.calls_returning_to[q]:
            candidates.append((call, rule_min[arg[call]] + d))
        rule = graph.rule_starting_at.get(q)
        if rule is not None and rule_min[rule] == inf:
            rule_min[rule] = d
            candidates.extend((call, d + dist[out[call]]) for call in graph.calls_of_rule[rule] if settled[out[call]])
        for p, nd in candidates:
            if nd < dist[p]:
                dist[p] = nd
                if via is not None:
                    via[p] = q
                heapq.heappush(heap, (nd, p))
    return dist


def _co_accessible(nfa: _Nfa, graph: _ReverseGraph) -> list[bool]:
    """Positions from which the end of their rule can be reached.

    Pieces that match nothing (an empty class after a multi-byte character, an empty
    intersection) leave positions that lead nowhere; dropping them keeps every live
    configuration finishable.
    """
    kind, out, arg = nfa.kind, nfa.out, nfa.arg
    useful = [False] * len(kind)
    rule_done = [False] * len(nfa.rule_start)
    work = list(graph.ends)
    for p in work:
        useful[p] = True
    while work:
        q = work.pop()
        candidates = [p for p, _cost in graph.predecessors[q]]
        candidates.extend(c for c in graph.calls_returning_to[q] if rule_done[arg[c]])
        rule = graph.rule_starting_at.get(q)
        if rule is not None and not rule_done[rule]:
            rule_done[rule] = True
            candidates.extend(c for c in graph.calls_of_rule[rule] if useful[out[c]])
        for p in candidates:
            if useful[p]:
                continue
            if kind[p] == _ISECT:
                product = nfa.intersections[out[p]]
                if not product.live(product.initial):
                    continue
            useful[p] = True
            work.append(p)
    return useful


def _references_list(node: Node, memo: dict[int, tuple] | None = None) -> list[str]:
    """The rule names ``node`` refers to, once per place (a subtree used at several places
    counts at each), last items first. Each distinct node is read once: its references
    are kept in ``memo`` by id (the caller keeps the nodes alive), so a body made of
    shared subtrees (a schema's rules, whose trees are tens of times their distinct
    nodes) costs its distinct nodes, not its tree."""
    if memo is None:
        memo = {}
    stack = [(node, False)]
    while stack:
        item, children_done = stack.pop()
        key = id(item)
        if key in memo:
            continue
        t = type(item)
        if t is Ref:
            memo[key] = (item.name,)
            continue
        if t is Seq or t is Alt or t is Intersect:
            children = item.items
        elif t is Repeat or t is Complement:
            children = (item.item,)
        else:
            memo[key] = ()
            continue
        if children_done:
            memo[key] = tuple(name for child in reversed(children) for name in memo[id(child)])
        else:
            stack.append((item, True))
            stack.extend((child, False) for child in children if id(child) not in memo)
    return list(memo[id(node)])


def _rules_reached(rules: dict[str, Node], references: dict[str, list[str]], used: list[str]) -> dict[str, Node]:
    """The rules reached from the names ``used``, directly or through others (names
    ``rules`` does not define left out); ``references`` holds each rule's ``_references_list``."""
    reached: dict[str, Node] = {}
    pending = list(used)
    while pending:
        name = pending.pop()
        if name not in reached and name in rules:
            reached[name] = rules[name]
            pending.extend(references[name])
    return reached


def build_nfa(rules: dict[str, Node], start: str) -> _Nfa:
    memo: dict[int, tuple] = {}
    references = {name: _references_list(node, memo) for name, node in rules.items()}
    rules, references = merge_identical_rules(rules, start, references)
    return _NfaBuilder(rules, start, references).build(start)


def merge_identical_rules(
    rules: dict[str, Node], start: str, references: dict[str, list[str]]
) -> tuple[dict[str, Node], dict[str, list[str]]]:
    """``rules`` with every rule whose body equals an earlier one's (their references read
    as the rules they were merged into) dropped, and references to it read as that one.

    Front ends write one rule per place a shape occurs: the branches of a schema's
    ``oneOf`` over objects with the same properties each get their own members and
    other-key rules. Compiled apart, every branch alive at a key position adds its own
    copy of the same items to each parse state, several times the items (and the time to
    build the state) one copy would take. Merged, a large rule is called from every
    branch and its items are one set. Equal bodies under merged references match the same
    text, so the language is unchanged; rules merge in rounds, as the rules they
    reference do (a member merges once its value's rule has). ``start`` is kept.
    ``references`` (each rule's references, as ``_references_list``) comes back for the
    rules kept, naming the rules merged into.
    """
    bodies = dict(rules)
    # The rule each body was first seen in; a body seen again merges its rule into that one.
    first_with: dict[Node, str] = {}
    merged: dict[str, str] = {}
    # The rules naming each rule (a merged one's users are its twin's too).
    users: dict[str, set[str]] = {}
    for name, used_names in references.items():
        for used in used_names:
            users.setdefault(used, set()).add(name)
    position = {name: index for index, name in enumerate(rules)}
    # The rules merged into each kept one, so that a merge re-points only those (thousands
    # of rules merge in a large schema: scanning every merge at each one was quadratic).
    merged_into: dict[str, list[str]] = {}

    def merge(name: str, into: str) -> None:
        # ``start`` stays: a twin of it merges into it instead.
        if name == start:
            name, into = into, name
            first_with[bodies[into]] = into
        merged[name] = into
        users.setdefault(into, set()).update(users.get(name, ()))
        earlier = merged_into.pop(name, [])
        for other in earlier:
            merged[other] = into
        kept = merged_into.setdefault(into, [])
        kept.extend(earlier)
        kept.append(name)
        del bodies[name]

    newly = []
    for name in [start] + [name for name in rules if name != start]:
        twin = first_with.setdefault(bodies[name], name)
        if twin != name:
            merge(name, twin)
            newly.append(name)
    while newly:
        # Only the rules that refer to a rule just merged change; their bodies may now
        # equal another rule's.
        affected = sorted({user for name in newly for user in users.get(name, ()) if user in bodies},
                          key=position.__getitem__)
        renamed: dict[int, tuple[Node, Node]] = {}
        newly = []
        for name in affected:
            if name not in bodies:
                continue
            old = bodies[name]
            if first_with.get(old) == name:
                del first_with[old]
            body = bodies[name] = _with_references_renamed(old, merged, renamed)
            twin = first_with.setdefault(body, name)
            if twin != name:
                merge(name, twin)
                newly.append(name if name in merged else twin)
    if not merged:
        return rules, references
    return bodies, {name: [merged.get(used, used) for used in references[name]] for name in bodies}


def _with_references_renamed(node: Node, names: dict[str, str], done: dict[int, tuple[Node, Node]]) -> Node:
    """``node`` with each ``Ref`` to a key of ``names`` pointing to its value; subtrees
    without one are returned as they are (a shared subtree stays shared: ``done`` maps
    the id of each node met to the node, kept so that its id stays its own while the
    rules it came from are rewritten, and its rewrite)."""
    found = done.get(id(node))
    if found is not None:
        return found[1]
    t = type(node)
    result = node
    if t is Ref:
        if node.name in names:
            result = Ref(names[node.name])
    elif t is Seq or t is Alt or t is Intersect:
        items = tuple(_with_references_renamed(item, names, done) for item in node.items)
        if any(new is not old for new, old in zip(items, node.items)):
            result = t(items)
    elif t is Repeat:
        item = _with_references_renamed(node.item, names, done)
        if item is not node.item:
            result = Repeat(item, node.min, node.max)
    elif t is Complement:
        item = _with_references_renamed(node.item, names, done)
        if item is not node.item:
            result = Complement(item)
    done[id(node)] = (node, result)
    return result


def _too_many_items() -> GrammarError:
    return GrammarError(
        f"parse state too large (more than {MAX_ITEMS_PER_CONFIG} items): the grammar is too ambiguous for this input"
    )


def _too_many_configs() -> GrammarError:
    return GrammarError(
        f"automaton too large (more than {MAX_CONFIGS} parse states): the grammar is too "
        "ambiguous or the input nests too deeply"
    )


# What native.states.successor returns past MAX_ITEMS_PER_CONFIG (past MAX_CONFIGS: one less).
_NATIVE_TOO_MANY_ITEMS = -10


def _row_index(values: np.ndarray):
    """``values`` (sorted bytes) as the cheapest index of a table row: an int, a slice
    for a range, else the array (numpy assigns through scalars and slices many times
    faster than through index arrays)."""
    if len(values) == 1:
        return int(values[0])
    low, high = int(values[0]), int(values[-1])
    if high - low + 1 == len(values):
        return slice(low, high + 1)
    return values


def _bytes_of(bits: int, byte_sets: dict[int, np.ndarray]) -> np.ndarray:
    """The bytes of a byte set (a 256-bit int), sorted, memoised in ``byte_sets``."""
    found = byte_sets.get(bits)
    if found is None:
        flags = np.unpackbits(np.frombuffer(bits.to_bytes(32, "little"), dtype=np.uint8), bitorder="little")
        found = byte_sets[bits] = np.flatnonzero(flags)
    return found


def _partition(masks: list[int], byte_sets: dict[int, np.ndarray]) -> tuple:
    """Split the bytes into the parts every byte set of ``masks`` either holds whole or
    misses whole: (each byte's part, -1 for none, as ``int16`` bytes, which native row
    building reads as they are; per part the indices of the masks holding it; per part
    its bytes, as an index of a table row). Rows of many configurations scan the same
    byte sets: ``_Partitions`` memoises the split by them, and keeps it small (a
    configuration with new byte sets makes one). ``byte_sets`` memoises the bytes of each
    set. ``parts_of_bytes`` reads the parts."""
    parts: list[tuple[int, list[int]]] = []
    for index, mask in enumerate(masks):
        refined = []
        rest = mask
        for bits, members in parts:
            inside = bits & mask
            if inside:
                refined.append((inside, members + [index]))
                rest &= ~inside
                if inside != bits:
                    refined.append((bits & ~mask, members))
            else:
                refined.append((bits, members))
        if rest:
            refined.append((rest, [index]))
        parts = refined
    part_of_byte = np.full(256, -1, dtype=np.int16)
    part_bytes = [_bytes_of(bits, byte_sets) for bits, _members in parts]
    for number, values in enumerate(part_bytes):
        part_of_byte[values] = number
    targets = [_row_index(values) for values in part_bytes]
    members = [members for _bits, members in parts]
    return part_of_byte.tobytes(), members, targets


def parts_of_bytes(partition: tuple) -> np.ndarray:
    """Each byte's part in a ``_partition`` (-1 for none), as an ``intp`` array."""
    return np.frombuffer(partition[0], dtype=np.int16).astype(np.intp)


class _Partitions(dict):
    """An automaton's row partitions by sorted byte sets, each made on its first lookup
    (native row building makes and adds the ones it needs itself). It holds its own
    byte-set memo, not the automaton: no reference cycle."""

    def __init__(self) -> None:
        super().__init__()
        self._byte_sets: dict[int, np.ndarray] = {}

    def __missing__(self, masks: tuple[int, ...]) -> tuple:
        found = native.states.partition(masks) if native.states is not None else None
        if found is None:
            found = _partition(list(masks), self._byte_sets)
        self[masks] = found
        return found


def _grouped_pairs(pairs: np.ndarray):
    """(config, its bytes) from sorted ``config * 256 + byte`` keys."""
    configs = (pairs >> 8).tolist()
    values = (pairs & 0xFF).tolist()
    start = 0
    for end in range(1, len(configs) + 1):
        if end == len(configs) or configs[end] != configs[start]:
            yield configs[start], values[start:end]
            start = end


# ---------------------------------------------------------------------------
# Lazy determinisation


class ByteAutomaton:
    """A lazily determinised byte automaton; configurations are interned ``int`` ids.

    ``text_mode=True`` builds the variant used for whole-string checks: ``any!`` is any
    non-empty byte string and ``except!`` token limits are ignored (there are no tokens).
    """

    def __init__(self, nfa: _Nfa, *, text_mode: bool = False) -> None:
        self._nfa = nfa
        self._text_mode = text_mode
        self.has_token_hooks = not text_mode and (
            nfa.has_any or any(limit is not None for limit in nfa.except_limit)
        )
        self._local: dict[int, tuple[int, ...]] = {}
        # Items by configuration; None for one the native code made in plain form until
        # something reads its items (``_items``), which also enters them in the index.
        self._configs: list[frozenset | None] = []
        self._index: dict[frozenset, int] = {}
        self._accepting: list[bool] = []
        self._callers: list[dict | None] = []
        # Per configuration, the configuration its calls name as their origin, and that
        # configuration by callers table (see ``_settle_context``).
        self._contexts: list[int] = []
        self._context_index: dict[frozenset, int] = {}
        # Closures of kernels, one table per at_boundary value: kernels are looked up
        # without wrapping them in a key tuple, one allocation fewer per lookup.
        self._closures: tuple[dict, dict] = ({}, {})
        self._boundary: dict[int, int] = {}
        self._after_any: dict[int, int] = {}
        self._next_bytes: dict[int, bytes] = {}
        self._only_next: dict[int, int] = {}
        self._continues: dict[int, bool] = {}
        self._live_ascii: dict[int, int] = {}
        self._utf8_agreement: dict[tuple[int, int], bool] = {}
        # By sorted byte sets; made on first lookup, from native code too (see _Partitions).
        self._partitions = _Partitions()
        self._table = np.full((64, 256), _UNKNOWN, dtype=np.int32)
        # The native entry computation finds the current table here.
        self._table_box = [self._table]
        # Rows are filled part by part as bytes are asked for (a trie walk asks only for
        # the bytes its nodes continue with); complete rows are listed here, and the
        # scans of partly filled ones kept until they complete.
        self._complete: set[int] = set()
        self._scans: dict[int, tuple] = {}
        # Reads of computed rows need no lock; building new configurations does.
        self._lock = threading.RLock()
        self._heuristic_data = None
        # The completion searches meet the same configurations again and again (each
        # search of a token budget's costs starts near the last one).
        self._lower_bounds: dict[int, tuple[float, int]] = {}
        # Spellable bytes (a 256-bit set) -> the distances ``completion_bound`` reads.
        self._realizable: dict[int, _RealizableDistances] = {}
        self._search_moves: dict[int, tuple] = {}
        self._count_shifts: dict[tuple[int, int], int] = {}
        # A shifted configuration's (configuration, shift) it was first made from: shifts
        # add up, so a chain of counts made again from a later count finds the ones made
        # before from an earlier one.
        self._shifted_from: dict[int, tuple[int, int]] = {}
        # Configuration -> (a completion through it, where its own rest starts, whether
        # that rest is a shortest one).
        self._known_completions: dict[int, tuple[bytes, int, bool]] = {}
        # Rows computed by class (watches, intersections): the classes by the sorted byte
        # sets a configuration reads (``_byte_classes``).
        self._class_tables: dict[tuple[int, ...], tuple] = {}
        self._except_masks: list[int] | None = None
        self._consumed_masks: frozenset[int] | None = None
        self._count_bound_list: list[int] | None = None
        self._native = self._native_tables()
        if self._native is not None:
            native.states.bind(
                self._native, self._closures[0], self._index, self._configs, self._accepting, self._callers,
                self._contexts, self._context_index, self._scans, self._partitions, self._table_box, self._lock,
                text_mode, MAX_ITEMS_PER_CONFIG, MAX_CONFIGS,
            )
        self.initial = self._close([(nfa.root, None, None, None)], True)
        if self.initial == DEAD:
            # Rule checks already exclude unproductive rules; this is what they cannot
            # see: intersections without a common string, classes that match nothing.
            raise EmptyLanguageError("the grammar matches nothing (an intersection or a class is empty)")

    # -- byte classes -----------------------------------------------------------------
    def _byte_classes(self, cid: int) -> tuple:
        """(each byte's class, -1 where no item reads it; a representative byte per class;
        the classes inside each byte set) for a configuration whose row is computed by
        class: the bytes its items' byte sets, its intersections' and the ``except!``
        strings' bytes all treat alike. Memoised by those byte sets."""
        nfa = self._nfa
        kind, mask_of = nfa.kind, nfa.mask
        masks = set(self._except_byte_masks())
        for p, _o, _w, _t in self._items(cid):
            mask = mask_of[p]
            if mask and kind[p] in _CONSUMING:
                masks.add(mask)
                if kind[p] == _ISECT:
                    masks.update(nfa.intersections[nfa.out[p]].masks())
        key = tuple(sorted(masks))
        found = self._class_tables.get(key)
        if found is None:
            partition = self._partitions[key]
            class_of_byte, members = parts_of_bytes(partition), partition[1]
            representative = [-1] * len(members)
            for byte, number in enumerate(class_of_byte.tolist()):
                if number >= 0 and representative[number] < 0:
                    representative[number] = byte
            inside: dict[int, list[int]] = {mask: [] for mask in key}
            for number, holding in enumerate(members):
                for index in holding:
                    inside[key[index]].append(number)
            found = (
                class_of_byte, representative,
                {mask: tuple(numbers) for mask, numbers in inside.items()},
            )
            self._class_tables[key] = found
        return found

    def _except_byte_masks(self) -> list[int]:
        """One-byte sets of every byte of an ``except!`` string (an item watching one
        reads that byte apart from the rest)."""
        found = self._except_masks
        if found is None:
            strings = [s for group in self._nfa.except_strings for s in group]
            found = self._except_masks = sorted({1 << b for s in strings for b in s})
        return found

    def _native_tables(self):
        """The NFA as C arrays for ``native.states``, or None without the extension."""
        if native.states is None:
            return None
        nfa = self._nfa
        limited = [limit is not None for limit in nfa.except_limit]
        tables = native.states.nfa_tables(
            nfa.kind, nfa.out, nfa.arg, nfa.useful, nfa.rule_start, nfa.counters, limited, PENDING, nfa.mask
        )
        tails = nfa.search_tails
        if tails is not None:
            native.states.set_search_tails(tables, tails.starts, tails.droppable, tails.counts, tails.groups)
        return tables

    # -- closure ----------------------------------------------------------------------
    def _local_closure(self, p: int) -> tuple[int, ...]:
        """Non-epsilon positions reachable from ``p`` through epsilon positions."""
        found = self._local.get(p)
        if found is not None:
            return found
        kind, out, useful = self._nfa.kind, self._nfa.out, self._nfa.useful
        seen = {p}
        stack = [p]
        result = []
        while stack:
            q = stack.pop()
            if kind[q] == _EPS:
                for r in out[q]:
                    if r not in seen and useful[r]:
                        seen.add(r)
                        stack.append(r)
            elif useful[q]:
                result.append(q)
        found = self._local[p] = tuple(result)
        return found

    def _close(self, kernel, at_boundary: bool) -> int:
        if not kernel:
            return DEAD
        kernel_set = _frozen(kernel)
        closures = self._closures[1 if at_boundary else 0]
        cid = closures.get(kernel_set)
        if cid is not None:
            return cid
        if len(kernel_set) == 1 and self._native is None:
            kind = self._nfa.kind
            # Inside a literal the next position is a plain byte: it is its own closure.
            (item,) = kernel_set
            if self._local_closure(item[0]) == (item[0],) and kind[item[0]] == _BYTE:
                cid = closures[kernel_set] = self._intern(kernel_set)
                return cid
        items = None
        if self._native is not None:
            items = native.states.close(
                self._native, kernel_set, at_boundary, self._text_mode, self._callers, MAX_ITEMS_PER_CONFIG
            )
            if type(items) is int:
                raise _too_many_items()
        if items is None:
            items = self._close_items(kernel_set, at_boundary)
        cid = self._intern(items) if items else DEAD
        closures[kernel_set] = cid
        return cid

    def _close_items(self, kernel_set: frozenset, at_boundary: bool) -> frozenset:
        """The items of the closure of ``kernel_set`` (``native.states.close`` does the
        same in C, except for intersections)."""
        nfa = self._nfa
        kind, out, arg = nfa.kind, nfa.out, nfa.arg
        text_mode = self._text_mode
        any_token_state = None if (at_boundary or text_mode) else PENDING
        items: set = set()
        seen: set = set()
        work = list(kernel_set)
        callers_self: dict = {}
        completed_self: dict = {}
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            p, o, w, t = item
            for q in self._local_closure(p):
                k = kind[q]
                if k == _BYTE or k == _ACCEPT:
                    items.add((q, o, w, t))
                elif k == _CALL:
                    caller = (q, o, w, t)
                    if caller in items:
                        continue
                    items.add(caller)
                    rule = arg[q]
                    callers_self.setdefault((rule, w), []).append(caller)
                    work.append((nfa.rule_start[rule], (SELF, w), w, None))
                    for done in completed_self.get((rule, w), ()):
                        work.append((out[q], o, done, t))
                elif k == _END:
                    origin_config, call_watch = o
                    rule = arg[q]
                    if origin_config == SELF:
                        done = completed_self.setdefault((rule, call_watch), set())
                        if w in done:
                            continue
                        done.add(w)
                        for cq, co, _cw, ct in callers_self.get((rule, call_watch), ()):
                            work.append((out[cq], co, w, ct))
                    else:
                        for ret, co, ct in self._callers[origin_config].get((rule, call_watch), ()):
                            work.append((ret, co, w, ct))
                elif k == _ANY_START:
                    items.add((q, o, w, any_token_state))
                elif k == _ANY_INSIDE:
                    items.add((q, o, w, None))
                    if text_mode:
                        work.append((arg[q], o, w, None))
                elif k == _EX_ENTER:
                    limited = not text_mode and nfa.except_limit[arg[q]] is not None
                    work.append((out[q], o, w, (0, False) if limited else None))
                elif k == _ISECT_ENTER:
                    product = nfa.intersections[arg[q]]
                    if product.live(product.initial):
                        work.append((out[q], o, w, product.initial))
                elif k == _ISECT:
                    items.add((q, o, w, t))
                    if nfa.intersections[out[q]].accepting(t):
                        work.append((arg[q], o, w, None))
                elif k == _COUNT_ENTER:
                    body, after = out[q]
                    work.append((body, o, w, 0))
                    if nfa.counters[arg[q]][0] == 0:
                        work.append((after, o, w, None))
                elif k == _COUNT_HUB:
                    low, high = nfa.counters[arg[q]]
                    body, after = out[q]
                    done = t + 1
                    if done < high:
                        work.append((body, o, w, done))
                    if done >= low:
                        work.append((after, o, w, None))
                else:  # _EX_EXIT
                    work.append((out[q], o, w, None))
            if len(items) > MAX_ITEMS_PER_CONFIG:
                raise _too_many_items()
        tails = nfa.search_tails
        return frozenset(items) if tails is None else tails.without_subsumed(frozenset(items))

    def _items(self, cid: int) -> frozenset:
        """The items of configuration ``cid`` (one the native code made in plain form gets
        them on first use)."""
        items = self._configs[cid]
        return items if items is not None else native.states.items(self._native, cid)

    def _intern(self, items: frozenset) -> int:
        if self._native is not None:
            # The native index also finds configurations made in plain form, without items.
            return self._native_config(native.states.intern(self._native, items))
        cid = self._index.get(items)
        if cid is not None:
            return cid
        cid = len(self._configs)
        if cid >= MAX_CONFIGS:
            raise _too_many_configs()
        self._configs.append(items)
        self._index[items] = cid
        # The callers table with the origins of the configuration's own calls still SELF,
        # until its context is known.
        accepting, callers = self._intern_info(items)
        if callers is not None:
            context, callers = self._settle_context(callers, cid)
        self._accepting.append(accepting)
        self._callers.append(callers)
        self._contexts.append(cid if callers is None else context)
        if cid >= self._table.shape[0]:
            self._grow_table()
        return cid

    def _grow_table(self) -> None:
        grown = np.full((self._table.shape[0] * 2, 256), _UNKNOWN, dtype=np.int32)
        grown[: self._table.shape[0]] = self._table
        self._table = self._table_box[0] = grown

    def _settle_context(self, callers: dict, cid: int) -> tuple[int, dict]:
        """(the configuration that items called from configuration ``cid`` name as their
        origin, its callers table with SELF made that configuration), given the table with
        its own calls' origins still SELF; ``native.states.settle_context`` in C.

        Returning from a call reads nothing of its origin but the callers table, so the
        first configuration interned with an equal table stands for every later one: the
        callees of two configurations that call the same rules with the same continuations
        are then the same items, and their configurations, rows and masks are built once."""
        key = frozenset((rule_watch, frozenset(returns)) for rule_watch, returns in callers.items())
        context = self._context_index.setdefault(key, cid)
        if any(o is not None and o[0] == SELF for returns in callers.values() for _, o, _ in returns):
            callers = {
                rule_watch: [
                    (ret, (context, o[1]) if o is not None and o[0] == SELF else o, t) for ret, o, t in returns
                ]
                for rule_watch, returns in callers.items()
            }
        return context, callers

    def _intern_info(self, items: frozenset) -> tuple[bool, dict | None]:
        """(whether an item accepts, the rules its items call: {(rule, watch): [(return
        position, origin, token state)]}, None if none, the origins of calls made inside the
        configuration left SELF for ``_settle_context``; ``native.states.intern_info`` in C)."""
        nfa = self._nfa
        kind, out, arg = nfa.kind, nfa.out, nfa.arg
        accepting = False
        callers = None
        for p, o, w, t in items:
            k = kind[p]
            if k == _ACCEPT:
                accepting = True
            elif k == _CALL:
                if callers is None:
                    callers = {}
                callers.setdefault((arg[p], w), []).append((out[p], o, t))
        return accepting, callers

    # -- transitions ------------------------------------------------------------------
    def _compute_row(self, cid: int) -> None:
        with self._lock:
            if cid not in self._complete:
                self._compute_row_locked(cid)
                self._complete.add(cid)
                self._scans.pop(cid, None)

    def _scan(self, cid: int):
        """(items scanned by byte set, the sorted byte sets, their partition) of a plain
        configuration, or None when its row must be computed by byte class."""
        scan = self._scans.get(cid)
        if scan is None:
            by_mask = self._plain_scans(cid)
            if by_mask is None:
                return None
            masks = sorted(by_mask)
            partition = self._partitions[tuple(masks)]
            scan = (by_mask, masks, partition)
        return scan

    def _part_successor(self, by_mask: dict, masks: list[int], members: list[int]) -> int:
        if self._native is not None:
            # Kernel, closure and interning in one native call; None leaves an
            # intersection to Python.
            cid = native.states.successor(self._native, by_mask, masks, members)
            if cid is not None:
                return self._native_config(cid)
        if len(members) == 1:
            kernel = by_mask[masks[members[0]]]
        else:
            kernel = [item for index in members for item in by_mask[masks[index]]]
        return self._close(kernel, False)

    def _compute_row_locked(self, cid: int) -> None:
        if self._native is not None and native.states.fill_row(self._native, cid) is not None:
            return
        scan = self._scan(cid)
        if scan is None:
            self._compute_row_by_class(cid)
            return
        by_mask, masks, partition = scan
        # One successor per part, then DEAD for the bytes no item scans.
        successors = [self._part_successor(by_mask, masks, members) for members in partition[1]]
        successors.append(DEAD)
        self._table[cid] = np.array(successors, dtype=np.int32)[parts_of_bytes(partition)]

    def _compute_entries(self, cid: int, byte_values) -> None:
        """Fill the successors of ``cid`` for ``byte_values`` (and the rest of their parts)."""
        with self._lock:
            if cid in self._complete:
                return
            scan = self._scan(cid)
            if scan is None or not scan[2][1]:
                # Rows by byte class (watches, intersections) and rows with no
                # consuming item are computed whole.
                self._compute_row_locked(cid)
                self._complete.add(cid)
                return
            by_mask, masks, partition = scan
            _, parts, targets = partition
            if cid not in self._scans:
                # Kept until the row is complete (as tuples, see _plain_scans).
                masks = tuple(masks)
                self._scans[cid] = (by_mask, masks, partition)
                # The bytes of no part are dead; entries filled byte by byte before (the
                # native ``entry`` by byte) stay, as the native scan leaves them.
                row = self._table[cid]
                row[(row == _UNKNOWN) & (parts_of_bytes(partition) < 0)] = DEAD
            part_of_byte = memoryview(partition[0]).cast("h")
            for value in byte_values:
                part = part_of_byte[value]
                if part >= 0 and self._table.item(cid, value) == _UNKNOWN:
                    successor = self._part_successor(by_mask, masks, parts[part])
                    # Read the table only now: interning new configurations may grow it.
                    self._table[cid, targets[part]] = successor

    def _plain_scans(self, cid: int) -> dict[int, tuple] | None:
        """Items after one byte, by the byte set that scans them, when that is all a row
        needs (no ``except!`` watches or intersections); else None."""
        nfa = self._nfa
        if self._native is not None:
            return native.states.plain_scans(self._native, self._items(cid), cid)
        kind, out, arg, mask_of = nfa.kind, nfa.out, nfa.arg, nfa.mask
        by_mask: dict[int, list] = {}
        for p, o, w, t in self._items(cid):
            if not mask_of[p] or kind[p] not in _CONSUMING:
                continue
            if w is not None:
                return None
            k = kind[p]
            if k == _ANY_START:
                if t is PENDING:
                    continue
                t = None
            elif k == _ISECT or (arg[p] >= 0 and k != _ANY_INSIDE):
                return None
            if o is not None and o[0] == SELF:
                o = (self._contexts[cid], o[1])
            found = by_mask.get(mask_of[p])
            if found is None:
                found = by_mask[mask_of[p]] = []
            found.append((out[p], o, None, t))
        # Tuples: rows keep these until complete, and the garbage collector stops
        # tracking tuples of plain values, unlike lists.
        return {mask: tuple(scanned) for mask, scanned in by_mask.items()}

    def _compute_row_by_class(self, cid: int) -> None:
        class_of_byte, representative, classes_inside = self._byte_classes(cid)
        nfa = self._nfa
        kind, out, arg, mask_of = nfa.kind, nfa.out, nfa.arg, nfa.mask
        # Scanned items, and for each byte class the indices of the items it scans to.
        scanned_items: list = []
        by_class: defaultdict[int, list[int]] = defaultdict(list)
        for item in self._items(cid):
            p, o, w, t = item
            if not mask_of[p] or kind[p] not in _CONSUMING:
                continue
            classes = classes_inside[mask_of[p]]
            if o is not None and o[0] == SELF:
                o = (self._contexts[cid], o[1])
            k = kind[p]
            if k == _ISECT:
                product = nfa.intersections[out[p]]
                representatives = [representative[c] for c in classes]
                # Classes leading the product to the same state share one scanned item, so
                # that their kernels agree and are closed once.
                index_of_states: dict[tuple, int] = {}
                for c, byte, states in zip(classes, representatives, product.step_each(t, representatives)):
                    if states is None:
                        continue
                    if w is None:
                        index = index_of_states.get(states)
                        if index is None:
                            index = index_of_states[states] = len(scanned_items)
                            scanned_items.append((p, o, None, states))
                        by_class[c].append(index)
                        continue
                    scanned = self._scan_special(p, o, w, states, byte)
                    if scanned is not None:
                        by_class[c].append(len(scanned_items))
                        scanned_items.append((p, o, scanned[2], states))
                continue
            if k == _ANY_START:
                if t is PENDING:
                    continue
                shared = w is None
                scanned = (out[p], o, w, None)
            else:
                shared = w is None and (arg[p] < 0 or k == _ANY_INSIDE)
                scanned = (out[p], o, None, t)
            if shared:
                index = len(scanned_items)
                scanned_items.append(scanned)
                for c in classes:
                    by_class[c].append(index)
                continue
            for c in classes:
                scanned = self._scan_special(p, o, w, t, representative[c])
                if scanned is not None:
                    by_class[c].append(len(scanned_items))
                    scanned_items.append(scanned)
        # One more entry, DEAD, for the bytes no item reads (class -1).
        successors = np.full(len(representative) + 1, DEAD, dtype=np.int32)
        # Classes a terminal elsewhere in the grammar tells apart often scan to the same
        # items here: close each distinct kernel once.
        closed: dict[tuple, int] = {}
        for c, indices in by_class.items():
            key = tuple(indices)
            found = closed.get(key)
            if found is None:
                found = closed[key] = self._close([scanned_items[i] for i in indices], False)
            successors[c] = found
        self._table[cid] = successors[class_of_byte]

    def _scan_special(self, p: int, o, w, t, byte: int):
        """Scan one byte at an ``except!`` position or with pending exclusions."""
        nfa = self._nfa
        eid = nfa.arg[p] if nfa.kind[p] == _BYTE else -1
        if t is not None and t is not PENDING and eid >= 0:
            used, touched = t
            if not touched:
                if used >= nfa.except_limit[eid]:
                    return None
                t = (used, True)
        watch = []
        if w:
            for watch_eid, i, matched in w:
                s = nfa.except_strings[watch_eid][i]
                if s[matched] == byte:
                    if matched + 1 == len(s):
                        return None
                    watch.append((watch_eid, i, matched + 1))
        if eid >= 0:
            for i, s in enumerate(nfa.except_strings[eid]):
                if s[0] == byte:
                    if len(s) == 1:
                        return None
                    watch.append((eid, i, 1))
        if nfa.kind[p] == _ANY_START:
            t = None
        return (nfa.out[p], o, frozenset(watch) if watch else None, t)

    def utf8_agrees(self, config: int, ascii_byte: int) -> bool:
        """True when every multi-byte UTF-8 character surely leads ``config`` where
        ``ascii_byte`` does: read off the NFA positions the characters pass through,
        without building the configurations inside them. False means not known."""
        key = (config, ascii_byte)
        found = self._utf8_agreement.get(key)
        if found is None:
            found = self._utf8_agreement[key] = self._utf8_kernels_agree(config, ascii_byte)
        return found

    def _utf8_kernels_agree(self, config: int, ascii_byte: int) -> bool:
        if self._native is not None:
            # A plain configuration answers from its native items, with no scan made.
            found = native.states.utf8_agrees_config(self._native, config, ascii_byte, _UTF8_FORMS)
            if found is not None:
                return found
        # The items by byte set alone: the row's split is not read.
        scan = self._scans.get(config)
        by_mask = scan[0] if scan is not None else self._plain_scans(config)
        if by_mask is None:
            return self._utf8_agrees_with_intersections(config, ascii_byte)
        if self._native is not None:
            return native.states.utf8_agrees(self._native, by_mask, ascii_byte, _UTF8_FORMS)
        return bool(self._kernel_after_every_character(by_mask, ascii_byte))

    def _kernel_after_every_character(self, by_mask: dict, ascii_byte: int) -> frozenset | None:
        """The items ``ascii_byte`` scans to, when every multi-byte UTF-8 character
        surely scans ``by_mask`` to the same ones (possibly none); else None."""
        target = self._kernel_after(by_mask, ascii_byte, ascii_byte)
        if target is None:
            return None
        for lead, continuations in _UTF8_FORMS:
            kernel = self._kernel_after(by_mask, *lead)
            for low, high in continuations:
                if kernel is None:
                    return None
                kernel = self._plain_kernel_after(kernel, low, high)
            if kernel != target:
                return None
        return target

    def _utf8_agrees_with_intersections(self, config: int, ascii_byte: int) -> bool:
        """``utf8_agrees`` for a configuration holding intersections (and otherwise plain
        items): an intersection goes where the ASCII byte takes it when each of its
        operands does (the same operand states, so the same liveness), and the plain
        items are read off their positions as elsewhere."""
        nfa = self._nfa
        kind, out, arg, mask_of = nfa.kind, nfa.out, nfa.arg, nfa.mask
        by_mask: dict[int, list] = {}
        any_intersection_goes_on = False
        for p, o, w, t in self._items(config):
            if not mask_of[p] or kind[p] not in _CONSUMING:
                continue
            k = kind[p]
            if w is not None or k == _ANY_START or (arg[p] >= 0 and k != _ISECT):
                return False
            if k == _ISECT:
                product = nfa.intersections[out[p]]
                if not all(part.utf8_agrees(state, ascii_byte) for part, state in zip(product.parts, t)):
                    return False
                any_intersection_goes_on = any_intersection_goes_on or product.step(t, ascii_byte) is not None
                continue
            by_mask.setdefault(mask_of[p], []).append((out[p], o, None, t))
        return any_intersection_goes_on and self._kernel_after_every_character(by_mask, ascii_byte) is not None

    @staticmethod
    def _kernel_after(by_mask: dict, low: int, high: int) -> frozenset | None:
        """The items after any byte of ``low..high``, if all of them scan the same items."""
        bits = _range_mask(low, high)
        items: list = []
        for mask, scanned in by_mask.items():
            inside = mask & bits
            if inside == bits:
                items.extend(scanned)
            elif inside:
                return None
        return frozenset(items)

    def _plain_kernel_after(self, kernel: frozenset, low: int, high: int) -> frozenset | None:
        """As ``_kernel_after`` for a kernel whose closure only reaches plain byte positions."""
        nfa = self._nfa
        kind, mask_of, arg, out = nfa.kind, nfa.mask, nfa.arg, nfa.out
        bits = _range_mask(low, high)
        items = []
        for p, o, w, t in kernel:
            for q in self._local_closure(p):
                if kind[q] != _BYTE or arg[q] >= 0 or w is not None:
                    return None
                inside = mask_of[q] & bits
                if inside == bits:
                    items.append((out[q], o, None, t))
                elif inside:
                    return None
        return frozenset(items)

    @property
    def transition_table(self) -> np.ndarray:
        """The successor table as filled so far: int32 rows of 256 bytes, one per
        configuration, ``-2`` where an entry is not computed yet (``step_many`` computes
        it). The array is replaced as the automaton grows: read it again after stepping."""
        return self._table

    def row(self, config: int) -> np.ndarray:
        """The successor of ``config`` for every byte (a read-only view)."""
        if config not in self._complete:
            self._compute_row(config)
        view = self._table[config]
        view.flags.writeable = False
        return view

    def successors(self, config: int, values: np.ndarray) -> np.ndarray:
        """The successor of ``config`` by each byte of ``values``, computing only the parts
        of its row those bytes fall in."""
        if self._native is not None and values.dtype.kind in "iu" and values.dtype.itemsize in (1, 8):
            found = np.empty(len(values), dtype=np.int32)
            if native.states.successors(self._native, config, values, found):
                return found
        found = self._table[config].take(values)
        if found.min(initial=DEAD) == _UNKNOWN:
            self._fill_entries(config, values)
            found = self._table[config].take(values)
        return found

    def step(self, config: int, byte: int) -> int:
        if config < 0:
            return DEAD
        nxt = self._table.item(config, byte)
        if nxt == _UNKNOWN:
            nxt = self._entry(config, byte)
        return nxt

    def _entry(self, config: int, byte: int) -> int:
        """Compute the unknown successor of ``config`` by ``byte``."""
        if self._native is not None:
            # A step reads one byte of the row (a token's bytes, a chain): the byte's entry
            # alone while few are known. The native code holds the lock itself.
            nxt = native.states.entry(self._native, config, byte, True)
            if nxt is not None:
                return self._native_config(nxt)
        self._compute_entries(config, (byte,))
        return self._table.item(config, byte)

    def _fill_entries(self, cid: int, byte_values: np.ndarray) -> None:
        """Fill the unknown successors of ``cid`` for ``byte_values`` and the rest of their
        parts: natively one part at a time, else in Python."""
        if self._native is not None:
            # One native call fills every part the values fall in while the table has
            # room for the new configurations; entry by entry below it grows the table.
            if native.states.fill_row(self._native, cid, 256, np.asarray(byte_values, dtype=np.uint8)) is not None:
                return
            while True:
                unknown = np.flatnonzero(self._table[cid, byte_values] == _UNKNOWN)
                if not len(unknown):
                    return
                found = native.states.entry(self._native, cid, int(byte_values[unknown[0]]))
                if found is None:
                    break
                # To grow the table or raise past a limit: the entry itself is written.
                self._native_config(found)
        self._compute_entries(cid, byte_values)

    def _native_config(self, found: int) -> int:
        """A configuration the native code reached, the table grown to hold its row; the
        codes it returns past the limits raised as the errors Python raises there."""
        if found < DEAD:
            raise _too_many_items() if found == _NATIVE_TOO_MANY_ITEMS else _too_many_configs()
        if found >= self._table.shape[0]:
            with self._lock:
                if found >= self._table.shape[0]:
                    self._grow_table()
        return found

    def step_bytes(self, config: int, data: bytes) -> int:
        """The configuration after ``data`` (no token boundaries in between)."""
        for b in data:
            if config < 0:
                return DEAD
            nxt = self._table.item(config, b)
            if nxt == _UNKNOWN:
                nxt = self._entry(config, b)
            config = nxt
        return config

    # -- counted chains ------------------------------------------------------------------
    def count_shift_span(self, config: int, successor: int) -> int:
        """How many more steps a move from ``config`` to ``successor`` repeats by counting.

        A move is one character (however many bytes), the same one or ones each time.
        When ``successor`` holds exactly ``config``'s items with every iteration count one
        higher, the move from ``count_shifted(config, s)`` leads to
        ``count_shifted(config, s + 1)`` for every ``s`` up to the returned span: a
        counter's items move alike at every count until a count reaches some counted
        repetition's lower or upper bound, where a counter's hub starts or stops letting
        the repetition leave or go on. Else 0.
        """
        if not self._nfa.counters or config < 0 or successor < 0:
            return 0
        counts = None if self._native is None else native.states.shifted_counts(self._native, config, successor)
        if counts is None:
            counts = self._shifted_counts(config, successor)
        if not counts:
            return 0
        bounds = self._count_bounds()
        span = MAX_CONFIGS
        for count in counts:
            # The move from count ``c`` decides at the hub with ``c + 1`` iterations done;
            # the decisions stay those of ``count + 1`` below the next bound above it.
            above = bisect.bisect_right(bounds, count + 1)
            if above < len(bounds):
                span = min(span, bounds[above] - count - 2)
        return max(span, 0)

    def _shifted_counts(self, config: int, successor: int) -> set[int]:
        """The counts of ``config``'s counted items when ``successor`` holds exactly its
        items with every count one higher, else none."""
        counts = set()
        moved = []
        for item in self._items(config):
            p, o, w, t = item
            if o is not None and o[0] == SELF:
                return set()  # the origin names the configuration itself, which a shift changes
            if type(t) is int:
                counts.add(t)
                moved.append((p, o, w, t + 1))
            else:
                moved.append(item)
        if not counts or frozenset(moved) != self._items(successor):
            return set()
        return counts

    def count_shifted(self, config: int, by: int) -> int:
        """The configuration of ``config``'s items with every iteration count ``by`` higher
        (see ``count_shift_span``: it is the one ``by`` moves lead to within the span).
        Only it is built, not the ones between."""
        origin, done = self._shifted_from.get(config, (config, 0))
        key = (origin, done + by)
        shifted = self._count_shifts.get(key)
        if shifted is not None:
            return shifted
        if self._native is not None:
            shifted = self._native_config(native.states.count_shifted(self._native, config, by))
        if shifted is None:
            items = _frozen(
                [(p, o, w, t + by) if type(t) is int else (p, o, w, t) for p, o, w, t in self._items(config)]
            )
            with self._lock:
                shifted = self._intern(items)
        self._count_shifts[key] = shifted
        if shifted != origin:
            self._shifted_from.setdefault(shifted, key)
        return shifted

    def _count_bounds(self) -> list[int]:
        bounds = self._count_bound_list
        if bounds is None:
            bounds = self._count_bound_list = sorted({bound for pair in self._nfa.counters for bound in pair})
        return bounds

    def step_many(self, configs, bytes_) -> np.ndarray:
        """Vectorised ``step`` over arrays of configurations and bytes (broadcast together)."""
        configs = np.asarray(configs, dtype=np.int32)
        bytes_ = np.asarray(bytes_, dtype=np.uint8)
        if configs.shape != bytes_.shape:
            configs, bytes_ = np.broadcast_arrays(configs, bytes_)
        if configs.size == 0:
            return np.zeros(configs.shape, dtype=np.int32)
        # Dead entries read row 0 and are overwritten afterwards: cheaper than
        # compacting the live ones out when a whole trie level goes through at once.
        dead = configs < 0
        has_dead = bool(dead.any())
        rows = np.maximum(configs, 0) if has_dead else configs
        found = self._table[rows, bytes_]
        missing = found == _UNKNOWN
        if has_dead:
            missing &= ~dead
        if missing.any():
            pairs = distinct(rows[missing].astype(np.int64) * 256 + bytes_[missing])
            for config, values in _grouped_pairs(pairs):
                self._fill_entries(config, values)
            found = self._table[rows, bytes_]
        if has_dead:
            found[dead] = DEAD
        return found

    # -- queries ----------------------------------------------------------------------
    def is_accepting(self, config: int) -> bool:
        return config >= 0 and self._accepting[config]

    def next_bytes(self, config: int) -> bytes:
        if config < 0:
            return b""
        found = self._next_bytes.get(config)
        if found is None:
            found = self._next_bytes[config] = bytes(np.nonzero(self.row(config) >= 0)[0].tolist())
        return found

    def can_continue(self, config: int) -> bool:
        if config < 0:
            return False
        found = self._continues.get(config)
        if found is None:
            # Live ASCII bytes answer without the rest of the row: the configurations
            # inside multi-byte characters are built only if something steps there.
            found = self._continues[config] = (
                self.live_ascii_count(config) > 0
                or bool(self.next_bytes(config))
                or self.after_any_token(config) != DEAD
            )
        return found

    def only_next_byte(self, config: int) -> int:
        """The byte, if there is exactly one, that leads ``config`` to a live configuration;
        else -1. Two live ASCII bytes answer without computing the rest of the row."""
        found = self._only_next.get(config)
        if found is None:
            several = config < 0 or self.live_ascii_count(config) > 1
            found = self._only_next[config] = -1 if several else self._find_only_next_byte(config)
        return found

    def _find_only_next_byte(self, config: int) -> int:
        # Asked at every new mask of a forced literal: the native fill of the whole row
        # answers with its one live byte, without making the row's list of live bytes.
        found = native.states.fill_row(self._native, config, 256, None, True) if self._native is not None else None
        if found is None:
            following = self.next_bytes(config)
            return following[0] if len(following) == 1 else -1
        return found

    def live_ascii_count(self, config: int) -> int:
        """How many ASCII bytes lead ``config`` somewhere live (only the ASCII part of its
        row is computed)."""
        found = self._live_ascii.get(config)
        if found is None:
            if config not in self._complete and self._native is not None:
                found = native.states.fill_row(self._native, config, 128)
            if found is None:
                if config not in self._complete:
                    self._fill_entries(config, ASCII_BYTES)
                found = int(np.count_nonzero(self._table[config, :128] >= 0))
            self._live_ascii[config] = found
        return found

    def consumed_masks(self) -> frozenset[int]:
        """Byte sets (as 256-bit ints) that some position of this automaton consumes."""
        if self._consumed_masks is None:
            nfa = self._nfa
            # Only consuming positions have a non-zero mask.
            found = set(nfa.mask)
            found.discard(0)
            for product in nfa.intersections:
                found |= product.masks()
            self._consumed_masks = frozenset(found)
        return self._consumed_masks

    @property
    def num_configs(self) -> int:
        return len(self._configs)

    # -- token-level hooks ------------------------------------------------------------
    def on_token_boundary(self, config: int) -> int:
        """The configuration once the current token is complete.

        Finishes ``any!`` tokens, lets ``any!`` start again, and counts the token for
        every ``except!(.., n)`` region that consumed bytes of it. Never returns DEAD
        for a live configuration.
        """
        if not self.has_token_hooks or config < 0:
            return config
        found = self._boundary.get(config)
        if found is not None:
            return found
        with self._lock:
            return self._on_token_boundary_locked(config)

    def _on_token_boundary_locked(self, config: int) -> int:
        nfa = self._nfa
        kind, arg = nfa.kind, nfa.arg
        kernel = []
        changed = False
        for item in self._items(config):
            p, o, w, t = item
            k = kind[p]
            if k == _ANY_INSIDE:
                kernel.append((arg[p], o, w, None))
                changed = True
            elif t is PENDING:
                kernel.append((p, o, w, None))
                changed = True
            elif type(t) is tuple and len(t) == 2 and type(t[1]) is bool and t[1]:
                # An except! region's (tokens used, touched) pair; intersections keep
                # operand states and counted repetitions an int in the same field.
                kernel.append((p, o, w, (t[0] + 1, False)))
                changed = True
            else:
                kernel.append(item)
        result = self._close(kernel, True) if changed else config
        self._boundary[config] = result
        return result

    def after_any_token(self, config: int) -> int:
        """The configuration after one whole ``any!`` token taken at a token boundary (DEAD if none)."""
        if config < 0 or not self._nfa.has_any:
            return DEAD
        found = self._after_any.get(config)
        if found is not None:
            return found
        with self._lock:
            return self._after_any_token_locked(config)

    def _after_any_token_locked(self, config: int) -> int:
        nfa = self._nfa
        kernel = []
        for p, o, w, t in self._items(config):
            if nfa.kind[p] == _ANY_START and (t is None or self._text_mode):
                if o is not None and o[0] == SELF:
                    o = (self._contexts[config], o[1])
                kernel.append((nfa.arg[nfa.out[p]], o, w, None))
        result = self._close(kernel, True)
        self._after_any[config] = result
        return result

    # -- shortest completions ---------------------------------------------------------
    def _heuristic_tables(self):
        """Static lower bounds: bytes from each NFA position to the end of its rule (``_distances_to_ends``)."""
        if self._heuristic_data is None:
            nfa = self._nfa
            with collector_paused():
                self._heuristic_data = (_distances_to_ends(nfa, nfa.reverse_graph()), {})
        return self._heuristic_data

    def completion_bound(self, config: int, spellable: int = ALL_BYTES_MASK) -> float:
        """An upper bound on the bytes of a shortest completion of ``config`` spelled with
        the bytes in ``spellable`` (a 256-bit set): the fewest such bytes along which one
        of its items is known to finish (plain bytes, calls, counted repetitions,
        intersections; ``any!`` and ``except!`` are not followed), inf when no item's way
        is known. Cheap: static distances, no search but the shortest strings of
        intersections."""
        return self.completion_bounds([config], spellable)[0]

    def completion_bounds(self, configs: list[int], spellable: int = ALL_BYTES_MASK) -> list[float]:
        """``completion_bound`` of each of ``configs`` (a new mask asks for hundreds at once)."""
        tables = self._realizable_tables(spellable)
        bounds = tables.bounds
        if self._native is not None:
            return native.states.completion_bounds(
                self._native, tables.native_tables(self._nfa), list(configs), bounds, tables.continuation,
                functools.partial(self._realizable_continuations, tables), functools.partial(self._item_bound, tables),
            )
        found = []
        for config in configs:
            bound = bounds.get(config)
            if bound is None:
                bound = bounds[config] = self._item_bound(tables, config)
            found.append(bound)
        return found

    def _realizable_continuations(self, tables: "_RealizableDistances", caller: int) -> dict:
        """The realizable continuation table of ``caller`` (``_continuation_table``), as a
        bound reads it."""
        return self._continuation_table(
            caller, tables.continuation, tables.dist, realizable=True, parents=tables.continuation_from
        )

    def _item_bound(self, tables: "_RealizableDistances", config: int) -> float:
        """``config``'s bound by ``_bound_item`` (the native bounds leave intersections to it)."""
        item = self._bound_item(config, tables, which=False)
        return float("inf") if item is None else item[0]

    def _realizable_tables(self, spellable: int) -> "_RealizableDistances":
        tables = self._realizable.get(spellable)
        if tables is None:
            tables = self._realizable[spellable] = _RealizableDistances(self._nfa, spellable)
        return tables

    def _bound_item(self, config: int, tables: "_RealizableDistances", *, which: bool = True) -> tuple | None:
        """(bound, item, iterations it owes) of the item of ``config`` the bound follows, or None.
        Without ``which`` only the bound is sure: of items with equal costs, the item is any
        (the order that picks the same one in every process is the costly part, and a bound
        alone does not depend on it)."""
        if config < 0:
            return None
        dist, body_of = tables.dist, tables.body_of
        nfa = self._nfa
        owner, kind = nfa.owner, nfa.kind
        best_cost = float("inf")
        best = None
        # An item's continuation is its caller's, read from the table of its origin; the
        # items of a configuration mostly share one origin.
        origin_config = continuations = None
        for item in self._items(config):
            p, o, w, t = item
            if w is not None:
                continue
            owed = 0
            if kind[p] == _ISECT:
                cost = dist[nfa.arg[p]] + nfa.intersections[nfa.out[p]].shortest_bytes(t, tables.spellable)
            else:
                cost = dist[p]
                if t is not None:
                    counter = body_of.get(p) if type(t) is int else None
                    if counter is None:
                        continue
                    # ``t`` iterations are done and this one is under way.
                    owed = max(nfa.counters[counter][0] - t - 1, 0)
                    if owed:
                        iteration = tables.iterations[counter]
                        cost += float("inf") if iteration is None else owed * len(iteration)
            if cost > best_cost:
                continue
            if o is not None:
                if o[1] is not None:
                    continue
                caller = config if o[0] == SELF else o[0]
                if caller != origin_config:
                    origin_config = caller
                    continuations = self._realizable_continuations(tables, caller)
                cost += continuations.get((owner[p], None), float("inf"))
            # Equal costs: the first item in ``_order_key`` order, the same in every process.
            if cost < best_cost or (
                which and best is not None and cost == best_cost and _order_key(item) < _order_key(best[1])
            ):
                best_cost = cost
                best = (cost, item, owed)
        return best

    def bound_completion(self, config: int, spellable: int = ALL_BYTES_MASK) -> bytes | None:
        """A completion of ``config`` as long as ``completion_bound`` says, spelled with the
        bytes in ``spellable``: the static path the bound follows, without a search; None
        when the bound is inf."""
        tables = self._realizable_tables(spellable)
        found = self._bound_item(config, tables)
        if found is None:
            return None
        _cost, (p, o, _w, t), owed = found
        nfa = self._nfa
        path = bytearray()
        start = p
        if nfa.kind[p] == _ISECT:
            path += nfa.intersections[nfa.out[p]].shortest_string(t, spellable)
            start = nfa.arg[p]
        end = self._static_path(start, tables, path, owed)
        # Back in each caller, along the continuations the bound added up.
        following = None if o is None else ("config", config if o[0] == SELF else o[0], (nfa.owner[p], None))
        current = config
        while following is not None and end is not None:
            if following[0] == "config":
                current = following[1]
            ret, following = tables.continuation_from[current][following[-1]]
            end = self._static_path(ret, tables, path)
        return None if end is None else bytes(path)

    def _static_path(self, p: int, tables: "_RealizableDistances", path: bytearray, owed: int = 0) -> int | None:
        """Append the bytes of ``p``'s shortest realizable path to the end of its rule (with
        ``owed`` more iterations of the first counted repetition it leaves); returns the
        end position reached, None where the path is not known."""
        nfa = self._nfa
        kind, out, arg, mask = nfa.kind, nfa.out, nfa.arg, nfa.mask
        via, spellable = tables.via, tables.spellable
        while True:
            k = kind[p]
            if k == _END or k == _ACCEPT:
                return p
            if k == _BYTE:
                if not mask[p] & spellable:
                    return None
                path.append(_lowest_byte(mask[p] & spellable))
                p = out[p]
            elif k == _EPS or k == _ISECT_ENTER:
                p = via[p]
            elif k == _COUNT_HUB:
                if owed:
                    path += tables.iterations[arg[p]] * owed
                    owed = 0
                p = out[p][1]
            elif k == _COUNT_ENTER:
                low = nfa.counters[arg[p]][0]
                if low:
                    path += tables.iterations[arg[p]] * low
                p = out[p][1]
            elif k == _ISECT:
                product = nfa.intersections[out[p]]
                common = product.shortest_string(product.initial, spellable)
                if common is None:
                    return None
                path += common
                p = arg[p]
            elif k == _CALL:
                if self._rule_path(arg[p], tables) is None:
                    return None
                path += tables.rule_paths[arg[p]]
                p = out[p]
            else:
                return None
            if p < 0:
                return None

    def _rule_path(self, rule: int, tables: "_RealizableDistances") -> bytes | None:
        if rule not in tables.rule_paths:
            # A rule's shortest path calls only rules settled before it: no recursion loops.
            path = bytearray()
            end = self._static_path(self._nfa.rule_start[rule], tables, path)
            tables.rule_paths[rule] = None if end is None else bytes(path)
        return tables.rule_paths[rule]

    def _lower_bound(self, config: int) -> float:
        return self._bound_and_byte(config)[0]

    def _bound_and_byte(self, config: int) -> tuple[float, int]:
        """(lower bound on the bytes to an accepting configuration, the first byte a plain
        item achieving it reads next, or -1)."""
        found = self._lower_bounds.get(config)
        if found is None:
            found = self._lower_bounds[config] = self._compute_lower_bound(config)
        return found

    def _compute_lower_bound(self, config: int) -> tuple[float, int]:
        dist, continuation = self._heuristic_tables()
        owner = self._nfa.owner
        best, best_byte = float("inf"), -1
        kind, out, mask = self._nfa.kind, self._nfa.out, self._nfa.mask
        for p, o, _w, t in self._items(config):
            cost = dist[p]
            if kind[p] == _ISECT:
                cost += self._nfa.intersections[out[p]].min_bytes(t)
            if cost > best:
                continue
            if o is not None:
                origin_config = config if o[0] == SELF else o[0]
                table = self._continuation_table(origin_config, continuation, dist)
                cost += table.get((owner[p], o[1]), float("inf"))
            # A plain item's byte leads a step along a shortest path (see ``_dive``); of
            # equal costs, the lowest such byte, whatever order the items come in.
            byte = _lowest_byte(mask[p]) if kind[p] == _BYTE else -1
            if cost < best or (cost == best and byte >= 0 and (best_byte < 0 or byte < best_byte)):
                best, best_byte = cost, byte
        return best, best_byte

    def _continuation_table(
        self, config: int, memo: dict, dist, *, realizable: bool = False, parents: dict | None = None
    ) -> dict:
        """Lower bounds on the bytes needed after rule ``(rule, call_watch)`` returns to ``config``
        (with ``realizable``, the realizable distances of ``completion_bound``: only
        callers without a watch or a repetition count, which finish as ``dist`` says;
        ``parents`` then receives, per configuration and key, the return position each
        cost came from and what follows it: None (the top level), ``("config", origin,
        key)`` or ``("same", key)``, the key of a caller in the configuration itself).

        Origins always name older configurations (smaller ids) or the configuration
        itself, so tables are built oldest first without recursion, and the
        self-references (left recursion, nullable rules) are solved with Dijkstra.
        """
        found = memo.get(config)
        if found is not None:
            return found
        needed = []
        stack = [config]
        seen = {config}
        while stack:
            current = stack.pop()
            needed.append(current)
            for entries in (self._callers[current] or {}).values():
                for _ret, o, _t in entries:
                    if o is not None and o[0] != current and o[0] not in seen and o[0] not in memo:
                        seen.add(o[0])
                        stack.append(o[0])
        owner = self._nfa.owner
        inf = float("inf")
        for current in sorted(needed):
            best: dict = {}
            internal: dict = {}
            came_from: dict = {}
            callers = self._callers[current] or {}
            for key in _in_order(callers):
                if realizable and key[1] is not None:
                    continue
                for ret, o, t in _in_order(callers[key]):
                    if realizable and (t is not None or (o is not None and o[1] is not None)):
                        continue
                    if o is None:
                        base, following = dist[ret], None
                    elif o[0] == current:
                        internal.setdefault((owner[ret], o[1]), []).append((key, dist[ret], ret))
                        continue
                    else:
                        following = ("config", o[0], (owner[ret], o[1]))
                        base = dist[ret] + memo[o[0]].get(following[2], inf)
                    if base < best.get(key, inf):
                        best[key] = base
                        came_from[key] = (ret, following)
            heap = [(cost, index, key) for index, (key, cost) in enumerate(best.items())]
            heapq.heapify(heap)
            counter = len(heap)
            done: set = set()
            while heap:
                cost, _i, key = heapq.heappop(heap)
                if key in done:
                    continue
                done.add(key)
                for dependent, step, ret in internal.get(key, ()):
                    if cost + step < best.get(dependent, inf):
                        best[dependent] = cost + step
                        came_from[dependent] = (ret, ("same", key))
                        counter += 1
                        heapq.heappush(heap, (cost + step, counter, dependent))
            memo[current] = best
            if parents is not None:
                parents[current] = came_from
        return memo[config]

    def _search_successors(self, config: int) -> tuple:
        """(target, byte or None, cost) of each distinct move the completion search takes from ``config``."""
        found = self._search_moves.get(config)
        if found is not None:
            return found
        moves = []
        row = self.row(config)
        live = np.nonzero(row >= 0)[0]
        if live.size:
            targets, first = np.unique(row[live], return_index=True)
            moves.extend((target, int(live[index]), 1) for target, index in zip(targets.tolist(), first.tolist()))
        if self.has_token_hooks:
            boundary = self.on_token_boundary(config)
            if boundary != config:
                moves.append((boundary, None, 0))
        found = self._search_moves[config] = tuple(moves)
        return found

    def shortest_completion(self, config: int) -> bytes:
        """A shortest byte string that leads from ``config`` to an accepting configuration.

        Token boundaries are assumed wherever ``any!`` needs one. Raises ``ValueError``
        for DEAD or for a configuration from which nothing can be completed.
        """
        return self._find_completion(config, shortest=True)

    def completion(self, config: int) -> bytes:
        """A short byte string that leads from ``config`` to an accepting configuration: a
        shortest one when the lower bound leads the way (``_dive``) or the exact search
        finds it within ``EXACT_COMPLETION_EXPANSIONS``
        plus the lower bound's bytes, else one found by a search that weighs the lower
        bound ``SHORT_COMPLETION_WEIGHT`` times. Every configuration on a completion's
        path keeps what is left of it; a search ends where it meets one (the exact search
        where what is left is a shortest completion itself).

        A lower bound a few bytes short of the truth (a counted repetition's remaining
        minimum, object properties that may come in any order) leaves the exact search
        every configuration within those bytes to expand, which in an object of several
        properties is tens of thousands; the weighted search goes on along one path.
        Raises as ``shortest_completion`` does.
        """
        return self._find_completion(config, shortest=False)

    def _find_completion(self, config: int, *, shortest: bool) -> bytes:
        if config < 0:
            raise ValueError("no completion from the dead configuration")
        if self.is_accepting(config):
            return b""
        with self._lock:
            known = self._known_completions.get(config)
            if known is not None and (known[2] or not shortest):
                return known[0][known[1] :]
            found = None if self.has_token_hooks else self._dive(config)
            if found is None and shortest:
                found = self._search_completion(config, 1, MAX_SEARCH_EXPANSIONS)
            elif found is None:
                # An exact lower bound leads the exact search along one path, one expansion
                # a byte; far past that it is searching a plateau.
                limit = EXACT_COMPLETION_EXPANSIONS + int(min(self._lower_bound(config), MAX_SEARCH_EXPANSIONS))
                found = self._search_completion(config, 1, limit)
                if found is None:
                    found = self._search_completion(config, SHORT_COMPLETION_WEIGHT, MAX_SEARCH_EXPANSIONS)
        if found is None:
            raise GrammarError("search for a completion exceeded its limit")
        return found

    def _search_completion(self, config: int, weight: int, limit: int) -> bytes | None:
        """A* from ``config`` with the lower bound weighted by ``weight``; None past
        ``limit`` expansions. With weight 1 a shortest completion (each
        configuration on it keeps the rest as its own shortest). A configuration with a known completion (a shortest one,
        for weight 1) is a goal at the cost of its path plus that completion."""
        counter = 0
        best = {config: 0}
        parent: dict[int, tuple[int, int | None]] = {}
        known = self._known_completions
        exact = weight == 1
        # Among equal estimates the deeper configuration goes first: with an exact lower
        # bound that walks one shortest path instead of every configuration of the same
        # estimate (a schema's properties in any order tie at every step).
        heap = [(weight * self._lower_bound(config), 0, counter, config, 0, None)]
        expansions = 0
        while heap:
            _f, _depth, _c, current, g, tail = heapq.heappop(heap)
            if g > best.get(current, g):
                continue
            if tail is not None or self.is_accepting(current):
                return self._record_path(config, current, parent, tail or b"", exact=exact)
            expansions += 1
            if expansions > limit:
                return None
            for target, byte, cost in self._search_successors(current):
                ng = g + cost
                if ng < best.get(target, float("inf")):
                    best[target] = ng
                    parent[target] = (current, byte)
                    counter += 1
                    found = known.get(target)
                    if found is not None and (found[2] or not exact):
                        rest = found[0][found[1] :]
                        # As deep as its completion goes: it wins a tie with any configuration on the way.
                        heapq.heappush(heap, (ng + len(rest), -ng - len(rest), counter, target, ng, rest))
                        continue
                    h = self._lower_bound(target)
                    if h == float("inf"):
                        continue
                    heapq.heappush(heap, (ng + weight * h, -ng, counter, target, ng, None))
        raise ValueError("no completion exists from this configuration")

    def _dive(self, config: int) -> bytes | None:
        """A shortest completion found without a search, or None: while the lower bound is
        reached by a plain item, its next byte lowers the bound by one (it moves that item
        one position on); if the bound drops by one at every byte down to an accepting
        configuration, the bytes are as few as the bound says, so they are a shortest
        completion. A configuration whose shortest completion is known ends the dive."""
        moves = []
        current = config
        bound, byte = self._bound_and_byte(current)
        known = self._known_completions
        while not self.is_accepting(current):
            found = known.get(current)
            if found is not None and found[2]:
                return self._record_moves(moves, found[0][found[1] :], exact=True)
            if byte < 0 or bound == float("inf"):
                return None
            following = self.step(current, byte)
            if following == DEAD:
                return None
            following_bound, following_byte = self._bound_and_byte(following)
            if following_bound != bound - 1:
                return None
            moves.append((current, byte))
            current, bound, byte = following, following_bound, following_byte
        return self._record_moves(moves, b"", exact=True)

    def _record_path(self, start: int, end: int, parent, tail: bytes, *, exact: bool) -> bytes:
        """The completion from ``start`` through ``end`` (then ``tail``), each configuration
        on the way keeping the rest of it."""
        moves = []
        node = end
        while node != start:
            prev, byte = parent[node]
            moves.append((prev, byte))
            node = prev
        moves.reverse()
        return self._record_moves(moves, tail, exact=exact)

    def _record_moves(self, moves: list, tail: bytes, *, exact: bool) -> bytes:
        """The completion of ``moves`` ((configuration, byte or None) from the start) then
        ``tail``, each configuration on the way keeping the rest of it."""
        completion = bytes(byte for _prev, byte in moves if byte is not None) + tail
        offset = 0
        known = self._known_completions
        for node, byte in moves:
            found = known.get(node)
            # Every stretch of a shortest path is a shortest path itself.
            if found is None or (exact and not found[2]):
                known[node] = (completion, offset, exact)
            if byte is not None:
                offset += 1
        return completion

    def min_bytes_to_accept(self, config: int) -> int:
        """Length of ``shortest_completion(config)`` (kept with it: every configuration on a
        shortest completion's path keeps the rest of it)."""
        return len(self.shortest_completion(config))
