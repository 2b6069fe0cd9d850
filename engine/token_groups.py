"""Token groups: sets of tokens that a grammar state accepts as a whole.

A group is defined by a set of ASCII bytes and whether any other Unicode character
belongs to it; its members are the tokens made only of whole UTF-8 characters of the
group. When every character of a group leads a configuration back to itself (inside
a JSON string, a run of digits, free text, ...), every member token is allowed there
and ends in the same configuration, so the mask walk allows the group at once and
only visits the *exit* nodes of the trie: the first node of each path where a token
leaves the group (a quote, a backslash, a control byte ...).

The same holds when every character of the group leads a configuration to one common
successor, and that one to a common successor again, and so on: a *chain* such as
the counter of a string with ``maxLength``. A member of ``k`` characters then ends at
the ``k``-th configuration of the chain, so members are decided by their character
count alone (``member_chars``) and exits start from the chain configuration reached
by the characters before them.

The groups are properties of the vocabulary alone, the same for every grammar, so
they are computed once per vocabulary (lazily, per group) and shared.

Where a few ASCII bytes of a group lead nowhere at every configuration of a chain (a
string whose pattern leaves out some signs), the group less those bytes
(``TokenGroup.without_bytes``) holds instead: made from the group for that set of bytes
and kept for a few sets.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from . import native
from .trie import UTF8_CLOSED as _CLOSED
from .trie import UTF8_FAIL as _FAIL
from .trie import TokenTrie, bits_holding, distinct, pack_ids, utf8_classifier
from .vocab import TokenVocabulary, store_arrays

DEAD = -1
#: The configuration after a token that ``exits_from`` found live without computing it
#: (see ``defer_partials``): computed when a token budget asks for it.
DEFERRED = -3
#: Bytes a token ending inside a multi-byte character may still need to make it whole.
MOST_BYTES_TO_FINISH_A_CHARACTER = 3


@dataclass(frozen=True)
class GroupSpec:
    name: str
    ascii_bytes: frozenset
    non_ascii: bool

    @cached_property
    def ascii_array(self) -> np.ndarray:
        return np.array(sorted(self.ascii_bytes), dtype=np.int64)

    @cached_property
    def character_byte(self) -> int:
        """The group's lowest ASCII byte: where every whole character of the group must lead
        for the characters to be taken whole (``characters_surely_live``)."""
        return min(self.ascii_bytes)

    @cached_property
    def first_exceptions(self) -> int:
        """Most first bytes whose characters may go their own way where the group is
        near-uniform (at most a quarter of its bytes)."""
        return min(MAX_FIRST_EXCEPTIONS, len(self.ascii_bytes) // 4)


def _ascii(predicate) -> frozenset:
    return frozenset(b for b in range(128) if predicate(b))


#: Most first bytes whose characters may go their own way in a near-uniform group: a
#: free key next to a settings object's known keys, whose first letters are often 20 or
#: more, stays near-uniform; past a quarter of the bytes (``first_exceptions``) the
#: excepted subtrees are most of the trie and the plain walk is as fast.
MAX_FIRST_EXCEPTIONS = 24

#: How many times the members of the group a configuration has a group less its dead
#: bytes must have to take its place (``GroupTables.groups_without_dead_bytes``): making
#: one costs a good part of a walk of the trie, so it must spare more than that.
WITHOUT_BYTES_GAIN = 2

# Largest first: the first group whose characters all loop is used.
GROUP_SPECS = (
    GroupSpec("text", _ascii(lambda b: True), True),
    GroupSpec("line", _ascii(lambda b: b not in (0x0A, 0x0D)), True),
    GroupSpec("json_string", _ascii(lambda b: b >= 0x20 and b not in (0x22, 0x5C)), True),
    GroupSpec("json_string_ascii", _ascii(lambda b: b >= 0x20 and b not in (0x22, 0x5C)), False),
    GroupSpec("word", _ascii(lambda b: chr(b).isalnum() or b == 0x5F), False),
    GroupSpec("letters", _ascii(lambda b: chr(b).isalpha()), False),
    GroupSpec("digits", _ascii(lambda b: 0x30 <= b <= 0x39), False),
    GroupSpec("spaces", frozenset({0x20}), False),
)


_GROUP_FIELDS = (
    "member_ids",
    "member_chars",
    "exit_chars",
    "partial_chars",
    "utf8_reach",
    "exit_nodes",
    "exit_tails",
    "exit_lengths",
    "partial_nodes",
    "partial_tails",
    "partial_lengths",
    "partial_ids",
    "partial_owner",
)
GROUP_FORMAT = 3


class TokenGroup:
    """Members and exit structure of one group over one vocabulary's trie."""

    def __init__(self, spec: GroupSpec, arrays: dict) -> None:
        self.spec = spec
        for name in _GROUP_FIELDS:
            setattr(self, name, np.asarray(arrays[name]))
        # A group made by ``without_bytes``: ASCII bytes that must lead nowhere (DEAD) from
        # every configuration it is read at, whose exits it leaves out.
        self.dead_bytes: np.ndarray | None = None
        self.wide_chars = int(self.utf8_reach.reshape(-1)[0])
        self.member_count = len(self.member_ids)
        self._top = int(self.member_ids[-1]) + 1 if self.member_count else 0
        self.member_words = pack_ids(self.member_ids, self._top)
        self._first_bytes: tuple | None = None
        self._partial_first: np.ndarray | None = None
        self._native_exits = None
        self._words_without: dict[bytes, np.ndarray] = {}
        self._partials_without: dict[bytes, tuple] = {}
        self._words_by_first: dict[int, np.ndarray] = {}
        self._by_chars: tuple[np.ndarray, np.ndarray] | None = None
        self._members_ascii: tuple | None = None
        self._by_first: tuple[np.ndarray, np.ndarray] | None = None
        self._words_below: dict[int, np.ndarray] = {}
        self._exit_marks: np.ndarray | None = None
        # Longest character count that matters for a chain: a member's, or the
        # characters before an exit or a partial character.
        self.max_chars = int(
            max(
                self.member_chars.max(initial=0),
                self.exit_chars.max(initial=0),
                self.partial_chars.max(initial=0),
            )
        )

    def to_arrays(self) -> dict:
        return {name: getattr(self, name) for name in _GROUP_FIELDS}

    @classmethod
    def build(cls, spec: GroupSpec, trie: TokenTrie) -> "TokenGroup":
        table = utf8_classifier(spec.ascii_bytes, spec.non_ascii)
        status = np.full(trie.num_nodes, _FAIL, dtype=np.int8)
        status[0] = _CLOSED
        closed_depth = np.zeros(trie.num_nodes, dtype=np.int32)
        closed_chars = np.zeros(trie.num_nodes, dtype=np.int32)  # whole characters up to closed_depth
        last_wide = np.zeros(trie.num_nodes, dtype=np.int32)  # position (1-based) of the last multi-byte one
        for depth in range(1, trie.max_depth + 1):
            lo, hi = int(trie.level_start[depth]), int(trie.level_start[depth + 1])
            parents = trie.parent[lo:hi]
            status[lo:hi] = table[status[parents], trie.byte[lo:hi]]
            now_closed = status[lo:hi] == _CLOSED
            closed_depth[lo:hi] = np.where(now_closed, depth, closed_depth[parents])
            closed_chars[lo:hi] = closed_chars[parents] + now_closed
            wide = now_closed & (closed_depth[parents] < depth - 1)
            last_wide[lo:hi] = np.where(wide, closed_chars[lo:hi], last_wide[parents])
        parent_status = np.full(trie.num_nodes, _FAIL, dtype=np.int8)
        parent_status[1:] = status[trie.parent[1:]]

        closed = np.flatnonzero(status == _CLOSED)
        closed = closed[closed > 0].astype(np.int32)
        member_ids, member_owner = trie.tokens_at_nodes(closed)
        order = np.argsort(member_ids, kind="stable")
        arrays = {
            "member_ids": member_ids[order].astype(np.int32),
            "member_chars": closed_chars[closed[member_owner[order]]].astype(np.int32),
        }

        # Exits: the first node of a path outside the group, reached from a config
        # known to be the looping one plus a short tail (an unfinished character and
        # the exit byte itself). Tokens ending inside a character are kept with their tail.
        exits = np.flatnonzero((status == _FAIL) & (parent_status != _FAIL)).astype(np.int32)
        partial = np.flatnonzero((status != _FAIL) & (status != _CLOSED))
        partial = partial[trie._node_has_tokens[partial]].astype(np.int32)
        arrays["exit_nodes"], arrays["exit_tails"], arrays["exit_lengths"] = _tails(
            trie, exits, closed_depth[trie.parent[exits]]
        )
        arrays["partial_nodes"], arrays["partial_tails"], arrays["partial_lengths"] = _tails(
            trie, partial, closed_depth[partial]
        )
        arrays["exit_chars"] = closed_chars[trie.parent[arrays["exit_nodes"]]].astype(np.int32)
        arrays["partial_chars"] = closed_chars[arrays["partial_nodes"]].astype(np.int32)
        arrays["partial_ids"], arrays["partial_owner"] = trie.tokens_at_nodes(arrays["partial_nodes"])
        # Beyond this many characters no member, exit or partial path holds a multi-byte
        # character, so a chain need not check multi-byte characters further on.
        arrays["utf8_reach"] = np.array(
            [
                max(
                    int(last_wide[closed].max(initial=0)),
                    int(last_wide[trie.parent[arrays["exit_nodes"]]].max(initial=0)),
                    int(last_wide[arrays["partial_nodes"]].max(initial=0)),
                )
            ],
            dtype=np.int32,
        )
        return cls(spec, arrays)

    def without_bytes(self, trie: TokenTrie, dead: np.ndarray) -> "TokenGroup":
        """This group less the ASCII bytes ``dead`` (a few of its own), for configurations
        where those bytes lead nowhere: a string whose pattern leaves out some signs
        (``[^<>*#.%&:]*``). Its members are this group's that hold none of them; its exits
        and partial characters are this group's whose path before them holds none. The
        paths leaving it by a dead byte are not exits: they die at that byte, so a walk
        from a configuration where the bytes are not dead must not use the group
        (``dead_bytes`` names them for the caller to check)."""
        dead_values = dead.tolist()
        in_id_order, in_chars_order = self._member_ascii_bits(trie)
        members = ~bits_holding(in_id_order, dead_values)
        exits = ~bits_holding(trie.ascii_bits(trie.parent[self.exit_nodes]), dead_values)
        partials = ~bits_holding(trie.ascii_bits(self.partial_nodes), dead_values)
        partial_tokens = partials[self.partial_owner]
        # ``compress`` rather than a boolean index: several times faster on long arrays.
        arrays = {
            "member_ids": np.compress(members, self.member_ids),
            "member_chars": np.compress(members, self.member_chars),
            "exit_chars": self.exit_chars[exits],
            "partial_chars": self.partial_chars[partials],
            # An upper bound still: fewer paths hold a multi-byte character no later.
            "utf8_reach": self.utf8_reach,
            "exit_nodes": self.exit_nodes[exits],
            "exit_tails": self.exit_tails[exits],
            "exit_lengths": self.exit_lengths[exits],
            "partial_nodes": self.partial_nodes[partials],
            "partial_tails": self.partial_tails[partials],
            "partial_lengths": self.partial_lengths[partials],
            "partial_ids": self.partial_ids[partial_tokens],
            "partial_owner": (np.cumsum(partials) - 1)[self.partial_owner[partial_tokens]].astype(np.int32),
        }
        group = TokenGroup(_spec_without(self.spec, dead), arrays)
        group.dead_bytes = _byte_array(dead)
        # This group's members in character order are this one's, fewer: no sort again.
        by_chars, _ = self._members_by_chars()
        group._by_chars = (
            np.compress(~bits_holding(in_chars_order, dead_values), by_chars),
            np.bincount(group.member_chars, minlength=1),
        )
        return group

    def _member_ascii_bits(self, trie: TokenTrie) -> tuple:
        """Each member's ASCII bytes (``TokenTrie.ascii_bits``), in id order and in
        character order: read front to back by every group made from this one."""
        if self._members_ascii is None:
            self._members_ascii = tuple(
                trie.ascii_bits(self.member_ids[order], by_token=True) for order in (slice(None), self._chars_order)
            )
        return self._members_ascii

    def prepare(self, trie: TokenTrie) -> None:
        """Make now what a chain of this group, or a group made from it without some
        bytes, reads of it on first use."""
        self._members_by_chars()
        self._member_ascii_bits(trie)

    def first_bytes(self, trie: TokenTrie) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first byte of each member, exit node and partial node (computed on first use)."""
        if self._first_bytes is None:
            node_of_token = np.zeros(max(self._top, int(trie.token_ids.max(initial=-1)) + 1), dtype=np.int32)
            node_of_token[trie.token_ids] = trie.token_nodes
            first = trie.first_bytes
            self._first_bytes = (first[node_of_token[self.member_ids]], first[self.exit_nodes], first[self.partial_nodes])
        return self._first_bytes

    def native_exits(self, trie: TokenTrie):
        """The exits as ``native.walk`` reads them (``native.group_exits``), made on first use."""
        if self._native_exits is None:
            self._native_exits = native.group_exits(
                self.exit_nodes, self.exit_chars, self.exit_tails, self.exit_lengths, self.first_bytes(trie)[1]
            )
        return self._native_exits

    def exit_walk_marks(self, trie: TokenTrie) -> np.ndarray:
        """Per trie node, what a walk that knows every member and partial token live must
        visit (the ``marks`` of ``native.walk``): 2 at the exits and every node below them,
        where tokens leave the group and are reported; 1 on the paths to the exits, passed
        through; 0 elsewhere, where only members and partial tokens lie (computed on first use)."""
        if self._exit_marks is None:
            marks = np.zeros(trie.num_nodes, dtype=np.uint8)
            along = distinct(trie.parent[self.exit_nodes])
            while len(along := along[(along > 0) & (marks[along] == 0)]):
                marks[along] = 1
                along = distinct(trie.parent[along])
            marks[self.exit_nodes] = 2
            # Nodes are numbered breadth first: a level's parents are marked before it.
            for depth in range(2, trie.max_depth + 1):
                low, high = int(trie.level_start[depth]), int(trie.level_start[depth + 1])
                below_exit = marks[trie.parent[low:high]] == 2
                marks[low:high][below_exit] = 2
            marks.flags.writeable = False
            self._exit_marks = marks
        return self._exit_marks

    def members_along(self, chain: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """(ids, their packed words, (configurations, counts)) of the members a chain
        (configuration after 0, 1, ... characters) keeps live, fewest characters first: the
        first ``counts[0]`` members lead to ``configurations[0]``, the next ``counts[1]`` to
        ``configurations[1]``, and so on (``np.repeat`` of the two; kept apart, since only a
        token budget asks for them). Once a chain dies it stays dead, so these are the
        members of fewer characters than its first dead entry; their words are kept per such
        count (at most ``max_chars + 1`` of them)."""
        ids, members_of_count = self._members_by_chars()
        dead = np.flatnonzero(chain == DEAD)
        live_counts = min(int(dead[0]) if len(dead) else len(chain), len(members_of_count))
        runs = members_of_count[:live_counts]
        live_ids = ids[: int(runs.sum())]
        words = self._words_below.get(live_counts)
        if words is None:
            words = self._words_below[live_counts] = pack_ids(live_ids, self._top)
        return live_ids, words, (chain[:live_counts].copy(), runs)

    def _members_by_chars(self) -> tuple[np.ndarray, np.ndarray]:
        """(member ids, fewest characters first, ids in order among equals; how many
        members have each character count)."""
        if self._by_chars is None:
            self._by_chars = (self.member_ids[self._chars_order], np.bincount(self.member_chars, minlength=1))
        return self._by_chars

    @cached_property
    def _chars_order(self) -> np.ndarray:
        return np.argsort(self.member_chars, kind="stable")

    def _partials_surely_live(self, automaton, config: int, chain: np.ndarray | None):
        """Whether every partial character's start configuration surely keeps it live
        (``characters_surely_live``): True, False, or per partial row where they differ."""
        if chain is None:
            return characters_surely_live(automaton, config, self.spec)
        counts = self._partial_counts
        starts = chain[counts].tolist()
        verdicts = {start: characters_surely_live(automaton, start, self.spec) for start in set(starts)}
        # A chain's partial characters start from a configuration or two: one verdict.
        if all(verdicts.values()):
            return True
        if not any(verdicts.values()):
            return False
        return np.isin(self.partial_chars, counts[np.array([verdicts[start] for start in starts])])

    @cached_property
    def chain_counts(self) -> np.ndarray:
        """The character counts a chain's configuration is read at by ``exits_from``."""
        return distinct(np.concatenate([self.exit_chars, self.partial_chars]))

    @cached_property
    def _partial_counts(self) -> np.ndarray:
        """The character counts before partial characters (a few: tokens are short)."""
        return distinct(self.partial_chars)

    @cached_property
    def _all_deferred(self) -> np.ndarray:
        return _read_only(np.full(len(self.partial_nodes), DEFERRED, dtype=np.int32))

    @cached_property
    def _all_deferred_tokens(self) -> np.ndarray:
        return _read_only(np.full(len(self.partial_ids), DEFERRED, dtype=np.int32))

    @cached_property
    def _partial_positions(self) -> np.ndarray:
        return _read_only(np.arange(len(self.partial_ids), dtype=np.intp))

    def member_words_without_first(self, trie: TokenTrie, values: np.ndarray) -> np.ndarray:
        """Packed words of the members whose first byte is not one of ``values`` (their
        ids, when asked for, are unpacked from these: only a token budget reads them)."""
        key = _byte_key(values)
        found = self._words_without.get(key)
        if found is None:
            found = self.member_words
            for value in key:
                found = found & ~self._words_starting_with(trie, value)
            _keep_for_byte_set(self._words_without, key, found)
        return found

    def _words_starting_with(self, trie: TokenTrie, value: int) -> np.ndarray:
        """Packed words of the members whose first byte is ``value`` (kept per byte: at most
        128 of them, as only ASCII bytes are excepted)."""
        found = self._words_by_first.get(value)
        if found is None:
            if self._by_first is None:
                first = self.first_bytes(trie)[0]
                order = np.argsort(first, kind="stable")
                starts = np.concatenate([[0], np.cumsum(np.bincount(first, minlength=256))])
                self._by_first = (self.member_ids[order], starts)
            by_first, starts = self._by_first
            found = self._words_by_first[value] = pack_ids(by_first[starts[value] : starts[value + 1]], self._top)
        return found

    def exits_from(
        self, automaton, config, chain: np.ndarray | None = None, *, trie: TokenTrie | None = None,
        skip_first: np.ndarray | None = None, defer_partials: bool = False, ends_read: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, "DeferredEnds | None"]:
        """For a config that loops on the group, live only: exit nodes and their configs,
        tokens ending inside a character and their configs, and the deferred ones.

        With ``chain`` (the configuration after 0, 1, 2, ... characters of the group,
        DEAD-padded to ``max_chars + 1``), each tail starts from the chain
        configuration of the characters before it instead of ``config``. Paths whose
        first byte is one of ``skip_first`` (with the group's ``trie``) are left out.

        With ``defer_partials``, a token ending inside a character is live without
        stepping into the character wherever every multi-byte character surely leads its
        start somewhere live (``automaton.utf8_agrees``): its configuration is ``DEFERRED``
        and the returned ``DeferredEnds`` computes it on request. The configurations
        inside characters are most of the new ones at a string's start, and only a token
        budget reads them (``advance`` steps the token's bytes itself). Without
        ``ends_read`` (nothing will ask), no ``DeferredEnds`` is made where every partial
        token is deferred.
        """
        partial_ids, partial_owner = self.partial_ids, self.partial_owner
        # Paths starting with a skipped byte are not the chain's: their tails would run
        # from a chain configuration they never reach, and are dropped.
        skipped = _byte_flags(skip_first) if skip_first is not None and len(skip_first) > 0 else None
        exit_nodes, exit_configs = self._live_exits(automaton, config, chain, skipped, trie)
        partial_tails, partial_lengths = self.partial_tails, self.partial_lengths
        deferred_tails = None  # (starts, tails, lengths) of the partial rows left unstepped
        sure = self._partials_surely_live(automaton, config, chain) if defer_partials and len(partial_ids) else False
        if sure is True:
            # Every partial token is live and deferred but those skipped: arrays that depend
            # on the skipped first bytes alone.
            ids, ends, positions, tail_of_token = (
                (partial_ids, self._all_deferred_tokens, self._partial_positions, partial_owner)
                if skipped is None else self._partials_without_first(trie, skip_first)
            )
            if not ends_read:
                return exit_nodes, exit_configs, ids, ends, None
            deferred = DeferredEnds(
                automaton, self._partial_starts(config, chain), partial_tails, partial_lengths, positions=positions,
                tail_of_token=tail_of_token, characters=self._characters_of(config, chain),
            )
            return exit_nodes, exit_configs, ids, ends, deferred
        partial_starts = self._partial_starts(config, chain)
        if sure is False:
            partial_configs = _run_tails(automaton, partial_starts, partial_tails, partial_lengths)
        else:
            starts = np.broadcast_to(np.asarray(partial_starts, dtype=np.int32), partial_lengths.shape)
            deferred_tails = (starts[sure], partial_tails[sure], partial_lengths[sure])
            partial_configs = self._all_deferred.copy()
            partial_configs[~sure] = _run_tails(automaton, starts[~sure], partial_tails[~sure], partial_lengths[~sure])
        token_configs = partial_configs[partial_owner] if len(partial_ids) else partial_configs[:0]
        partial_live = token_configs != DEAD
        if skipped is not None and len(partial_ids):
            partial_live &= ~skipped[self._partial_token_first_bytes(trie)]
        deferred = None
        if deferred_tails is not None:
            returned_configs = token_configs[partial_live]
            rows = partial_owner[partial_live][returned_configs == DEFERRED]
            deferred = DeferredEnds(
                automaton, *deferred_tails, positions=np.flatnonzero(returned_configs == DEFERRED),
                tail_of_token=(np.cumsum(sure) - 1)[rows], characters=self._characters_of(config, chain),
            )
        return exit_nodes, exit_configs, partial_ids[partial_live], token_configs[partial_live], deferred

    def deferred_partial_ids(
        self, automaton, config: int, chain: np.ndarray | None, trie: TokenTrie, skip_first: np.ndarray | None
    ) -> np.ndarray | None:
        """The ids of the tokens ending inside a character (but those whose first byte is one
        of ``skip_first``) where each is surely live from its start (``exits_from``'s
        deferred ones, all of them), else None."""
        if len(self.partial_ids) and self._partials_surely_live(automaton, config, chain) is not True:
            return None
        if skip_first is None or not len(skip_first):
            return self.partial_ids
        return self._partials_without_first(trie, skip_first)[0]

    def _partial_starts(self, config: int, chain: np.ndarray | None):
        """Where each partial row's tail starts: ``config``, or along ``chain`` its count's."""
        return config if chain is None else chain[self.partial_chars]

    def _characters_of(self, config: int, chain: np.ndarray | None) -> tuple:
        """``DeferredEnds``'s ``characters``: where partial characters start (a few: the
        chain's configurations at the counts before them) and the byte whose way every
        whole character goes from there."""
        return (config,) if chain is None else chain[self._partial_counts], self.spec.character_byte

    def _partials_without_first(
        self, trie: TokenTrie, skip_first: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For partial tokens all deferred, those whose first byte is not skipped: (their
        ids, their DEFERRED ends, their positions among them, the index of each one's tail);
        kept for a few sets of skipped bytes (a key position's known keys' first letters
        recur)."""
        key = _byte_key(skip_first)
        found = self._partials_without.get(key)
        if found is None:
            live = ~_byte_flags(skip_first)[self._partial_token_first_bytes(trie)]
            ids = _read_only(self.partial_ids[live])
            found = (
                ids, _read_only(np.full(len(ids), DEFERRED, dtype=np.int32)),
                _read_only(np.arange(len(ids), dtype=np.intp)), _read_only(self.partial_owner[live]),
            )
            _keep_for_byte_set(self._partials_without, key, found)
        return found

    def _partial_token_first_bytes(self, trie: TokenTrie) -> np.ndarray:
        """The first byte of each partial token (``partial_ids``' order)."""
        if self._partial_first is None:
            self._partial_first = self.first_bytes(trie)[2][self.partial_owner]
        return self._partial_first

    def _live_exits(
        self, automaton, config: int, chain: np.ndarray | None, skipped: np.ndarray | None, trie: TokenTrie | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The exit nodes live from ``config`` (or along ``chain``, as ``exits_from`` reads it)
        and their configurations, leaving out paths whose first byte is flagged in ``skipped``."""
        if native.live_exits is not None and hasattr(automaton, "transition_table"):
            starts = np.array([config], dtype=np.int32) if chain is None else chain
            first = self.first_bytes(trie)[1] if skipped is not None else self._no_first_bytes
            live_nodes = np.empty(len(self.exit_nodes), dtype=np.int32)
            live_configs = np.empty(len(self.exit_nodes), dtype=np.int32)
            found = native.live_exits(
                automaton, np.ascontiguousarray(starts, dtype=np.int32), None if chain is None else self.exit_chars,
                self.exit_tails, self.exit_lengths, self.exit_nodes, first,
                None if skipped is None else skipped.view(np.uint8), live_nodes, live_configs,
            )
            return live_nodes[:found], live_configs[:found]
        exit_configs = _run_tails(automaton, config if chain is None else chain[self.exit_chars], self.exit_tails, self.exit_lengths)
        live = exit_configs != DEAD
        if skipped is not None:
            live &= ~skipped[self.first_bytes(trie)[1]]
        return self.exit_nodes[live], exit_configs[live]

    @cached_property
    def _no_first_bytes(self) -> np.ndarray:
        """Stand-in first bytes of the exits where none is skipped (``native.live_exits`` reads none)."""
        return _read_only(np.zeros(len(self.exit_nodes), dtype=np.uint8))


class DeferredEnds:
    """The configurations after the tokens ``exits_from`` deferred, their tails of partial
    characters run when first asked for (``resolve``). ``positions`` are where the tokens
    stand among the partial ids ``exits_from`` returned, then (``shift``) among the ids of
    the whole walk."""

    def __init__(
        self, automaton, starts, tails: np.ndarray, lengths: np.ndarray, *, positions: np.ndarray,
        tail_of_token: np.ndarray, characters: tuple[np.ndarray, int],
    ) -> None:
        """``starts``/``tails``/``lengths``: the deferred tails (``starts`` one configuration
        or one per tail); ``tail_of_token``: the index of each deferred token's tail;
        ``characters``: (the starts, or more configurations besides them, some perhaps more
        than once; an ASCII byte of the group, which leads each start where every whole
        character does, as deferring a tail required)."""
        # Weakly: masks are kept in a table weakly keyed by their automaton, which a
        # reference from here would keep alive for good.
        self._automaton = weakref.ref(automaton)
        self._starts, self._tails, self._lengths = starts, tails, lengths
        # Often the group's own array: shifted only when read.
        self._positions, self._offset = positions, 0
        self._tail_of_token = tail_of_token
        self._characters = characters

    def shift(self, offset: int) -> None:
        self._offset += offset

    @property
    def positions(self) -> np.ndarray:
        return self._positions + self._offset if self._offset else self._positions

    @property
    def nbytes(self) -> int:
        """Bytes held for the deferred tokens (the tails counted even where the group's own)."""
        arrays = (self._starts, self._tails, self._lengths, self._positions, self._tail_of_token, self._characters[0])
        return sum(array.nbytes for array in arrays if isinstance(array, np.ndarray))

    def resolve(self) -> np.ndarray:
        """The configuration after each deferred token (in the order of ``positions``)."""
        automaton = living_automaton(self._automaton)
        return _run_tails(automaton, self._starts, self._tails, self._lengths)[self._tail_of_token]

    def character_ends(self) -> np.ndarray:
        """The distinct configurations the deferred tokens reach once their last character
        is whole (at most ``MOST_BYTES_TO_FINISH_A_CHARACTER`` bytes on), without running
        their tails: where each start's whole characters lead."""
        automaton = living_automaton(self._automaton)
        starts, character_byte = self._characters
        ends = {automaton.step(start, character_byte) for start in set(np.asarray(starts).tolist()) if start >= 0}
        return distinct(np.array([end for end in ends if end >= 0], dtype=np.int32))


def living_automaton(reference: weakref.ref):
    """The automaton a weak reference held for token ends computed later (masks are kept
    in a table weakly keyed by their automaton, which a strong reference would keep alive)."""
    automaton = reference()
    if automaton is None:
        raise RuntimeError("the automaton of these token ends is gone")
    return automaton


def characters_surely_live(automaton, config: int, spec: GroupSpec) -> bool:
    """Whether every well-formed start of a multi-byte character surely leads ``config``
    somewhere live: every whole character leads where a live ASCII byte of the group does
    (``automaton.utf8_agrees``), so each byte inside a character keeps some item."""
    agrees = getattr(automaton, "utf8_agrees", None)
    ascii_byte = spec.character_byte
    return (
        agrees is not None and config != DEAD and automaton.step(config, ascii_byte) != DEAD
        and bool(agrees(config, ascii_byte))
    )


#: Most sets of excepted first bytes whose member words (each as large as the group's packed
#: words) or partial tokens past them are kept, per group.
_EXCEPTED_BYTE_SETS_KEPT = 16


#: Most groups without some dead bytes (``TokenGroup.without_bytes``, each about as large
#: as its group) kept per vocabulary.
_GROUPS_WITHOUT_KEPT = 8


def _keep_for_byte_set(kept: dict, key, value, limit: int = _EXCEPTED_BYTE_SETS_KEPT) -> None:
    """Keep ``value`` for a set of bytes, the oldest set dropped past ``limit``."""
    if len(kept) >= limit:
        kept.pop(next(iter(kept)), None)
    kept[key] = value


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _byte_key(values: np.ndarray) -> bytes:
    # A few bytes: a Python sort beats numpy's.
    return bytes(sorted(set(values.tolist())))


def _byte_flags(values: np.ndarray) -> np.ndarray:
    flags = np.zeros(256, dtype=bool)
    flags[np.asarray(values, dtype=np.intp)] = True
    return flags


def _tails(trie, nodes: np.ndarray, start_depth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes of each node's path after ``start_depth`` (at most 4), as a (n, 4) matrix and lengths."""
    lengths = (trie.depth[nodes] - start_depth).astype(np.int32)
    keep = (lengths >= 1) & (lengths <= 4)
    nodes, lengths = nodes[keep], lengths[keep]
    tails = np.zeros((len(nodes), 4), dtype=np.uint8)
    cursor = nodes.copy()
    for back in range(4):
        position = lengths - 1 - back
        active = position >= 0
        tails[active, position[active]] = trie.byte[cursor[active]]
        cursor = np.where(active, trie.parent[cursor], cursor)
    return nodes, tails, lengths


def _run_tails(automaton, start, tails: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Configurations after each tail, from ``start`` (one config, or one per tail)."""
    if np.ndim(start):
        configs = np.array(start, dtype=np.int32)
    else:
        configs = np.full(lengths.shape, start, dtype=np.int32)
    if native.run_tails is not None and hasattr(automaton, "transition_table"):
        ends = np.empty_like(configs)
        native.run_tails(
            automaton, configs, np.ascontiguousarray(tails, dtype=np.uint8),
            np.ascontiguousarray(lengths, dtype=np.int32), ends,
        )
        return ends
    for position in range(4):
        active = np.flatnonzero((lengths > position) & (configs != DEAD))
        if not len(active):
            break
        configs[active] = np.asarray(automaton.step_many(configs[active], tails[active, position]), dtype=np.int32)
    return configs


def loops_on(automaton, config: int, spec: GroupSpec, loop_bytes: np.ndarray) -> bool:
    """Whether every character of the group leads ``config`` back to itself."""
    if not loop_bytes[spec.ascii_array].all():
        return False
    return not spec.non_ascii or _utf8_leads_to(automaton, config, config, spec.character_byte)


def uniform_successor(automaton, config: int, spec: GroupSpec, successors: np.ndarray, *, wide: bool = True) -> int | None:
    """The one configuration every character of the group leads ``config`` to (DEAD if
    all die), or None when characters of the group disagree. ``successors`` are
    ``config``'s successors by the group's ASCII bytes (``spec.ascii_array``);
    ``wide=False`` leaves multi-byte characters unchecked."""
    target = int(successors[0])
    if (successors != target).any():
        return None
    if wide and spec.non_ascii and not _utf8_leads_to(automaton, config, target, spec.character_byte):
        return None
    return target


_LEADS = np.arange(0xC2, 0xF5, dtype=np.int64)
_LEAD_LOW = np.where(_LEADS == 0xE0, 0xA0, np.where(_LEADS == 0xF0, 0x90, 0x80))
_LEAD_HIGH = np.where(_LEADS == 0xED, 0x9F, np.where(_LEADS == 0xF4, 0x8F, 0xBF))
_LEAD_MISSING = np.where(_LEADS < 0xE0, 1, np.where(_LEADS < 0xF0, 2, 3))


def _utf8_leads_to(automaton, config: int, target: int, ascii_byte: int) -> bool:
    """Whether every well-formed multi-byte UTF-8 character leads ``config`` to ``target``,
    where ``ascii_byte`` leads it.

    An automaton may tell at once (``utf8_agrees``) without building the configurations
    inside the characters. Otherwise byte by byte over all characters at once: distinct
    (configuration, next byte range, bytes missing) triples are expanded with one
    ``step_many`` per byte position. A character dying on the way agrees with
    ``target == DEAD`` only.
    """
    agrees = getattr(automaton, "utf8_agrees", None)
    if agrees is not None and target != DEAD and agrees(config, ascii_byte):
        return True
    reached = np.asarray(automaton.step_many(np.full(len(_LEADS), config, dtype=np.int32), _LEADS.astype(np.uint8)))
    if target == DEAD:
        # Every lead byte must die at once: a lead byte that lives could still finish a character.
        return bool((reached == DEAD).all())
    if (reached == DEAD).any():
        return False
    pending = _distinct_triples(reached.astype(np.int64), _LEAD_LOW, _LEAD_HIGH, _LEAD_MISSING)
    while len(pending[0]):
        configs, low, high, missing = pending
        if len(configs) > 64:
            return False
        counts = high - low + 1
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        values = (np.repeat(low, counts) + offsets).astype(np.uint8)
        missing = np.repeat(missing, counts) - 1
        stepped = np.asarray(automaton.step_many(np.repeat(configs, counts).astype(np.int32), values)).astype(np.int64)
        if (stepped == DEAD).any():
            return False
        done = missing == 0
        if (stepped[done] != target).any():
            return False
        rest = ~done
        pending = _distinct_triples(stepped[rest], 0x80, 0xBF, missing[rest])
    return True


def _distinct_triples(configs, low, high, missing) -> tuple[np.ndarray, ...]:
    # One int64 key per (config, low, high, missing): configs stay below 2**40.
    low, high = np.asarray(low, dtype=np.int64), np.asarray(high, dtype=np.int64)
    keys = distinct((configs << 20) | (low << 12) | (high << 4) | missing)
    return keys >> 20, (keys >> 12) & 0xFF, (keys >> 4) & 0xFF, keys & 0xF


class GroupTables:
    """The groups of one vocabulary's trie, built (or read from the disk cache) on first use."""

    def __init__(self, vocab: TokenVocabulary) -> None:
        # A weak reference: the tables are stored in a dictionary weakly keyed by this trie.
        self._trie = weakref.ref(vocab.trie)
        self._cache_root = vocab.cache_root
        self._cache_name = vocab.fingerprint
        self._groups: dict[str, TokenGroup] = {}
        # (group name, dead bytes) -> the group without them (``without_bytes``)
        self._without: dict[tuple[str, bytes], TokenGroup] = {}
        self._lock = threading.Lock()

    @property
    def trie_alive(self) -> bool:
        """Whether the trie these groups are built from is still in use."""
        return self._trie() is not None

    def group(self, spec: GroupSpec) -> TokenGroup:
        found = self._groups.get(spec.name)
        if found is None:
            with self._lock:
                found = self._groups.get(spec.name)
                if found is None:
                    found = self._groups[spec.name] = self._load_or_build(spec)
        return found

    @property
    def all_loaded(self) -> bool:
        return len(self._groups) == len(GROUP_SPECS)

    def prepare(self) -> None:
        """Load (or build and store) every group now rather than at its first use, with
        what its first chain reads (``TokenGroup.prepare``)."""
        trie = self._trie()
        for spec in GROUP_SPECS:
            self.group(spec).prepare(trie)

    def _load_or_build(self, spec: GroupSpec) -> TokenGroup:
        root = self._cache_root
        path = None if root is None else root / f"groups-{self._cache_name}-{spec.name}-v{GROUP_FORMAT}.npz"
        if path is not None:
            try:
                with np.load(path, allow_pickle=False) as data:
                    return TokenGroup(spec, {name: data[name] for name in data.files})
            except (OSError, ValueError, KeyError, EOFError):
                pass
        group = TokenGroup.build(spec, self._trie())
        if path is not None:
            store_arrays(path, group.to_arrays())
        return group

    def best_loop_group(self, automaton, config: int, loop_bytes: np.ndarray) -> TokenGroup | None:
        """The largest group all of whose characters loop on ``config`` (``loop_bytes[b]``: byte b loops), if any."""
        if loop_bytes.sum() < 2:
            return None
        for spec in GROUP_SPECS:
            if loops_on(automaton, config, spec, loop_bytes):
                return self.group(spec)
        return None

    def near_uniform_groups(
        self, automaton, config: int, row: np.ndarray, larger_than: TokenGroup | None = None, stats: tuple | None = None
    ):
        """Groups whose characters all lead ``config`` to one live configuration other than
        ``config``, except the ASCII characters of a few first bytes (a key position next
        to known keys: any string, but a known key's first letter leads into that key),
        largest first: (group, that configuration, the excepted bytes). Only groups with
        more members than ``larger_than`` are tried. ``row`` as for ``best_uniform_group``,
        ``stats`` its ``successor_stats`` when known.
        """
        live, by_group = successor_stats(row) if stats is None else stats
        for spec, (_, target, others) in zip(GROUP_SPECS, by_group):
            if larger_than is not None and self.group(spec).member_count <= larger_than.member_count:
                break
            # At most a quarter of the bytes are exceptions, so the common successor, if
            # there is one, is the one most of them lead to.
            if live < len(spec.ascii_bytes) - spec.first_exceptions:
                continue
            if target is None or target == DEAD or target == config or others > spec.first_exceptions:
                continue
            if spec.non_ascii and not _utf8_leads_to(automaton, config, target, spec.character_byte):
                continue
            exceptions = spec.ascii_array[row[spec.ascii_array] != target]
            yield self.group(spec), target, exceptions.astype(np.uint8)

    def groups_without_dead_bytes(
        self, automaton, config: int, row: np.ndarray, larger_than: TokenGroup | None = None, stats: tuple | None = None
    ):
        """Groups whose characters all lead ``config`` to one live configuration (``config``
        itself included) but for a few ASCII bytes that lead nowhere (a string whose
        pattern leaves out some signs), largest first: (the group without those bytes, not
        made yet (``GroupWithout``), that configuration). Only groups with more than
        ``WITHOUT_BYTES_GAIN`` times the members of ``larger_than`` are tried; ``row`` and
        ``stats`` as for ``near_uniform_groups``."""
        _, by_group = successor_stats(row) if stats is None else stats
        for spec, (_, target, others) in zip(GROUP_SPECS, by_group):
            whole = self.group(spec)
            if larger_than is not None and whole.member_count <= WITHOUT_BYTES_GAIN * larger_than.member_count:
                break
            if target is None or target == DEAD or not others or others > spec.first_exceptions:
                continue
            successors = row[spec.ascii_array]
            leaving = successors != target
            if (successors[leaving] != DEAD).any():
                continue
            live_byte = int(spec.ascii_array[~leaving][0])
            if spec.non_ascii and not _utf8_leads_to(automaton, config, target, live_byte):
                continue
            yield GroupWithout(self, whole, spec.ascii_array[leaving]), target

    def group_without(self, spec: GroupSpec, dead: np.ndarray) -> TokenGroup:
        """The group of ``spec`` less the bytes ``dead`` (``TokenGroup.without_bytes``; kept
        for a few sets of bytes)."""
        key = (spec.name, _byte_key(dead))
        found = self._without.get(key)
        if found is None:
            parent = self.group(spec)
            with self._lock:
                found = self._without.get(key)
                if found is None:
                    found = parent.without_bytes(self._trie(), dead)
                    _keep_for_byte_set(self._without, key, found, _GROUPS_WITHOUT_KEPT)
        return found

    def forget_groups_without(self) -> None:
        with self._lock:
            self._without.clear()

    def best_uniform_group(
        self, automaton, config: int, row: np.ndarray, stats: tuple | None = None
    ) -> tuple[TokenGroup, int] | None:
        """The largest group whose characters all lead ``config`` to one live configuration, and that one.

        ``row`` is ``config``'s successor for every ASCII byte (by byte value; more of
        the row may follow, unread): groups are told apart by their ASCII characters.
        ``stats``: its ``successor_stats``, when known.
        """
        live, by_group = successor_stats(row) if stats is None else stats
        if live < 2:
            return None
        for spec, (successor, _, _) in zip(GROUP_SPECS, by_group):
            # Past a group with more bytes than are live, some character of it dies.
            if len(spec.ascii_bytes) > live or successor is None or successor == DEAD:
                continue
            if spec.non_ascii and not _utf8_leads_to(automaton, config, successor, spec.character_byte):
                continue
            return self.group(spec), successor
        return None


class GroupWithout:
    """A group less some dead bytes before it is made (``GroupTables.group_without``):
    what a chain of it reads (``Matcher._chain``), with the whole group's character counts
    (at least its own), so that a chain that does not hold costs no group."""

    __slots__ = ("_tables", "_parent_spec", "spec", "dead_bytes", "max_chars", "wide_chars")

    def __init__(self, tables: GroupTables, parent: TokenGroup, dead: np.ndarray) -> None:
        self._tables, self._parent_spec = tables, parent.spec
        self.spec = _spec_without(parent.spec, dead)
        self.dead_bytes = _byte_array(dead)
        self.max_chars, self.wide_chars = parent.max_chars, parent.wide_chars

    def made(self) -> TokenGroup:
        return self._tables.group_without(self._parent_spec, self.dead_bytes)


def _spec_without(spec: GroupSpec, dead: np.ndarray) -> GroupSpec:
    return _spec_without_bytes(spec, _byte_key(dead))


@lru_cache(maxsize=256)
def _spec_without_bytes(spec: GroupSpec, key: bytes) -> GroupSpec:
    # One spec per set of dead bytes, met at every configuration of a pattern leaving them
    # out: its byte array is made once.
    return GroupSpec(f"{spec.name}-without-{key.hex()}", spec.ascii_bytes - frozenset(key), spec.non_ascii)


def _byte_array(values: np.ndarray) -> np.ndarray:
    return np.frombuffer(_byte_key(values), dtype=np.uint8).astype(np.int64)


def successor_stats(row: np.ndarray) -> tuple[int, tuple]:
    """How a configuration's successors by the ASCII bytes (``row``, by byte value) fall
    by group: (how many are live, per group of ``GROUP_SPECS`` (the successor all its
    bytes lead to or None, the one more than half of them lead to or None, how many lead
    elsewhere than that one or None)). Natively (``native.successor_stats``) when built."""
    row = np.ascontiguousarray(row[:128], dtype=np.int32)
    if native.successor_stats is not None:
        return native.successor_stats(row, _GROUP_BYTE_FLAGS)
    by_group = []
    for spec in GROUP_SPECS:
        successors = row[spec.ascii_array]
        first = int(successors[0])
        common = first if bool((successors == first).all()) else None
        # A successor more than half of the bytes lead to is the middle one in order.
        middle = int(np.partition(successors, len(successors) // 2)[len(successors) // 2])
        others = int(np.count_nonzero(successors != middle))
        by_group.append((common, middle, others) if 2 * others < len(successors) else (common, None, None))
    return int(np.count_nonzero(row >= 0)), tuple(by_group)


#: Each group's ASCII bytes as 128 flags, in ``GROUP_SPECS`` order (``native.successor_stats`` reads them).
_GROUP_BYTE_FLAGS = np.array([[b in spec.ascii_bytes for b in range(128)] for spec in GROUP_SPECS], dtype=np.uint8)


# Keyed by the trie, which vocabularies resized with ``with_size`` share.
_TABLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def forget_groups_without() -> None:
    """Drop every group made without some dead bytes (``TokenGroup.without_bytes``): which
    bytes a grammar's strings leave out is learnt from the grammar, not the vocabulary."""
    with _TABLES_LOCK:
        tables = list(_TABLES.values())
    for table in tables:
        table.forget_groups_without()


def group_tables_for(vocab: TokenVocabulary) -> GroupTables:
    with _TABLES_LOCK:
        tables = _TABLES.get(vocab.trie)
        if tables is None:
            tables = _TABLES[vocab.trie] = GroupTables(vocab)
        return tables
