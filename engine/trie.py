"""Token trie stored level by level as flat numpy arrays, and packed token bitsets.

Nodes are numbered breadth first: node 0 is the root (the empty prefix), then every
node of depth 1, then depth 2, and so on. Inside a level, nodes are ordered by their
parent and then by their byte, so the children of any node form one contiguous
range ``child_start[n]:child_end[n]``. This layout lets the matcher advance a whole
level of the trie through the grammar automaton with a handful of array operations.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from . import native

# States of the UTF-8 classifier that reads a trie path byte by byte: between characters
# (closed), inside one (the bytes still needed, and the range the next must fall in where
# it is narrower than 0x80..0xBF), or failed.
UTF8_CLOSED, _NEED1, _NEED2, _NEED2_A0, _NEED2_9F, _NEED3, _NEED3_90, _NEED3_8F, UTF8_FAIL = range(9)


def utf8_classifier(ascii_bytes, non_ascii: bool) -> np.ndarray:
    """The classifier's transitions (state, byte) -> state, as a (9, 256) int8 table: the
    characters are ``ascii_bytes`` and, with ``non_ascii``, every well-formed multi-byte one."""
    table = np.full((9, 256), UTF8_FAIL, dtype=np.int8)
    for value in ascii_bytes:
        table[UTF8_CLOSED, value] = UTF8_CLOSED
    if non_ascii:
        table[UTF8_CLOSED, 0xC2:0xE0] = _NEED1
        table[UTF8_CLOSED, 0xE0] = _NEED2_A0
        table[UTF8_CLOSED, 0xE1:0xED] = _NEED2
        table[UTF8_CLOSED, 0xED] = _NEED2_9F
        table[UTF8_CLOSED, 0xEE:0xF0] = _NEED2
        table[UTF8_CLOSED, 0xF0] = _NEED3_90
        table[UTF8_CLOSED, 0xF1:0xF4] = _NEED3
        table[UTF8_CLOSED, 0xF4] = _NEED3_8F
        table[_NEED1, 0x80:0xC0] = UTF8_CLOSED
        table[_NEED2, 0x80:0xC0] = _NEED1
        table[_NEED2_A0, 0xA0:0xC0] = _NEED1
        table[_NEED2_9F, 0x80:0xA0] = _NEED1
        table[_NEED3, 0x80:0xC0] = _NEED2
        table[_NEED3_90, 0x90:0xC0] = _NEED2
        table[_NEED3_8F, 0x80:0x90] = _NEED2
    return table


_ARRAY_FIELDS = (
    "parent",
    "byte",
    "depth",
    "level_start",
    "child_start",
    "child_end",
    "token_start",
    "token_ids",
)


class TokenTrie:
    """Prefix tree over the byte strings of the ordinary (non-special) tokens.

    Arrays (all int32 unless noted), ``n`` nodes:
      parent[n], byte[n] (uint8), depth[n]  -- node 0 is the root (parent -1, byte 0)
      level_start[max_depth + 2]            -- nodes of depth d are level_start[d]:level_start[d+1]
      child_start[n], child_end[n]          -- contiguous child range of every node
      token_start[n + 1], token_ids[...]    -- tokens whose bytes end exactly at the node
    """

    __slots__ = _ARRAY_FIELDS + (
        "_byte_blob", "_node_has_tokens", "token_nodes", "_first_bytes", "_subtree_tables", "_native_tables",
        "_path_ascii", "_root_children", "__weakref__",
    )

    def __init__(self, **arrays: np.ndarray) -> None:
        for name in _ARRAY_FIELDS:
            setattr(self, name, arrays[name])
        self._byte_blob = self.byte.tobytes()
        self._node_has_tokens = self.token_start[1:] > self.token_start[:-1]
        # The node each entry of ``token_ids`` ends at. Tokens are ordered by that node,
        # so the tokens of the levels ``a..b`` are the slice
        # ``token_start[level_start[a]]:token_start[level_start[b + 1]]``.
        counts = np.diff(self.token_start)
        self.token_nodes = np.repeat(np.arange(len(self.parent), dtype=np.int32), counts)
        self._first_bytes: np.ndarray | None = None
        self._subtree_tables: tuple | None = None
        self._native_tables = None
        self._path_ascii: tuple | None = None
        self._root_children: np.ndarray | None = None

    # ----------------------------------------------------------------- building
    @classmethod
    def build(cls, token_bytes: Sequence[bytes], token_ids: Sequence[int]) -> "TokenTrie":
        """Build from parallel sequences of byte strings and their token ids (empty strings are skipped)."""
        kept = [index for index, data in enumerate(token_bytes) if data]
        kept.sort(key=token_bytes.__getitem__)
        count = len(kept)
        strings = [token_bytes[index] for index in kept]
        sorted_ids = np.asarray(token_ids, dtype=np.int32)[np.asarray(kept, dtype=np.int64)]
        lengths = np.fromiter(map(len, strings), dtype=np.int32, count=count)
        max_len = int(lengths.max()) if count else 0

        # Byte matrix, one row per token padded with zeros; rows filled from one joined buffer.
        matrix = np.zeros((count, max_len), dtype=np.uint8)
        if count:
            flat = np.frombuffer(b"".join(strings), dtype=np.uint8)
            row = np.repeat(np.arange(count), lengths)
            col = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            matrix[row, col] = flat

        # Longest common prefix with the previous token in sorted order: tokens that
        # share a prefix of length d form one contiguous block, so a token opens a new
        # node at depth d exactly when this lcp is shorter than d.
        lcp = np.zeros(count, dtype=np.int32)
        if count > 1:
            differs = matrix[1:] != matrix[:-1]
            first_diff = np.where(differs.any(axis=1), differs.argmax(axis=1), max_len)
            lcp[1:] = np.minimum(first_diff, np.minimum(lengths[1:], lengths[:-1]))

        parents = [np.array([-1], dtype=np.int32)]
        node_bytes = [np.array([0], dtype=np.uint8)]
        level_start = [0, 1]
        node_at_depth = np.zeros(count, dtype=np.int32)  # node reached by each token at the current depth
        end_node = np.zeros(count, dtype=np.int32)
        active = np.arange(count)
        next_id = 1
        for depth in range(1, max_len + 1):
            active = active[lengths[active] >= depth]
            opens = lcp[active] < depth
            new_rank = np.cumsum(opens) - 1
            level_nodes = next_id + new_rank
            parents.append(node_at_depth[active[opens]])
            node_bytes.append(matrix[active[opens], depth - 1])
            node_at_depth[active] = level_nodes
            finished = active[lengths[active] == depth]
            end_node[finished] = node_at_depth[finished]
            next_id += int(opens.sum())
            level_start.append(next_id)

        parent = np.concatenate(parents)
        byte = np.concatenate(node_bytes)
        n_nodes = len(parent)
        level_start_arr = np.asarray(level_start, dtype=np.int32)
        depth_arr = np.repeat(np.arange(len(level_start_arr) - 1, dtype=np.int32), np.diff(level_start_arr))
        nodes = np.arange(n_nodes, dtype=np.int32)
        child_start = np.searchsorted(parent[1:], nodes, side="left").astype(np.int32) + 1
        child_end = np.searchsorted(parent[1:], nodes, side="right").astype(np.int32) + 1
        order = np.argsort(end_node, kind="stable")
        token_ids_arr = sorted_ids[order]
        token_start = np.searchsorted(end_node[order], np.arange(n_nodes + 1), side="left").astype(np.int32)
        return cls(
            parent=parent,
            byte=byte,
            depth=depth_arr,
            level_start=level_start_arr,
            child_start=child_start,
            child_end=child_end,
            token_start=token_start,
            token_ids=token_ids_arr,
        )

    # ------------------------------------------------------------ persistence
    def to_arrays(self, prefix: str = "trie_") -> dict[str, np.ndarray]:
        return {prefix + name: getattr(self, name) for name in _ARRAY_FIELDS}

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "trie_") -> "TokenTrie":
        return cls(**{name: np.asarray(arrays[prefix + name]) for name in _ARRAY_FIELDS})

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        return len(self.parent)

    @property
    def max_depth(self) -> int:
        return len(self.level_start) - 2

    @property
    def first_bytes(self) -> np.ndarray:
        """The first byte of every node's path (uint8; 0 for the root), computed on first use."""
        if self._first_bytes is None:
            first = self.byte.copy()
            for depth in range(2, self.max_depth + 1):
                low, high = int(self.level_start[depth]), int(self.level_start[depth + 1])
                first[low:high] = first[self.parent[low:high]]
            self._first_bytes = first
        return self._first_bytes

    @property
    def root_children(self) -> np.ndarray:
        """The root's child along each byte value, -1 where it has none (int32, 256 entries)."""
        if self._root_children is None:
            children = np.full(256, -1, dtype=np.int32)
            start, end = int(self.child_start[0]), int(self.child_end[0])
            children[self.byte[start:end]] = np.arange(start, end, dtype=np.int32)
            self._root_children = children
        return self._root_children

    def ascii_bits(self, nodes: np.ndarray, *, by_token: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The ASCII bytes of the path of each node of ``nodes``, as 128-bit sets (two
        uint64 arrays: bytes 0-63, 64-127), looked up in a table made once per trie. With
        ``by_token``, ``nodes`` are token ids instead, each standing for the node it ends
        at (ids in order read the table front to back, as their nodes would not)."""
        if self._path_ascii is None:
            # Level by level, a node's set is its parent's and its own byte.
            bits = np.zeros((self.num_nodes, 2), dtype=np.uint64)
            ascii_nodes = np.flatnonzero(self.byte < 0x80)
            ascii_nodes = ascii_nodes[ascii_nodes > 0]
            values_at = self.byte[ascii_nodes].astype(np.uint64)
            halves = (values_at >> np.uint64(6)).astype(np.intp)
            bits[ascii_nodes, halves] = np.left_shift(np.uint64(1), values_at & np.uint64(63))
            for depth in range(2, self.max_depth + 1):
                low, high = int(self.level_start[depth]), int(self.level_start[depth + 1])
                bits[low:high] |= bits[self.parent[low:high]]
            token_bits = np.zeros((int(self.token_ids.max(initial=-1)) + 1, 2), dtype=np.uint64)
            token_bits[self.token_ids] = bits[self.token_nodes]
            # Apart, each gathers faster than rows of two.
            self._path_ascii = tuple(
                np.ascontiguousarray(table[:, half]) for table in (bits, token_bits) for half in (0, 1)
            )
        low, high = self._path_ascii[2:] if by_token else self._path_ascii[:2]
        nodes = np.asarray(nodes, dtype=np.intp)
        return np.take(low, nodes), np.take(high, nodes)

    @property
    def subtree_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What a walk needs to take a node's whole subtree at once, computed on first use:
        (the bytes on the edges below each node, as four uint64 words of a 256-bit set;
        per node, the start and end in the fourth array of the tokens strictly below it;
        the token ids in depth-first order, a node's own tokens before its children's;
        per node, 1 where every token below it goes on from the node in whole, well-formed
        UTF-8 characters, else 0, as uint8).

        A walk at a configuration that every byte below a node leads back to itself
        allows every token below the node, ending at that configuration. So does one that
        every ASCII byte below and every multi-byte character lead back to itself, below a
        node whose tokens go on in whole characters."""
        if self._subtree_tables is None:
            self._subtree_tables = self._make_subtree_tables()
        return self._subtree_tables

    @property
    def native_tables(self):
        """The trie as the native walk reads it (``native.trie_tables`` of its arrays and
        ``subtree_tables``), made on first use; None without the native extension."""
        if self._native_tables is None and native.trie_tables is not None:
            self._native_tables = native.trie_tables(
                self.child_start, self.child_end, self.byte, self.token_start, self.token_ids, *self.subtree_tables
            )
        return self._native_tables

    def _make_subtree_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        num_nodes = self.num_nodes
        own_tokens = np.diff(self.token_start).astype(np.int64)
        below_bytes = np.zeros((num_nodes, 4), dtype=np.uint64)
        subtree_tokens = own_tokens.copy()
        edge_bits = np.zeros((num_nodes, 4), dtype=np.uint64)
        edge_bits[np.arange(num_nodes), self.byte >> 6] = np.left_shift(np.uint64(1), (self.byte & 63).astype(np.uint64))
        # Bottom up, a level at a time: a level's nodes are grouped by parent, so each
        # parent's children are one run of the level.
        for depth in range(self.max_depth, 0, -1):
            low, high = int(self.level_start[depth]), int(self.level_start[depth + 1])
            if low == high:
                continue
            parents = self.parent[low:high]
            runs = np.flatnonzero(_run_starts(parents))
            owners = parents[runs]
            below_bytes[owners] = np.bitwise_or.reduceat(below_bytes[low:high] | edge_bits[low:high], runs, axis=0)
            subtree_tokens[owners] += np.add.reduceat(subtree_tokens[low:high], runs)
        # Top down: a node's tokens start after its parent's own tokens and the subtrees
        # of its earlier siblings (children are ordered by byte, as tokens sort).
        offset = np.zeros(num_nodes, dtype=np.int64)
        for depth in range(1, self.max_depth + 1):
            low, high = int(self.level_start[depth]), int(self.level_start[depth + 1])
            if low == high:
                continue
            parents = self.parent[low:high]
            sizes = subtree_tokens[low:high]
            before = np.cumsum(sizes) - sizes
            starts = _run_starts(parents)
            run_of = np.cumsum(starts) - 1
            offset[low:high] = offset[parents] + own_tokens[parents] + before - before[np.flatnonzero(starts)][run_of]
        depth_first = np.empty(len(self.token_ids), dtype=np.int32)
        rank = np.arange(len(self.token_ids), dtype=np.int64) - np.repeat(self.token_start[:-1].astype(np.int64), own_tokens)
        depth_first[offset[self.token_nodes] + rank] = self.token_ids
        below_start = (offset + own_tokens).astype(np.int32)
        below_end = (offset + subtree_tokens).astype(np.int32)
        return below_bytes, below_start, below_end, depth_first, self._whole_character_tails()

    def _whole_character_tails(self) -> np.ndarray:
        # Bottom up: ok[n, s] holds when, reading on from node n in classifier state s,
        # every token below n ends between characters and no byte fails.
        table = utf8_classifier(range(128), True)[:UTF8_FAIL]
        ok = np.ones((self.num_nodes, UTF8_FAIL), dtype=bool)
        has_tokens = np.diff(self.token_start) > 0
        for depth in range(self.max_depth, 0, -1):
            low, high = int(self.level_start[depth]), int(self.level_start[depth + 1])
            if low == high:
                continue
            after = table[:, self.byte[low:high]].astype(np.intp)  # (state, child) -> state
            failed = after == UTF8_FAIL
            nodes = np.arange(low, high)
            child_ok = ~failed & ok[nodes, np.where(failed, 0, after)]
            child_ok &= ~has_tokens[low:high] | (after == UTF8_CLOSED)
            parents = self.parent[low:high]
            runs = np.flatnonzero(_run_starts(parents))
            ok[parents[runs]] = np.logical_and.reduceat(child_ok, runs, axis=1).T
        return ok[:, UTF8_CLOSED].astype(np.uint8)

    def child(self, node: int, byte: int) -> int:
        """The child of ``node`` along ``byte``, or -1."""
        start, end = self.child_start[node], self.child_end[node]
        found = self._byte_blob.find(bytes((byte,)), start, end)
        return found

    def tokens_at(self, node: int) -> np.ndarray:
        return self.token_ids[self.token_start[node] : self.token_start[node + 1]]

    def has_tokens(self, node: int) -> bool:
        return bool(self._node_has_tokens[node])

    def descend(self, data: bytes, node: int = 0) -> list[int]:
        """Nodes visited along ``data`` from ``node`` (excluding it); shorter if the path leaves the trie."""
        path = []
        for value in data:
            node = self.child(node, value)
            if node < 0:
                break
            path.append(node)
        return path

    def tokens_at_nodes(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All tokens ending at ``nodes``: (token ids, index into ``nodes`` of the node each ends at)."""
        starts = self.token_start[nodes]
        counts = self.token_start[nodes + 1] - starts
        total = int(counts.sum())
        if total == 0:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty
        owner = np.repeat(np.arange(len(nodes), dtype=np.int32), counts)
        offsets = np.arange(total, dtype=np.int32) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.token_ids[starts[owner] + offsets], owner

    def expand_children(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Children of all ``nodes``: (child node ids, index into ``nodes`` of each child's parent)."""
        starts = self.child_start[nodes]
        counts = self.child_end[nodes] - starts
        total = int(counts.sum())
        if total == 0:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty
        owner = np.repeat(np.arange(len(nodes), dtype=np.int32), counts)
        children = np.arange(total, dtype=np.int32) - np.repeat(np.cumsum(counts) - counts - starts, counts)
        return children.astype(np.int32), owner


# ------------------------------------------------------------------- helpers
def _run_starts(parents: np.ndarray) -> np.ndarray:
    """Where each run of siblings starts in a level's parents (grouped by parent)."""
    return np.concatenate(([True], parents[1:] != parents[:-1]))


#: Fewest values ``distinct`` counts instead of sorting (below, sorting is as fast).
_COUNTED_DISTINCT = 8192


def distinct(values: np.ndarray, *, return_inverse: bool = False):
    """Sorted distinct values (and, optionally, each value's index among them).

    ``np.unique`` imports ``numpy.ma`` on its first call (tens of milliseconds, paid by
    the first mask of a process); this sort-based equivalent does not. The inverse
    does not depend on the order of equal values, so neither sort needs to be stable
    (a stable sort of int32 is several times slower).
    """
    values = np.asarray(values).reshape(-1)
    if not return_inverse and len(values) >= _COUNTED_DISTINCT and values.dtype.kind in "iu":
        # Many small non-negative values (the states a wide mask's tokens lead to): a
        # count per value is several times faster than sorting them.
        low, high = int(values.min()), int(values.max())
        if low >= 0 and high < 4 * len(values):
            return np.flatnonzero(np.bincount(values)).astype(values.dtype, copy=False)
    if return_inverse:
        order = np.argsort(values)
        ordered = values[order]
    else:
        ordered = np.sort(values)
    starts = np.ones(len(ordered), dtype=bool)
    if len(ordered) > 1:
        np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    found = ordered[starts]
    if not return_inverse:
        return found
    inverse = np.empty(len(values), dtype=np.intp)
    inverse[order] = np.cumsum(starts) - 1
    return found, inverse


#: The ASCII bytes in order: the part of a row that token groups and questions about one or
#: two live bytes read first, leaving the configurations inside multi-byte characters
#: unbuilt until something steps there.
ASCII_BYTES = np.arange(128, dtype=np.intp)


# ------------------------------------------------------------------- bitsets
def ascii_words(values) -> tuple[np.uint64, np.uint64]:
    """The ASCII bytes ``values`` as a 128-bit set (``TokenTrie.ascii_bits``'s form)."""
    words = [0, 0]
    for value in values:
        if not 0 <= value < 0x80:
            raise ValueError(f"an ASCII byte set takes bytes below 128, not {value}")
        words[value >> 6] |= 1 << (value & 63)
    return np.uint64(words[0]), np.uint64(words[1])


def bits_holding(ascii_bits: tuple[np.ndarray, np.ndarray], values) -> np.ndarray:
    """Where 128-bit sets of ASCII bytes (``TokenTrie.ascii_bits``) hold any of ``values``."""
    low, high = ascii_bits
    wanted = ascii_words(values)
    found = low & wanted[0]
    if wanted[1]:
        found = found | (high & wanted[1])
    return found != 0


def words_for(size: int) -> int:
    """Number of 32-bit words of a packed bitset over ``size`` token ids."""
    return (size + 31) >> 5


def pack_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """Packed little-endian bitset (uint32 words): bit i of word i >> 5 set for each id."""
    if native.set_bits is None and len(ids) > 64:
        flags = np.zeros(words_for(size) * 32, dtype=bool)
        flags[ids] = True
        return np.packbits(flags, bitorder="little").view("<u4")
    words = np.zeros(words_for(size), dtype="<u4")
    set_ids(words, ids)
    return words


def set_ids(words: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of ``ids`` in packed ``words`` (uint32, ``pack_ids``'s layout), in place."""
    if native.set_bits is not None:
        native.set_bits(np.ascontiguousarray(ids, dtype=np.int32), words)
        return
    ids = np.asarray(ids)
    if len(ids) > 64:
        # Without the extension many ids pack faster as flags.
        words |= pack_ids(ids, len(words) * 32)
        return
    np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))


def unpack_ids(words: np.ndarray, size: int) -> np.ndarray:
    """The sorted ids whose bits are set in ``words`` (``pack_ids`` undone)."""
    if native.bit_ids is not None:
        words = np.ascontiguousarray(words, dtype="<u4")
        # Words may stop short of ``size`` (a token group's end at its last member).
        room = min(size, len(words) * 32)
        out = getattr(_UNPACKED, "ids", None)
        if out is None or len(out) < room:
            # Reused: a fresh array of every id's room would cost more than most unpackings.
            out = _UNPACKED.ids = np.empty(room, dtype=np.int32)
        return out[: native.bit_ids(words, room, out)].copy()
    nonzero = np.flatnonzero(words)
    if len(nonzero) * _SPARSE_WORDS < len(words):
        # Few words set (a mask of keys, a check's candidates): expand only those.
        bits = np.unpackbits(words[nonzero].astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
        rows, columns = np.nonzero(bits)
        ids = nonzero[rows] * 32 + columns
        return ids[ids < size].astype(np.int32)
    flags = np.unpackbits(words.view(np.uint8), bitorder="little")[:size]
    return np.flatnonzero(flags).astype(np.int32)


_UNPACKED = threading.local()

# Below one set word in this many, unpacking expands the set words alone.
_SPARSE_WORDS = 8
