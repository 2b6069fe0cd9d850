"""The incremental matcher: which tokens may come next, advancing, forced tokens, token budget.

A ``Matcher`` tracks one output sequence of one grammar over one vocabulary. Its
state is a configuration of the grammar's byte automaton (``grammar.automaton``).

Masks. The allowed tokens of a configuration are found by walking the vocabulary's
token trie level by level: a whole level of (trie node, configuration) pairs goes
through ``automaton.step_many`` in one call, pairs that die are dropped together with
their subtrees, and tokens ending at surviving nodes are allowed. Where most of the
vocabulary stays live (free text, object keys next to known ones) whole levels are
stepped at once, dead nodes included, which saves the compaction. While only one byte
can follow (a literal such as ``{"name": "``) the walk descends the trie along that
byte alone. Where a configuration loops on every byte of a precomputed token group
(the tokens inside a JSON string, digits, ...) the whole group is allowed at once and
the walk only visits the trie nodes where tokens leave the group. The same shortcut
covers configurations that every character of a group moves along one chain (the
counter of a string with ``maxLength``, a bounded run of digits): a member token of
``k`` characters ends at the ``k``-th configuration of the chain, so members are
decided by their character count. Where no chain holds but every string of a group's
characters stays live (a word searched for inside a string), the group is allowed whole
unstepped and only the paths leaving it are walked; a token budget bounds the unstepped
tokens by the configurations the group's characters lead to. Without a budget or token
hooks nothing reads where a token leads, and a mask keeps its bits alone (a group's
members' words with the bits of the tokens its walks find). Results are cached per
configuration as packed bitsets, shared by every matcher (and clone) of the same grammar
and vocabulary, in an LRU bounded by ``MASK_CACHE_BYTES``. The chains (at most
``max_chars + 1`` ids, about 100 for real vocabularies) and token-path costs are kept per
configuration, so they grow with the automaton, whose own transition table is larger (256
ids per configuration) and bounded by ``automaton.MAX_CONFIGS``.

Text checks. A grammar may carry a ``text_check``, a stateful condition no grammar can
express (``uniqueItems``): ``initial()``, ``feed(state, data)`` (the new state, or None
once the text is lost) and ``trigger_bytes(state)`` (a token without any of these bytes
cannot fail; empty: any token can; None: none can). Optionally ``trigger_in_order(state)`` (bytes a
token must also hold in that order to fail, or None) and ``refused_among(state, datas)``
(the indices ``feed`` refuses, answered in one call). The cached mask of a
configuration stays as it is; the allowed tokens holding the triggers are fed to the
check against the live text and dropped if refused, so only the few tokens that can
complete an item pay for it.

Token budget (``max_tokens``). ``min_tokens_to_finish`` is the length of a concrete
token path to an accepting configuration: take a short byte completion (the automaton's
``bound_completion``, the static path of its completion bound, else its ``completion``:
a shortest one where its lower bound leads the way or the exact search finds one
quickly), then the
longest token that spells its start, the longest that spells what follows, and so on.
The path is always available, so a mask that drops every token after which this count
exceeds the tokens left keeps a valid completion within reach at every step, and the
output always ends complete inside the budget. Costs are kept per configuration; a
mask's check reads the distinct states its tokens lead to (a token group allowed whole
leads to one per character count), not every token's.

A cost is also never more than the automaton's ``completion_bound`` (the bytes of a
completion known from static distances, spelled with the bytes that are tokens by
themselves, one token each), and that path too keeps a completion within reach: its
first byte's token leads to a bound one less. While every state a mask's tokens lead to
has a bound within the tokens left, which is most steps of a budget that does not bind
yet, the check reads only these bounds and searches no completion.
"""

from __future__ import annotations

import enum
import operator
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from . import native
from .errors import TokenBudgetError
from .token_groups import (
    DEFERRED, GROUP_SPECS, MOST_BYTES_TO_FINISH_A_CHARACTER, DeferredEnds, characters_surely_live, group_tables_for,
    living_automaton, successor_stats, uniform_successor,
)
from .trie import ASCII_BYTES, distinct, pack_ids, set_ids, unpack_ids, words_for
from .vocab import TokenVocabulary

DEAD = -1
UNREACHABLE = 1 << 40
#: A chain entry counted on but not made yet (``Matcher._chain``): ``_LAZY - j`` stands
#: for entry ``j``'s configuration with every count higher by the entries between.
_LAZY = -16
#: The configuration after a token a walk allowed without stepping it, every member of a
#: group being live (``Matcher._live_group``; see ``UnwalkedEnds``).
_UNWALKED = -4
#: Most configurations a group's characters may lead to from one where every member of the
#: group is checked live (``Matcher._live_closure``): each is built and its row read.
LIVE_CLOSURE_LIMIT = 32
#: Costs kept per token are int32: any cost past this fits no budget anyway.
_COST_CEILING = np.iinfo(np.int32).max
_ALL_BYTES = np.arange(256, dtype=np.uint8)

# The level walk costs a dozen array operations per trie level; below this many
# (node, config) pairs a depth-first walk over live bytes is cheaper, for at most
# this many node visits before handing the rest back to the level walk.
_SPARSE_FRONTIER = 8
_SPARSE_BUDGET = 256
# Below a trie node with at most this many children, the depth-first walk steps each
# child instead of asking for the configuration's whole row of successors.
_FEW_CHILDREN = 8
# Where at least this fraction of a trie level is live, stepping the whole level
# (dead nodes included) beats compacting the live ones out: a level then costs two
# gathers instead of a dozen array operations, and no index arithmetic.
_WIDE_FRACTION = 0.2
# A token group holding at least 1/this of the vocabulary is used even where the
# whole-level walk could run.
_GROUP_WALK_SHARE = 8
# Where the best group whose characters all agree holds less than 1/this of the
# vocabulary, a larger group whose characters agree but for a few first bytes is
# looked for.
_LARGE_GROUP_SHARE = 4
# Masks of fewer tokens than this find a text check's candidates by their ids, larger
# ones by their packed words.
_FEW_CHECKED = 1024

# Memory bound of the mask cache of one (grammar, vocabulary) pair.
MASK_CACHE_BYTES = 64 * 1024 * 1024


class Status(enum.Enum):
    ACCEPTED = "accepted"
    FINISHED = "finished"
    REJECTED = "rejected"


def _member_ends(ends) -> np.ndarray | int:
    """The state each member of a group allowed whole leads to, from a ``MaskEntry`` base."""
    if isinstance(ends, tuple):
        return np.repeat(_made(ends[0]), ends[1])
    return ends


def _make_lazy_entries(automaton, chain: np.ndarray, positions: np.ndarray | None = None) -> None:
    """Make ``chain``'s ``_LAZY`` entries at ``positions`` (all when None), in place."""
    where = np.flatnonzero(chain <= _LAZY) if positions is None else positions[chain[positions] <= _LAZY]
    if not len(where):
        return
    # A lazy entry names the made entry it counts on from, never another lazy one.
    bases = _LAZY - chain[where]
    count_shifted = automaton.count_shifted
    chain[where] = [
        count_shifted(base_config, shift)
        for base_config, shift in zip(chain[bases].tolist(), (where - bases).tolist())
    ]


class ChainStates:
    """The configurations a group's members lead to by character count, some of them
    counted on and made only when first read (a token budget reads them)."""

    __slots__ = ("_automaton", "_states")

    def __init__(self, automaton, states: np.ndarray) -> None:
        # Weakly, as ``DeferredEnds`` holds its automaton.
        self._automaton = weakref.ref(automaton)
        self._states = states

    @property
    def nbytes(self) -> int:
        return self._states.nbytes

    @property
    def lazy(self) -> bool:
        """Whether some configuration is still counted on, not made."""
        return bool((self._states <= _LAZY).any())

    def made(self) -> np.ndarray:
        _make_lazy_entries(living_automaton(self._automaton), self._states)
        return self._states

    def made_or_counted_from(self, counts: np.ndarray) -> np.ndarray:
        """For the character counts that have members (``counts > 0``): the configuration
        made, or for one still counted on, the made one it counts on from, whose bound is
        at least as large (between a counted repetition's bounds a count further on owes
        no more iterations); none made."""
        states = self._states
        wanted = states[counts > 0]
        lazy = wanted <= _LAZY
        if lazy.any():
            wanted = np.where(lazy, states[_LAZY - np.minimum(wanted, _LAZY)], wanted)
        return wanted


class UnwalkedEnds:
    """Where the members of a group allowed whole as live lead, unwalked (``Matcher._live_group``):
    among ``reach``, the configurations the group's characters lead to from the mask's own
    (sorted). With ``partials``, tokens ending inside a character were allowed unwalked too;
    each such character leads from one of ``reach`` to another. A token budget bounds them
    by these; where the bounds do not fit, the mask is walked again with every state.
    ``reach`` is None where the walk set the tokens' bits alone (``_BITS_ONLY``): nothing
    bounds them, and a budget walks the mask again."""

    __slots__ = ("reach", "partials")

    def __init__(self, reach: np.ndarray | None, partials: bool) -> None:
        self.reach = reach
        self.partials = partials


#: The ends of a mask whose walk set its tokens' bits without their configurations (no
#: budget or token hooks read them: ``advance`` steps a token's bytes itself).
_BITS_ONLY = UnwalkedEnds(None, False)


def _loops_one_character_in(chain: np.ndarray) -> bool:
    """Whether a chain stays at one live configuration from its first character on."""
    return chain[1] != DEAD and bool((chain[1:] == chain[1]).all())


def _made(states) -> np.ndarray:
    return states.made() if isinstance(states, ChainStates) else states


def _member_ids(base: tuple) -> np.ndarray:
    """The ids of a ``MaskEntry`` base's members (unpacked from its words when not kept)."""
    ids, words = base[0], base[1]
    return ids if ids is not None else unpack_ids(words, len(words) * 32)


class MaskEntry:
    """Allowed tokens of one state: the packed bitset, and lazily the sorted ids and the state each leads to.

    ``ids``/``ends`` are the tokens found by the walk (distinct, any order); ``base``
    is an optional part of a token group allowed as a whole: (member ids, or None where
    only a token budget would read them and they are unpacked from the words then; their
    packed words; the state every member leads to or (states, counts): the first
    ``counts[0]`` members lead to ``states[0]``, and so on, as ``TokenGroup.members_along``
    gives them). ``deferred`` computes the ends the walk left ``DEFERRED`` (see
    ``TokenGroup.exits_from``), when ``ends`` or ``distinct_ends`` first need them.
    """

    __slots__ = (
        "size", "words", "max_end_cost", "end_costs", "end_table", "_found_ids", "_found_ends", "_base", "_ids",
        "_ends", "_deferred",
    )

    def __init__(self, size: int, ids: np.ndarray, ends=None, base: tuple | None = None, deferred=None) -> None:
        self.size = size
        # A number no allowed token's cost exceeds.
        self.max_end_cost: int | None = None
        # Each allowed token's cost or a number it does not exceed (int32, aligned with
        # ``ids``), and what a matcher keeps to make it (``Matcher._end_costs``), kept by
        # matchers whose costs depend on the state alone once a budget binds here.
        self.end_costs: np.ndarray | None = None
        self.end_table: tuple | None = None
        self._found_ids = np.asarray(ids, dtype=np.int32)
        self._found_ends = ends
        self._base = base
        self._deferred = deferred or None
        self._ids: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        if base is None:
            self.words = pack_ids(self._found_ids, size)
            return
        if base[2] is _BITS_ONLY and not len(self._found_ids):
            # The walk's own words, made for this mask.
            self.words = base[1]
            return
        words = np.zeros(words_for(size), dtype=np.uint32)
        words[: len(base[1])] = base[1]
        set_ids(words, self._found_ids)
        self.words = words

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            if self._base is None and len(self._found_ids) < 4096:
                self._ids = np.sort(self._found_ids)
            else:
                self._ids = unpack_ids(self.words, self.size)
        return self._ids

    def ids_if_few(self, limit: int) -> np.ndarray | None:
        """``ids`` when fewer than ``limit`` tokens are allowed (no group allowed whole), else None."""
        if self._base is None and len(self._found_ids) < limit:
            return self.ids
        return None

    @property
    def ends(self) -> np.ndarray:
        self._require_walked()
        if self._ends is None:
            end_of = np.full(self.size, DEAD, dtype=np.int32)
            if self._base is not None:
                end_of[_member_ids(self._base)] = _member_ends(self._base[2])
            if len(self._found_ids):
                end_of[self._found_ids] = self._resolved_found_ends()
            self._ends = end_of[self.ids]
        return self._ends

    def _resolved_found_ends(self) -> np.ndarray:
        """The walk's ends with the deferred ones computed (once; the same every time)."""
        deferred = self._deferred
        if deferred is not None:
            ends = np.array(self._found_ends, dtype=np.int32)
            for part in deferred:
                ends[part.positions] = part.resolve()
            self._found_ends = ends
            self._deferred = None
        return self._found_ends

    @property
    def ends_walked(self) -> bool:
        """Whether the walk stepped every allowed token (False where a group was allowed
        whole as live, its members' configurations unknown; see ``Matcher._live_group``)."""
        return self.unwalked is None

    @property
    def unwalked(self) -> UnwalkedEnds | None:
        member_ends = None if self._base is None else self._base[2]
        return member_ends if isinstance(member_ends, UnwalkedEnds) else None

    def _require_walked(self) -> None:
        if self.unwalked is not None:
            raise RuntimeError("the states of this mask's tokens were not walked: walk it again with them")

    @property
    def unresolved(self) -> bool:
        """Whether some allowed tokens' states are not computed yet: deferred ones inside
        characters, or members' along a chain that counts on."""
        member_ends = None if self._base is None else self._base[2]
        return bool(self._deferred) or self.unwalked is not None or (
            isinstance(member_ends, tuple) and isinstance(member_ends[0], ChainStates) and member_ends[0].lazy
        )

    @property
    def deferred(self) -> list | None:
        """The ``DeferredEnds`` of the tokens whose states are not computed yet (None when
        there are none, or no longer)."""
        return self._deferred

    def distinct_ends(self, *, resolve: bool = True) -> np.ndarray:
        """The distinct states the allowed tokens lead to, without building ``ends`` (a
        group allowed whole leads to a few states, one per character count). Without
        ``resolve``, those of the deferred tokens are left out (and left uncomputed), and an
        unwalked group's members stand for the states they lead among (``UnwalkedEnds``)."""
        if resolve:
            self._require_walked()
        if not len(self._found_ids):
            parts = []
        elif resolve or (self._deferred is None and self.unwalked is None):
            parts = [self._resolved_found_ends()]
        else:
            found = np.asarray(self._found_ends)
            parts = [found[found >= 0]]
        if self._base is not None:
            member_ends = self._base[2]
            if isinstance(member_ends, UnwalkedEnds):
                if member_ends.reach is not None:
                    parts.append(member_ends.reach)
            elif isinstance(member_ends, tuple):
                states, counts = member_ends
                if resolve or not isinstance(states, ChainStates):
                    parts.append(_made(states)[counts > 0])
                else:
                    parts.append(states.made_or_counted_from(counts))
            else:
                parts.append(np.array([member_ends], dtype=np.int32))
        if not parts:
            return np.zeros(0, dtype=np.int32)
        return distinct(np.concatenate(parts) if len(parts) > 1 else parts[0])

    @property
    def nbytes(self) -> int:
        total = self.words.nbytes + self._found_ids.nbytes + 96
        if isinstance(self._found_ends, np.ndarray):
            total += self._found_ends.nbytes
        member_ends = None if self._base is None else self._base[2]
        if isinstance(member_ends, tuple):
            total += member_ends[0].nbytes  # the group's ids, words and counts are shared, its states are not
        elif isinstance(member_ends, UnwalkedEnds) and member_ends.reach is not None:
            total += member_ends.reach.nbytes
        # Counted when stored, most entries have made nothing on demand yet.
        if self._ids is not None or self._ends is not None or self.end_costs is not None or self.end_table:
            for cached in (self._ids, self._ends, self.end_costs, *(self.end_table or ())):
                if cached is not None:
                    total += cached.nbytes
        for part in self._deferred or ():
            total += part.nbytes
        return total


class MaskCache:
    """LRU of ``MaskEntry`` by state, bounded by total bytes: an entry counts for its size
    when stored (``MaskEntry.nbytes``), and leaving takes off that same count. What an
    entry computes later on demand (sorted ids, ends, a budget's costs: vocabulary-sized
    arrays at most) is not counted; taking its grown size off at eviction, as if it had
    been, would let ``used`` fall below what the cache holds and the cache outgrow its bound."""

    def __init__(self, max_bytes: int = MASK_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        # key -> [entry, bytes counted for it in ``used``]
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key, entry: MaskEntry) -> None:
        with self._lock:
            self._pop(key)
            size = entry.nbytes
            self._entries[key] = [entry, size]
            self.used += size
            while self.used > self.max_bytes and len(self._entries) > 1:
                _, (_evicted, counted) = self._entries.popitem(last=False)
                self.used -= counted

    def discard(self, key) -> None:
        with self._lock:
            self._pop(key)

    def _pop(self, key) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.used -= old[1]

    def __len__(self) -> int:
        return len(self._entries)


class MatcherBase:
    """History, advancing, bitmasks, forced tokens and budget; subclasses define the state.

    A subclass provides: ``_initial_state()``, ``_end_state(state, token_id)`` (state
    after a whole token, or None if not allowed), ``_accepting(state)``,
    ``_can_continue(state)``, ``_entry(state)`` (the ``MaskEntry`` of allowed tokens),
    ``_cost(state)`` (tokens of a concrete path to acceptance), ``_end_costs(entry,
    limit)`` (each allowed token's cost, or a number within ``limit`` it does not exceed),
    ``_forced_bytes(state)`` and ``_extends_past(state, trie_node)``; optionally
    ``_cost_bound(state)`` and ``_max_end_bound(entry, limit)``, cheaper numbers the costs do
    not exceed.
    """

    def __init__(self, vocab: TokenVocabulary, max_tokens: int | None) -> None:
        _check_vocabulary(vocab)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 0):
            raise ValueError(f"max_tokens must be a non-negative integer or None, not {max_tokens!r}")
        self.vocab = vocab
        self.max_tokens = max_tokens
        self._states: list = [self._initial_state()]
        self._tokens: list[int] = []
        self._text_lengths: list[int] = [0]
        self._text = bytearray()
        self._finished = [False]
        self._generated = [0]
        self._budget_memo: tuple | None = None
        # (the buffer ``fill_bitmask`` last checked, its shape and dtype, its words)
        self._checked_buffer: tuple | None = None
        if max_tokens is not None and not self._fits(self._states[0], max_tokens):
            needed = self._cost(self._states[0])
            if needed >= UNREACHABLE:
                raise TokenBudgetError(
                    f"no valid output can be spelled with the tokens of this vocabulary (max_tokens={max_tokens})"
                )
            if needed > max_tokens:
                raise TokenBudgetError(
                    f"the shortest valid output the budget check finds needs {needed} tokens with this "
                    f"vocabulary, more than max_tokens={max_tokens}; raise max_tokens to at least {needed}"
                )

    def _initial_state(self):
        raise TypeError(f"{type(self).__name__} defines no initial state")

    # ---------------------------------------------------------------- state
    @property
    def _state(self):
        return self._states[-1]

    @property
    def remaining_tokens(self) -> int | None:
        """Tokens still allowed by ``max_tokens`` (the final end-of-sequence token is free)."""
        if self.max_tokens is None:
            return None
        return self.max_tokens - self._generated[-1]

    @property
    def token_ids(self) -> list[int]:
        """Tokens accepted so far (including a final end-of-sequence token)."""
        return list(self._tokens)

    def text_bytes(self) -> bytes:
        return bytes(self._text)

    def is_finished(self) -> bool:
        return self._finished[-1]

    def is_accepting(self) -> bool:
        return self._finished[-1] or self._accepting(self._state)

    # ------------------------------------------------------------------ masks
    def _current_mask(self, ids_needed: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """(sorted allowed text-token ids, packed words) under the budget, EOS excluded.
        Without ``ids_needed`` the ids may be None: unpacking them from a large mask costs
        more than the walk that found it."""
        state = self._state
        entry = self._entry(state)
        remaining = self.remaining_tokens
        if remaining is None:
            return entry.ids if ids_needed else None, entry.words
        if remaining <= 0:
            empty = np.zeros(0, dtype=np.int32)
            return empty, pack_ids(empty, self.vocab.size)
        if entry.max_end_cost is None or (self._bounds_tighten and entry.max_end_cost > remaining - 1):
            entry.max_end_cost = self._max_end_bound(entry, remaining - 1)
        if entry.max_end_cost <= remaining - 1:
            return entry.ids if ids_needed else None, entry.words
        memo = self._budget_memo
        if memo is not None and memo[0] is entry and memo[1] == remaining:
            return memo[2]
        keep = self._end_costs(entry, remaining - 1) <= remaining - 1
        ids = entry.ids[keep]
        result = (ids, pack_ids(ids, self.vocab.size))
        self._budget_memo = (entry, remaining, result)
        return result

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids of the tokens that may come next (EOS ids exactly when the text is complete)."""
        if self.is_finished():
            return np.zeros(0, dtype=np.int32)
        ids, _ = self._current_mask()
        if self._accepting(self._state):
            ids = distinct(np.concatenate([ids, self.vocab.eos_array.astype(np.int32)])).astype(np.int32)
        return ids

    def fill_bitmask(self, buffer: np.ndarray, row: int | None = None) -> None:
        """Write the allowed tokens as packed bits: token i allowed iff ``buffer[i >> 5] >> (i & 31) & 1``.

        ``buffer`` is int32 (or uint32) with at least ``ceil(vocab.size / 32)`` words in
        the last dimension; ``row`` picks a row of a 2-D buffer. Extra words are cleared.
        """
        target = buffer if row is None else buffer[row]
        checked = self._checked_buffer
        if checked is not None and checked[0] is target and checked[1] == target.shape and checked[2] == target.dtype:
            out = checked[3]
        else:
            out = self._words_view(target)
            # A decode loop fills one buffer at every step: checked once.
            self._checked_buffer = (target, target.shape, target.dtype, out)
        if self._finished[-1]:
            out[:] = 0
            return
        words = self._mask_words()
        out[: len(words)] = words
        if len(out) > len(words):
            out[len(words) :] = 0
        if self._accepting(self._states[-1]):
            for token_id in self.vocab.eos_array.tolist():
                out[token_id >> 5] = int(out[token_id >> 5]) | 1 << (token_id & 31)

    def _mask_words(self) -> np.ndarray:
        """The packed words of ``_current_mask``."""
        return self._current_mask(ids_needed=False)[1]

    def _words_view(self, target) -> np.ndarray:
        """``target`` as the uint32 words ``fill_bitmask`` writes, checked to hold them."""
        if (
            not isinstance(target, np.ndarray)
            or target.ndim != 1
            or target.dtype.kind not in "iu"
            or target.dtype.itemsize != 4
        ):
            # A float32 buffer has the right width, but its words would be read as numbers.
            given = f"{target.ndim}-D {target.dtype}" if isinstance(target, np.ndarray) else type(target).__name__
            raise ValueError(
                f"fill_bitmask needs a 1-D int32 or uint32 buffer (or a 2-D one with row=...), not {given}"
            )
        needed = words_for(self.vocab.size)
        if target.shape[0] < needed:
            raise ValueError(f"bitmask buffer has {target.shape[0]} words, the vocabulary needs {needed}")
        return target.view(np.uint32)

    def is_allowed(self, token_id: int) -> bool:
        if self.is_finished():
            return False
        if token_id in self.vocab.eos_token_ids:
            return self._accepting(self._state)
        return self._accepts_token(int(token_id)) is not None

    # -------------------------------------------------------------- advancing
    def _accepts_token(self, token_id: int):
        """The state after ``token_id`` if it is allowed now (budget included), else None."""
        if not self.vocab.is_text_token(token_id):
            return None
        remaining = self.remaining_tokens
        if remaining is not None and remaining <= 0:
            return None
        new_state = self._end_state(self._state, token_id)
        if new_state is None:
            return None
        if remaining is not None and not self._fits(new_state, remaining - 1):
            return None
        return new_state

    def advance(self, token_id: int) -> Status:
        """Consume one token: ACCEPTED, FINISHED (complete, nothing more may follow) or REJECTED (state unchanged)."""
        token_id = _as_token_id(token_id)
        if self.is_finished():
            return Status.REJECTED
        if token_id in self.vocab.eos_token_ids:
            if not self._accepting(self._state):
                return Status.REJECTED
            self._push(self._state, token_id, b"", finished=True, counts=False)
            return Status.FINISHED
        new_state = self._accepts_token(token_id)
        if new_state is None:
            return Status.REJECTED
        done = not self._can_continue(new_state)
        self._push(new_state, token_id, self.vocab.token_bytes(token_id), finished=done, counts=True)
        return Status.FINISHED if done else Status.ACCEPTED

    def advance_many(self, token_ids) -> Status:
        """Advance through several tokens; stops at the first that is not ACCEPTED and returns its status."""
        status = Status.ACCEPTED
        for token_id in token_ids:
            status = self.advance(token_id)
            if status is not Status.ACCEPTED:
                break
        return status

    def _push(self, state, token_id: int, data: bytes, *, finished: bool, counts: bool) -> None:
        self._states.append(state)
        self._tokens.append(token_id)
        self._text.extend(data)
        self._text_lengths.append(len(self._text))
        self._finished.append(finished)
        self._generated.append(self._generated[-1] + (1 if counts else 0))

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens (an end-of-sequence token counts as one)."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"rollback needs a non-negative number of tokens, not {n!r}")
        if n > len(self._tokens):
            raise ValueError(f"cannot roll back {n} tokens: only {len(self._tokens)} were accepted")
        if n == 0:
            return
        del self._states[-n:], self._tokens[-n:], self._text_lengths[-n:], self._finished[-n:], self._generated[-n:]
        del self._text[self._text_lengths[-1] :]

    def reset(self) -> None:
        self.rollback(len(self._tokens))

    def clone(self):
        """An independent matcher in the same state, sharing grammar, vocabulary and caches."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._states = list(self._states)
        twin._tokens = list(self._tokens)
        twin._text_lengths = list(self._text_lengths)
        twin._text = bytearray(self._text)
        twin._finished = list(self._finished)
        twin._generated = list(self._generated)
        twin._budget_memo = None
        return twin

    # ------------------------------------------------------------ forced text
    def forced(self) -> tuple[bytes, list[int]]:
        """The only possible continuation (bytes, up to the first point where the text could end) and tokens for it.

        Tokens come from greedy longest match; the last one is left out when a longer
        allowed token could extend past the forced bytes, so the free text that follows
        is not cut at an unnatural token boundary. Under a budget, tokens stop where one
        would leave no room to finish.
        """
        if self.is_finished():
            return b"", []
        data = self._forced_bytes(self._state)
        if not data:
            return b"", []
        try:
            tokens = self.vocab.tokenize_bytes(data)
        except ValueError:
            # A byte no token spells: the text is still forced, but must be reached by sampling.
            return data, []
        kept: list[int] = []
        state = self._state
        remaining = self.remaining_tokens
        for token_id in tokens:
            new_state = self._end_state(state, token_id)
            if new_state is None:
                break
            if remaining is not None:
                remaining -= 1
                if not self._fits(new_state, remaining):
                    break
            kept.append(token_id)
            state = new_state
        if kept and len(kept) == len(tokens):
            last = self.vocab.token_bytes(kept[-1])
            node = self.vocab.trie.descend(last)
            if len(node) == len(last) and self._extends_past(state, node[-1]):
                kept.pop()
        return data, kept

    # ------------------------------------------------------------------ budget
    def min_tokens_to_finish(self) -> int:
        """Tokens (EOS excluded) of a concrete path to a complete output; an upper bound of the true minimum."""
        if self.is_finished():
            return 0
        return self._cost(self._state)

    def _cost_bound(self, state) -> int:
        """A number ``_cost(state)`` does not exceed, known without a search (UNREACHABLE: none known)."""
        return UNREACHABLE

    def _fits(self, state, tokens: int) -> bool:
        """Whether ``state`` can finish within ``tokens`` (``_cost(state) <= tokens``)."""
        return self._cost_bound(state) <= tokens or self._cost(state) <= tokens

    #: Whether ``_max_end_bound`` comes closer to the largest cost with a smaller limit.
    _bounds_tighten = False

    def _max_end_bound(self, entry: MaskEntry, limit: int) -> int:
        """A number no cost of a token ``entry`` allows exceeds, and the largest cost
        itself where that is more than ``limit``."""
        costs = self._end_costs(entry, limit)
        return int(costs.max()) if len(costs) else 0


def _check_vocabulary(vocab) -> None:
    if not isinstance(vocab, TokenVocabulary):
        raise TypeError(f"vocab must be a TokenVocabulary, not {type(vocab).__name__}")


def _as_token_id(token_id) -> int:
    try:
        return operator.index(token_id)
    except TypeError:
        raise TypeError(f"token id must be an integer, not {token_id!r}") from None


def _joined(parts: list) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


_WALK_OUTPUT = threading.local()

#: The trie's root, where a walk of a whole mask starts.
_ROOT_NODE = np.zeros(1, dtype=np.int32)
_ROOT_NODE.flags.writeable = False
#: The per-token outputs a walk into words leaves empty.
_NO_OUTPUT = np.zeros(0, dtype=np.int32)


def _walk_output(room: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-thread output arrays of the native walk, reused so that a walk over the whole
    vocabulary does not fault in fresh pages for its results on every mask."""
    buffers = getattr(_WALK_OUTPUT, "buffers", None)
    if buffers is None or len(buffers[0]) < room:
        buffers = _WALK_OUTPUT.buffers = (np.empty(room, dtype=np.int32), np.empty(room, dtype=np.int32))
    return buffers


# --------------------------------------------------------------------------
class _AutomatonTables:
    """Per (automaton, vocabulary) state shared by all matchers: masks and token-path costs."""

    def __init__(self, vocab: TokenVocabulary) -> None:
        self.masks = MaskCache()
        self.costs: dict[int, int] = {}
        self.cost_bounds: dict[int, int] = {}
        self.chain_groups: dict[int, Any] = {}
        # The fewest live ASCII bytes any group the walk takes whole needs (see
        # ``Matcher._too_few_bytes_for_a_large_group``), once every group is loaded.
        self.least_live_bytes: int | None = None
        self.successors: dict[tuple[int, str, bool], int | None] = {}
        # Per configuration, the largest group all of whose members are live there (None:
        # none found; see ``Matcher._live_group``).
        self.live_groups: dict[int, Any] = {}
        self.groups = group_tables_for(vocab)


_SHARED: "weakref.WeakKeyDictionary[Any, dict[str, _AutomatonTables]]" = weakref.WeakKeyDictionary()


def _shared_tables(automaton, vocab: TokenVocabulary) -> _AutomatonTables:
    try:
        per_vocab = _SHARED.setdefault(automaton, {})
    except TypeError:
        return _AutomatonTables(vocab)
    tables = per_vocab.get(vocab.fingerprint)
    if tables is None:
        tables = per_vocab[vocab.fingerprint] = _AutomatonTables(vocab)
    elif not tables.groups.trie_alive:
        # Made for an equal vocabulary that is gone: its groups are built from this one's trie.
        tables.groups = group_tables_for(vocab)
    return tables


class Matcher(MatcherBase):
    """Grammar-constrained token matcher for one sequence (see the module docstring).

    ``grammar`` is a ``Grammar`` (or anything with an ``automaton`` following the
    byte-automaton contract); ``max_tokens`` bounds the generated tokens, EOS excluded.
    """

    def __init__(self, grammar, vocab: TokenVocabulary, *, max_tokens: int | None = None) -> None:
        automaton = getattr(grammar, "automaton", None)
        if automaton is None:
            raise TypeError(f"Matcher needs a Grammar (with an automaton), not {type(grammar).__name__}")
        _check_vocabulary(vocab)
        self.grammar = grammar
        self.automaton = automaton
        self._hooks = bool(getattr(automaton, "has_token_hooks", False))
        self._tables = _shared_tables(automaton, vocab)
        self._text_check = getattr(grammar, "text_check", None)
        lean = max_tokens is None and not self._hooks and self._text_check is None
        self._lean_step = getattr(automaton, "step_bytes", None) if lean else None
        # Where nothing reads a token's configuration (no budget; ``_entry`` walks ends for
        # token hooks), a mask one native walk makes keeps its bits alone.
        self._bits_walk = max_tokens is None and self._native_walk_applies()
        # Asked at every new mask (``_only_next_byte``): looked up once.
        self._automaton_only_next_byte = getattr(automaton, "only_next_byte", None)
        self._check_memo: tuple | None = None
        self._check_mask_memo: list | None = None
        self._partials_bounded: bool | None = None
        super().__init__(vocab, max_tokens)

    def _initial_state(self) -> int:
        return int(self.automaton.initial)

    # ------------------------------------------------------------ text check
    def _check_state(self):
        """The text check's state after the text so far (fed incrementally from the last one computed)."""
        text = bytes(self._text)
        memo = self._check_memo
        check = self._text_check
        if memo is not None and text.startswith(memo[0]):
            state = check.feed(memo[1], text[len(memo[0]) :])
        else:
            state = check.feed(check.initial(), text)
        self._check_memo = (text, state)
        return state

    def _current_mask(self, ids_needed: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        if self._text_check is None:
            return super()._current_mask(ids_needed)
        _, words = super()._current_mask(ids_needed=False)
        text = bytes(self._text)
        memo = self._check_mask_memo
        if memo is None or memo[0] != text or memo[1] is not words:
            memo = self._check_mask_memo = [text, words, self._checked_words(words), None]
        kept = memo[2]
        if not ids_needed:
            return None, kept
        if memo[3] is None:
            memo[3] = super()._current_mask()[0] if kept is words else unpack_ids(kept, self.vocab.size)
        return memo[3], kept

    def _mask_words(self) -> np.ndarray:
        if self._lean_step is None:
            return super()._mask_words()
        # Without a budget, token hooks or a text check, the mask is its entry's words
        # (``_current_mask`` through ``_entry``, without the layers).
        state = self._states[-1]
        entry = self._tables.masks.get(state)
        if entry is None:
            entry = self._new_entry(state, ends=False)
        return entry.words

    def _checked_words(self, words: np.ndarray) -> np.ndarray:
        """``words`` without the tokens the text check rejects (``words`` itself when it
        rejects none); only tokens holding one of its trigger bytes can be rejected."""
        check = self._text_check
        state = self._check_state()
        if state is None:
            return words
        vocab = self.vocab
        triggers = check.trigger_bytes(state)
        if triggers is None:
            return words
        in_order = getattr(check, "trigger_in_order", None)
        sequence = in_order(state) if in_order is not None else None
        entry = self._entry(self._state)
        few = entry.ids_if_few(_FEW_CHECKED) if words is entry.words else None
        if few is not None:
            # A small mask: its ids index the per-token flags, cheaper than a pass over every word.
            if triggers:
                few = few[vocab.tokens_holding(triggers)[few]]
            if sequence:
                few = few[vocab.tokens_holding_in_order(sequence)[few]]
            candidate_ids = few.tolist()
        else:
            candidates = words
            if triggers:
                candidates = candidates & vocab.tokens_holding_words(triggers)
            if sequence:
                candidates = candidates & vocab.tokens_holding_in_order_words(sequence)
            candidate_ids = unpack_ids(candidates, vocab.size).tolist()
        refused_among = getattr(check, "refused_among", None)
        if refused_among is not None:
            rejected = [candidate_ids[i] for i in refused_among(state, vocab.text_token_bytes(candidate_ids))]
        else:
            rejected = [t for t in candidate_ids if check.feed(state, vocab.token_bytes(t)) is None]
        if not rejected:
            return words
        # Clearing the rejected bits beats packing the kept ids again.
        rejected_ids = np.asarray(rejected, dtype=np.uint32)
        kept = words.copy()
        np.bitwise_and.at(kept, rejected_ids >> 5, ~np.left_shift(np.uint32(1), rejected_ids & 31))
        return kept

    def advance(self, token_id: int) -> Status:
        step_bytes = self._lean_step
        if step_bytes is None:
            return super().advance(token_id)
        # No budget, token hooks or text check: the state after a text token is its bytes'
        # (``MatcherBase.advance`` through ``_accepts_token``, without the layers).
        token_id = _as_token_id(token_id)
        vocab = self.vocab
        data = None if self._finished[-1] or token_id in vocab.eos_token_ids else vocab.text_bytes_of(token_id)
        if data is None:
            return super().advance(token_id)
        end = step_bytes(self._states[-1], data)
        if end == DEAD:
            return Status.REJECTED
        done = not self.automaton.can_continue(end)
        self._push(end, token_id, data, finished=done, counts=True)
        return Status.FINISHED if done else Status.ACCEPTED

    def _accepts_token(self, token_id: int):
        new_state = super()._accepts_token(token_id)
        if new_state is None or self._text_check is None:
            return new_state
        state = self._check_state()
        if state is not None and self._text_check.feed(state, self.vocab.token_bytes(token_id)) is None:
            return None
        return new_state

    @property
    def config(self) -> int:
        """The automaton configuration after the tokens so far."""
        return self._state

    # ------------------------------------------------------------- stepping
    def _accepting(self, config: int) -> bool:
        return bool(self.automaton.is_accepting(config))

    def _can_continue(self, config: int) -> bool:
        return bool(self.automaton.can_continue(config))

    def _state_after_bytes(self, config: int, data: bytes) -> int:
        step_bytes = getattr(self.automaton, "step_bytes", None)
        if step_bytes is not None:
            return step_bytes(config, data)
        step = self.automaton.step
        for value in data:
            config = step(config, value)
            if config == DEAD:
                return DEAD
        return config

    def _after_token_bytes(self, config: int, data: bytes) -> int:
        """Configuration after a whole token spelled ``data`` (token hooks and any! included), DEAD if rejected."""
        automaton = self.automaton
        end = self._state_after_bytes(config, data)
        if not self._hooks:
            return end
        if end != DEAD:
            end = self._token_live(self._boundary(end))
        if end == DEAD:
            any_end = automaton.after_any_token(config)
            if any_end != DEAD:
                end = self._token_live(self._boundary(any_end))
        return end

    def _token_live(self, config: int) -> int:
        if config == DEAD or self._cost(config) >= UNREACHABLE:
            return DEAD
        return config

    def _boundary(self, config: int) -> int:
        """``on_token_boundary``, treating a configuration that can neither finish nor continue as dead."""
        automaton = self.automaton
        end = automaton.on_token_boundary(config)
        if end != DEAD and not automaton.is_accepting(end) and not automaton.can_continue(end):
            return DEAD
        return end

    def _end_state(self, config: int, token_id: int):
        end = self._after_token_bytes(config, self.vocab.token_bytes(token_id))
        return None if end == DEAD else end

    # ----------------------------------------------------------------- masks
    def _entry(self, config: int) -> MaskEntry:
        entry = self._tables.masks.get(config)
        if entry is None:
            entry = self._new_entry(config, ends=self._hooks)
        if not entry.ends_walked and not self._unwalked_ends_serve(entry):
            entry = self._new_entry(config, ends=True)
        return entry

    def _new_entry(self, config: int, *, ends: bool) -> MaskEntry:
        words = None if ends else self._whole_walk_bits(config)
        if words is not None:
            entry = MaskEntry(self.vocab.size, _NO_OUTPUT, None, (None, words, _BITS_ONLY))
        else:
            ids, found_ends, base, deferred = self._walk_all(config, ends=ends)
            entry = MaskEntry(self.vocab.size, ids, found_ends, base, deferred)
        self._tables.masks.put(config, entry)
        return entry

    def _whole_walk_bits(self, config: int) -> np.ndarray | None:
        """The mask's words where one native walk from the root makes them and nothing reads
        where its tokens lead: at a forced literal, or with too few live bytes for a group
        (most masks); else None (``_walk_all`` decides)."""
        if not self._bits_walk or (
            self._only_next_byte(config) < 0 and not self._too_few_bytes_for_a_large_group(config)
        ):
            return None
        return self._walk_native_bits(config)

    def _unwalked_ends_serve(self, entry: MaskEntry) -> bool:
        """Whether a mask whose group members' states were not walked serves this matcher:
        without a budget nothing reads them (``advance`` steps a token's bytes itself); with
        one, every allowed token's bound must fit the tokens left (token hooks read every
        token's state)."""
        if self._hooks:
            return False
        remaining = self.remaining_tokens
        if remaining is None or remaining <= 0:
            return True
        bound = self._max_end_bound_unresolved(entry)
        return bound is not None and bound <= remaining - 1

    def _walk_all(self, config: int, *, ends: bool = True) -> tuple[np.ndarray, np.ndarray, tuple | None, list]:
        """Allowed text tokens at ``config``: (distinct ids, configuration after each (or
        ``DEFERRED``), group allowed whole, the ``DeferredEnds`` computing the deferred ones).
        Without ``ends``, a group whose members are all live may be allowed without stepping
        them (``UnwalkedEnds``)."""
        automaton = self.automaton
        trie = self.vocab.trie
        id_parts: list[np.ndarray] = []
        end_parts: list[np.ndarray] = []
        deferred: list[DeferredEnds] = []
        # Where nothing reads the tokens' configurations, the mask keeps its bits alone
        # (a budget's bound needs them: it would walk again). A forced literal's mask is
        # then ``_new_entry``'s (``_whole_walk_bits``).
        bits_only = not ends and self._bits_walk

        base = None
        if self._only_next_byte(config) >= 0 and self._native_walk_applies():
            # A forced literal: the native walk follows its only live byte from the root, a
            # table read per level, as the loop below does with Python calls per byte.
            self._walk_native(_ROOT_NODE, np.array([config], dtype=np.int32), id_parts, end_parts)
        else:
            # Forced-literal prefix: follow the only possible byte down the trie.
            node, current = 0, config
            while True:
                value = self._only_next_byte(current)
                if value < 0:
                    break
                child = trie.child(node, value)
                if child < 0:
                    node = -1
                    break
                node, current = child, automaton.step(current, value)
                found = trie.tokens_at(node)
                if len(found):
                    id_parts.append(found)
                    end_parts.append(np.full(len(found), current, dtype=np.int32))
            if node > 0:
                start_nodes, start_configs = np.array([node], dtype=np.int32), np.array([current], dtype=np.int32)
                self._walk_levels(start_nodes, start_configs, id_parts, end_parts)
            elif node == 0:
                base = self._walk_from_root(config, id_parts, end_parts, deferred, ends=ends, bits_only=bits_only)

        if base is not None and self._hooks:
            member_ids = _member_ids(base)
            id_parts.append(member_ids)
            end_parts.append(np.full(len(member_ids), _member_ends(base[2]), dtype=np.int32))
            base = None
        # Each token ends at exactly one trie node, so the ids found are distinct.
        ids = _joined(id_parts)
        ends = _joined(end_parts)
        if self._hooks:
            ids, ends = self._apply_token_hooks(config, ids, ends)
        return ids.astype(np.int32, copy=False), ends.astype(np.int32, copy=False), base, deferred

    def _only_next_byte(self, config: int) -> int:
        """The one byte that leads ``config`` somewhere live, -1 when there are none or several."""
        only_next_byte = self._automaton_only_next_byte
        if only_next_byte is not None:
            return only_next_byte(config)
        following = self.automaton.next_bytes(config)
        return following[0] if len(following) == 1 else -1

    def _walk_from_root(
        self, config: int, id_parts: list, end_parts: list, deferred: list, *, ends: bool = True,
        bits_only: bool = False,
    ) -> tuple | None:
        """Walk from the trie root; returns the token group allowed as a whole, if one applies.
        Tokens whose configurations are deferred get a ``DeferredEnds`` in ``deferred``. With
        ``bits_only``, a native walk of the whole trie, or a group's members with the tokens
        its exit walk finds, return the mask's words alone as such a part (``_BITS_ONLY``)."""
        trie = self.vocab.trie
        too_few = self._too_few_bytes_for_a_large_group(config)
        found = None if too_few else self._chain_group(config)
        # Where a large group holds already, a larger one all of whose members are live is
        # rare (free text, whose group loops): only a small group's place is looked at.
        live = None
        if not ends and not too_few and (found is None or self._small_group(found[0])):
            live = self._live_group(config, larger_than=None if found is None else found[0])
        if live is not None:
            return self._walk_live_group(config, *live, id_parts, end_parts)
        # A small group (spaces, digits) leaves most of the trie below its exits, which
        # the whole-level walk covers faster.
        small = found is None or self._small_group(found[0], _GROUP_WALK_SHARE)
        if small and self._native_walk_applies():
            # The native walk beats the whole-level numpy walk.
            if bits_only:
                return None, self._walk_native_bits(config), _BITS_ONLY
            self._walk_native(_ROOT_NODE, np.array([config], dtype=np.int32), id_parts, end_parts)
            return None
        if small and self._walk_wide(config, id_parts, end_parts):
            return None
        if found is None:
            self._walk_levels(np.array([0], dtype=np.int32), np.array([config], dtype=np.int32), id_parts, end_parts)
            return None
        # Every token of the group ends where its character count leads along the chain
        # (for a loop: back at ``config``): decide them at once, then walk only the
        # subtrees where tokens leave the group.
        group, chain, exceptions = found
        # Token hooks read every token's configuration, and a budget every allowed one's
        # where it binds (elsewhere it bounds those inside a character and a counted
        # chain's members without them, where bounds apply).
        deferring = not self._hooks and self.max_tokens is None
        if chain is not None:
            # The exits and partial characters start from their counts' configurations;
            # the members' ones are made when read (past a group's excepted first bytes,
            # where they are listed, at once), which a budget does only where it binds.
            lazy_members = (deferring or self._bounds_apply()) and exceptions is None
            _make_lazy_entries(self.automaton, chain, group.chain_counts if lazy_members else None)
        member_words = self._member_words_alone(group, chain, exceptions) if bits_only else None
        if member_words is not None:
            partial_ids = group.deferred_partial_ids(self.automaton, config, chain, trie, exceptions)
            if partial_ids is not None:
                # One native walk starts where tokens leave the group: at its live exits and
                # below the excepted first bytes.
                words = self._words_of(member_words, partial_ids)
                native.walk(
                    self.automaton, trie.native_tables, _NO_OUTPUT, _NO_OUTPUT, _NO_OUTPUT, _NO_OUTPUT,
                    out_words=words, exits=group.native_exits(trie),
                    exit_starts=np.array([config], dtype=np.int32) if chain is None else chain, excepted=exceptions,
                )
                return None, words, _BITS_ONLY
        frontier_nodes, frontier_configs, partial_ids, partial_configs, deferred_ends = group.exits_from(
            self.automaton, config, chain, trie=trie, skip_first=exceptions,
            defer_partials=deferring or self._defers_partials_under_budget(), ends_read=member_words is None,
        )
        if exceptions is not None:
            # Tokens starting with an excepted byte are walked below it, in the same walk
            # as the exits (the exits starting with one are left out); the rest of the
            # group's paths follow the chain.
            first_nodes, first_configs = self._below_first_bytes(config, exceptions)
            frontier_nodes = np.concatenate([frontier_nodes, first_nodes])
            frontier_configs = np.concatenate([frontier_configs, first_configs])
        if member_words is not None:
            # Nothing reads where a token leads: the members' words, the live tokens ending
            # inside a character and the exit walk's tokens make the mask's bits alone.
            words = self._words_of(member_words, partial_ids)
            self._walk_native_into(words, frontier_nodes, frontier_configs, report_starts=True)
            return None, words, _BITS_ONLY
        if deferred_ends is not None:
            deferred_ends.shift(sum(len(part) for part in id_parts))
            deferred.append(deferred_ends)
        id_parts.append(partial_ids)
        end_parts.append(partial_configs)
        self._walk_at_and_below(frontier_nodes, frontier_configs, id_parts, end_parts)
        if chain is None:
            return group.member_ids, group.member_words, config
        if exceptions is not None and _loops_one_character_in(chain):
            # One character in, the group loops: every other member ends there.
            return None, group.member_words_without_first(trie, exceptions), int(chain[1])
        if exceptions is None:
            ids, words, (states, counts) = group.members_along(chain)
            if (states <= _LAZY).any():
                states = ChainStates(self.automaton, states)
            return ids, words, (states, counts)
        member_ends = chain[group.member_chars]
        live = (member_ends != DEAD) & ~np.isin(group.first_bytes(trie)[0], exceptions)
        id_parts.append(group.member_ids[live])
        end_parts.append(member_ends[live])
        return None

    def _words_of(self, member_words: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """A mask's words: a group's ``member_words`` and the bits of ``ids``."""
        words = np.zeros(words_for(self.vocab.size), dtype=np.uint32)
        words[: len(member_words)] = member_words
        set_ids(words, ids)
        return words

    def _member_words_alone(self, group, chain: np.ndarray | None, exceptions: np.ndarray | None) -> np.ndarray | None:
        """The packed words of ``group``'s members live along ``chain`` (a loop's: all of
        them), those starting with an excepted byte left out, where they come without their
        configurations (as ``_walk_from_root`` allows them otherwise); None where they do not
        (a chain past excepted first bytes that does not loop one character in)."""
        if chain is None:
            return group.member_words
        if exceptions is None:
            return group.members_along(chain)[1]
        if _loops_one_character_in(chain):
            return group.member_words_without_first(self.vocab.trie, exceptions)
        return None

    def _live_group(self, config: int, larger_than=None) -> tuple | None:
        """(the largest group, holding more members than ``larger_than``, every member of
        which is live at ``config``; the configurations its characters lead to), or None.
        Where a group's characters lead a configuration to several others (a pattern searched
        for inside a string: a character of the word leads on, any other back), no chain
        holds, yet every string of them stays live; the walk then needs only the paths
        leaving the group."""
        if not self._native_walk_applies():
            return None
        live_groups = self._tables.live_groups
        live = live_groups.get(config, False)
        if live is False:
            live = live_groups[config] = None
            count = getattr(self.automaton, "live_ascii_count", None)
            live_bytes = len(ASCII_BYTES) if count is None else count(config)
            for spec in GROUP_SPECS:
                if len(spec.ascii_bytes) > live_bytes:
                    # Some ASCII byte of the group dies here already.
                    continue
                # Largest first (each group holds the next): the rest are no larger.
                group = self._tables.groups.group(spec)
                if self._small_group(group) or (
                    larger_than is not None and group.member_count <= larger_than.member_count
                ):
                    break
                reached = self._live_closure(config, group)
                if reached is not None:
                    # What the group's characters lead to is reached from here: it keeps them
                    # live too, and its characters lead among the same configurations.
                    live = (group, np.array(sorted(reached), dtype=np.int32))
                    for each in reached:
                        if live_groups.get(each) is None:
                            live_groups[each] = live
                    break
        if live is None or (larger_than is not None and live[0].member_count <= larger_than.member_count):
            return None
        return live

    def _live_closure(self, config: int, group) -> set | None:
        """The configurations ``group``'s characters lead ``config`` to, when every string of
        them keeps it live (no ASCII byte of the group dies at any of them, and every multi-byte
        character leads where an ASCII one does) and they are at most ``LIVE_CLOSURE_LIMIT``;
        else None."""
        spec = group.spec
        reached, pending = {config}, [config]
        while pending:
            current = pending.pop()
            following = self._successors(current, spec.ascii_array)
            if (following == DEAD).any():
                return None
            if spec.non_ascii and not characters_surely_live(self.automaton, current, spec):
                return None
            for after in set(following.tolist()) - reached:
                if len(reached) >= LIVE_CLOSURE_LIMIT:
                    return None
                reached.add(after)
                pending.append(after)
        return reached

    def _walk_live_group(self, config: int, group, reach: np.ndarray, id_parts: list, end_parts: list) -> tuple:
        """The mask of a configuration where every member of ``group`` is live: the members
        and the tokens ending inside a character (live, as every character leads on) without
        stepping them, and the paths leaving the group walked from the root along the group's
        characters (``TokenGroup.exit_walk_marks``). ``reach``: where the characters lead."""
        id_parts.append(group.partial_ids)
        end_parts.append(np.full(len(group.partial_ids), _UNWALKED, dtype=np.int32))
        config_array = np.array([config], dtype=np.int32)
        self._walk_native(_ROOT_NODE, config_array, id_parts, end_parts, marks=group.exit_walk_marks(self.vocab.trie))
        return None, group.member_words, UnwalkedEnds(reach, len(group.partial_ids) > 0)

    def _below_first_bytes(self, config: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The trie's first-level nodes of the bytes ``values`` that lead ``config`` somewhere
        live, and where they lead: the starts of a walk of the tokens starting with them."""
        afters = np.asarray(self._successors(config, values), dtype=np.int32)
        children = self.vocab.trie.root_children[values]
        live = (children >= 0) & (afters != DEAD)
        return children[live], afters[live]

    def _walk_at_and_below(self, nodes: np.ndarray, configs: np.ndarray, id_parts: list, end_parts: list) -> None:
        """``_walk_levels``, with the tokens at ``nodes`` themselves (ending at ``configs``)."""
        if self._native_walk_applies():
            self._walk_native(nodes, configs, id_parts, end_parts, report_starts=True)
            return
        found_ids, owner = self.vocab.trie.tokens_at_nodes(nodes)
        if len(found_ids):
            id_parts.append(found_ids)
            end_parts.append(configs[owner])
        self._walk_levels(nodes, configs, id_parts, end_parts)

    def _walk_wide(self, config: int, id_parts: list, end_parts: list) -> bool:
        """Walk from the root stepping whole trie levels while most of each is live.

        Returns False (having done nothing) when too few first bytes are live for it
        to pay. Below the first level that is mostly dead, the live nodes continue
        through the ordinary level walk.
        """
        trie = self.vocab.trie
        level_start, parent, byte = trie.level_start, trie.parent, trie.byte
        max_depth = trie.max_depth
        if max_depth < 1:
            return False
        first = self._row(config)[byte[1 : level_start[2]]]
        if np.count_nonzero(first >= 0) < _WIDE_FRACTION * len(first):
            return False
        step_many = self.automaton.step_many
        configs = np.empty(trie.num_nodes, dtype=np.int32)
        configs[0] = config
        configs[1 : level_start[2]] = first
        depth = 1
        while depth < max_depth:
            low, high = int(level_start[depth]), int(level_start[depth + 1])
            if np.count_nonzero(configs[low:high] >= 0) < _WIDE_FRACTION * (high - low):
                break
            below, end = high, int(level_start[depth + 2])
            configs[below:end] = step_many(configs[parent[below:end]], byte[below:end])
            depth += 1
        tokens = slice(int(trie.token_start[1]), int(trie.token_start[level_start[depth + 1]]))
        ends = configs[trie.token_nodes[tokens]]
        live = ends >= 0
        id_parts.append(trie.token_ids[tokens][live])
        end_parts.append(ends[live])
        if depth < max_depth:
            low, high = int(level_start[depth]), int(level_start[depth + 1])
            nodes = np.flatnonzero(configs[low:high] >= 0).astype(np.int32) + low
            if len(nodes):
                self._walk_levels(nodes, configs[nodes], id_parts, end_parts)
        return True

    def _walk_levels(self, nodes: np.ndarray, configs: np.ndarray, id_parts: list, end_parts: list) -> None:
        """Advance (node, config) pairs level by level below ``nodes``, collecting tokens at live nodes."""
        if self._native_walk_applies():
            self._walk_native(nodes, configs, id_parts, end_parts)
            return
        trie = self.vocab.trie
        step_many = self.automaton.step_many
        while len(nodes):
            # Deep levels of a trie hold few nodes: once the frontier is that narrow
            # (at the start or after the wide levels), go on depth first.
            if len(nodes) <= _SPARSE_FRONTIER:
                nodes, configs = self._walk_sparse(nodes, configs, id_parts, end_parts)
                if not len(nodes):
                    return
            children, owner = trie.expand_children(nodes)
            if not len(children):
                return
            stepped = np.asarray(step_many(configs[owner], trie.byte[children]), dtype=np.int32)
            live = stepped != DEAD
            nodes, configs = children[live], stepped[live]
            found, at = trie.tokens_at_nodes(nodes)
            if len(found):
                id_parts.append(found)
                end_parts.append(configs[at])

    def _native_walk_applies(self) -> bool:
        return native.walk is not None and hasattr(self.automaton, "transition_table")

    def _walk_native(
        self, nodes: np.ndarray, configs: np.ndarray, id_parts: list, end_parts: list, *, report_starts: bool = False,
        marks: np.ndarray | None = None,
    ) -> None:
        """The walk of ``_walk_levels`` in the native extension (entries the transition
        table lacks are computed through ``automaton.step`` as the walk meets them);
        with ``report_starts``, also the tokens at ``nodes``; with ``marks``, only where
        they lead (see ``native.walk``)."""
        room = len(self.vocab.trie.token_ids)
        while True:
            out_ids, out_ends = _walk_output(room)
            try:
                found = self._native_trie_walk(nodes, configs, out_ids, out_ends, report_starts=report_starts, marks=marks)
                break
            except OverflowError:
                # Start nodes inside each other's subtrees report a token more than once.
                room *= 2
        if found:
            id_parts.append(out_ids[:found].copy())
            end_parts.append(out_ends[:found].copy())

    def _walk_native_bits(self, config: int) -> np.ndarray:
        """The packed words of the tokens allowed at ``config``, walked natively from the
        root without keeping where each leads (``native.walk``'s ``out_words``)."""
        words = np.zeros(words_for(self.vocab.size), dtype=np.uint32)
        # Most masks are walked here: ``_native_trie_walk``'s layers and checks left out.
        native.walk(
            self.automaton, self.vocab.trie.native_tables, _ROOT_NODE, np.array([config], dtype=np.int32),
            _NO_OUTPUT, _NO_OUTPUT, out_words=words,
        )
        return words

    def _walk_native_into(self, words: np.ndarray, nodes: np.ndarray, configs: np.ndarray, *,
                          report_starts: bool = False) -> None:
        """The native walk below ``nodes`` (as ``_walk_native``), setting the bits of the
        tokens it finds in ``words`` instead of listing them with their configurations."""
        self._native_trie_walk(nodes, configs, _NO_OUTPUT, _NO_OUTPUT, report_starts=report_starts, out_words=words)

    def _native_trie_walk(self, nodes, configs, out_ids: np.ndarray, out_ends: np.ndarray, **options) -> int:
        """``native.walk`` over this vocabulary's trie (with its subtree tables) below
        ``nodes`` from ``configs``; ``options`` are its keyword arguments."""
        return native.walk(
            self.automaton, self.vocab.trie.native_tables, np.ascontiguousarray(nodes, dtype=np.int32),
            np.ascontiguousarray(configs, dtype=np.int32), out_ids, out_ends, **options,
        )

    def _walk_sparse(self, nodes: np.ndarray, configs: np.ndarray, id_parts: list, end_parts: list):
        """Depth-first walk below a few (node, config) pairs, one live byte at a time.

        Where only a few bytes can follow (keys, enums, literals with choices) this
        visits a handful of trie nodes, far cheaper than a level of array operations.
        Once the walk widens past ``_SPARSE_BUDGET`` visits, the pairs still pending are
        returned for the level walk.
        """
        trie, automaton = self.vocab.trie, self.automaton
        blob, child_start, child_end = trie._byte_blob, trie.child_start, trie.child_end
        token_start, token_ids = trie.token_start, trie.token_ids
        step, next_bytes = automaton.step, automaton.next_bytes
        pending = list(zip(nodes.tolist(), configs.tolist()))
        visits = 0
        while pending and visits < _SPARSE_BUDGET:
            node, config = pending.pop()
            start, end = int(child_start[node]), int(child_end[node])
            if start == end:
                continue
            # Stepping a few children fills only their entries of the row; below a
            # wide node, the live bytes (the whole row) pick the children instead.
            if end - start > _FEW_CHILDREN and len(following := next_bytes(config)) <= end - start:
                reached = []
                for value in following:
                    child = blob.find(bytes((value,)), start, end)
                    if child >= 0:
                        reached.append((child, value))
            else:
                reached = [(child, blob[child]) for child in range(start, end)]
            for child, value in reached:
                visits += 1
                after = step(config, value)
                if after == DEAD:
                    continue
                first, last = int(token_start[child]), int(token_start[child + 1])
                if last > first:
                    id_parts.append(token_ids[first:last])
                    end_parts.append(np.full(last - first, after, dtype=np.int32))
                pending.append((child, after))
        if not pending:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty
        left = np.array(pending, dtype=np.int32)
        return left[:, 0].copy(), left[:, 1].copy()

    def _loop_group(self, config: int):
        """The token group whose characters all lead ``config`` back to itself, if any."""
        found = self._chain_group(config)
        return found[0] if found is not None and found[1] is None else None

    def _chain_group(self, config: int):
        """(group, chain, exceptions) for the largest group whose characters lead ``config``
        along one chain of configurations, or None. ``chain`` is None for a loop, else the
        configuration after 0, 1, ... characters, DEAD-padded to ``group.max_chars + 1``.
        ``exceptions``, when not None, are first bytes whose characters go their own way
        from ``config`` (the chain holds for the others; see ``near_uniform_groups``)."""
        tables = self._tables
        cached = tables.chain_groups.get(config, False)
        if cached is not False:
            return cached
        row = self._successors(config, ASCII_BYTES)
        stats = successor_stats(row)
        found = tables.groups.best_uniform_group(self.automaton, config, row, stats)
        result = None
        # A small uniform group's chain is made only if no larger near-uniform group
        # takes its place (at a key position next to known keys, one does).
        small = None
        if found is not None:
            group, successor = found
            if successor == config:
                result = (group, None, None)
            elif self._small_group(group):
                small = found
            elif (chain := self._chain(group, config, successor)) is not None:
                result = (group, chain, None)
        if result is None or self._small_group(result[0]):
            larger_than = None if result is None else result[0]
            for group, successor, exceptions in tables.groups.near_uniform_groups(
                self.automaton, config, row, larger_than, stats
            ):
                if small is not None and group.member_count <= small[0].member_count:
                    result, small = self._small_chain_group(small, config), None
                    if result is not None:
                        break
                chain = self._chain(group, config, successor)
                if chain is not None:
                    result = (group, chain, exceptions)
                    break
            if small is not None and result is None:
                result = self._small_chain_group(small, config)
        # A larger group whose few other ASCII bytes all die here (a pattern leaving out
        # some signs) takes the place of a smaller one all of whose bytes go on.
        larger_than = None if result is None else result[0]
        without_dead_bytes = tables.groups.groups_without_dead_bytes(self.automaton, config, row, larger_than, stats)
        for candidate, successor in without_dead_bytes:
            chain = None if successor == config else self._chain(candidate, config, successor)
            if successor != config and chain is None:
                continue
            group = candidate.made()
            if larger_than is None or group.member_count > larger_than.member_count:
                result = (group, None if chain is None else chain[: group.max_chars + 1], None)
                break
        tables.chain_groups[config] = result
        return result

    def _small_chain_group(self, found: tuple, config: int):
        group, successor = found
        chain = self._chain(group, config, successor)
        return None if chain is None else (group, chain, None)

    def _too_few_bytes_for_a_large_group(self, config: int) -> bool:
        """Whether too few ASCII bytes lead ``config`` anywhere for any group the walk does
        not leave to the plain walk (``_GROUP_WALK_SHARE``) to hold, uniform or near-uniform
        (a forced byte, a number's next digits): the group choice is skipped. Known once
        every group is loaded; until then, never."""
        least = self._tables.least_live_bytes
        if least is None:
            groups = self._tables.groups
            if not groups.all_loaded:
                return False
            least = self._tables.least_live_bytes = min(
                (
                    len(spec.ascii_bytes) - spec.first_exceptions
                    for spec in GROUP_SPECS
                    if not self._small_group(groups.group(spec), _GROUP_WALK_SHARE)
                ),
                default=len(ASCII_BYTES) + 1,
            )
        count = getattr(self.automaton, "live_ascii_count", None)
        return count is not None and count(config) < least

    def _small_group(self, group, share: int = _LARGE_GROUP_SHARE) -> bool:
        """Whether the group holds less than 1/``share`` of the vocabulary (spaces, digits:
        most of the trie lies below its exits)."""
        return group.member_count * share < len(self.vocab.trie.token_ids)

    def _chain(self, group, config: int, successor: int) -> np.ndarray | None:
        """Configurations after 0..max_chars characters of ``group`` (DEAD once they die), or
        None when the characters stop agreeing somewhere along the way. Entries a counted
        repetition only counts on may be ``_LAZY`` (see ``_make_lazy_entries``)."""
        chain = np.full(group.max_chars + 1, DEAD, dtype=np.int32)
        chain[0] = config
        current, count = successor, 1
        shift_span = getattr(self.automaton, "count_shift_span", None)
        while current != DEAD and count <= group.max_chars:
            chain[count] = current
            # The character read from here is the (count + 1)-th of the token.
            following = self._uniform_successor(group, current, count < group.wide_chars)
            if following is None:
                return None
            if following == current:
                chain[count:] = current
                break
            if shift_span is not None and count < group.max_chars:
                # Inside a counted repetition (a string's maxLength) the chain only counts
                # on: its configurations follow without computing their moves.
                span = min(shift_span(current, following), group.max_chars - count - 1)
                if span > 0:
                    # The configurations between are made only where a mask reads them
                    # (``_make_lazy_entries``): the counts of the group's exits, a few on a
                    # small vocabulary (0-4 on SmolLM2's), about a third of a chain on a
                    # large one; the members' ones only for a token budget.
                    chain[count + 1] = following
                    chain[count + 2 : count + 1 + span] = _LAZY - (count + 1)
                    following = self.automaton.count_shifted(following, span)
                    count += span
            current, count = following, count + 1
        return chain

    def _uniform_successor(self, group, config: int, wide: bool) -> int | None:
        key = (config, group.spec.name, wide)
        successors = self._tables.successors
        if key in successors:
            return successors[key]
        # Only the parts of the row the group's bytes fall in: the rest of a chain's
        # rows (escapes, halves of characters, the closing quote) may never be reached.
        values = group.spec.ascii_array
        by_values = self._successors(config, values)
        found = uniform_successor(self.automaton, config, group.spec, by_values, wide=wide)
        dead_bytes = group.dead_bytes
        if found is not None and dead_bytes is not None and (self._successors(config, dead_bytes) != DEAD).any():
            # A group without some bytes leaves out the paths through them: they must die here too.
            found = None
        successors[key] = found
        return found

    def _successors(self, config: int, values: np.ndarray) -> np.ndarray:
        successors = getattr(self.automaton, "successors", None)
        if successors is not None:
            return successors(config, values)
        return np.asarray(self.automaton.step_many(np.full(len(values), config, dtype=np.int32), values))

    def _row(self, config: int) -> np.ndarray:
        row = getattr(self.automaton, "row", None)
        if row is not None:
            return row(config)
        return np.asarray(self.automaton.step_many(np.full(256, config, dtype=np.int32), _ALL_BYTES))

    def _apply_token_hooks(self, config: int, ids: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        automaton = self.automaton
        if len(ids):
            unique, inverse = distinct(ends, return_inverse=True)
            # Token-counting regions can leave a configuration that only a byte string
            # no token sequence spells could finish (half a character at the token
            # limit); such ends are dropped by asking for a token path to acceptance.
            mapped = np.array([self._token_live(self._boundary(int(c))) for c in unique], dtype=np.int32)
            ends = mapped[inverse.reshape(-1)]
            live = ends != DEAD
            ids, ends = ids[live], ends[live]
        any_end = automaton.after_any_token(config)
        if any_end != DEAD:
            any_end = self._token_live(self._boundary(any_end))
        if any_end != DEAD:
            taken = np.zeros(self.vocab.size, dtype=bool)
            taken[ids] = True
            others = self.vocab.normal_ids[~taken[self.vocab.normal_ids]]
            ids = np.concatenate([ids, others])
            ends = np.concatenate([ends, np.full(len(others), any_end, dtype=np.int32)])
        return ids, ends

    # ---------------------------------------------------------------- forced
    def _forced_bytes(self, config: int) -> bytes:
        automaton = self.automaton
        out = bytearray()
        while not automaton.is_accepting(config):
            if self._hooks and automaton.after_any_token(config) != DEAD:
                break
            following = automaton.next_bytes(config)
            if len(following) != 1:
                break
            out.append(following[0])
            config = automaton.step(config, following[0])
        return bytes(out)

    def _extends_past(self, config: int, node: int) -> bool:
        id_parts: list = []
        self._walk_levels(np.array([node], dtype=np.int32), np.array([config], dtype=np.int32), id_parts, [])
        return bool(id_parts)

    # ---------------------------------------------------------------- budget
    def _cost(self, config: int) -> int:
        costs = self._tables.costs
        chain: list[int] = []
        current = config
        # One completion serves the whole token path: what is left of it after a token
        # completes the configuration that token leads to. With token hooks a token
        # boundary may change the configuration, so each step searches afresh.
        completion, position = None, 0
        while current not in costs:
            if self.automaton.is_accepting(current):
                costs[current] = 0
                break
            chain.append(current)
            if completion is None or self._hooks:
                completion, position = self._completion(current), 0
            following = None if completion is None else self._greedy_token_step(current, completion, position)
            if following is None or following[0] in chain:
                costs[current] = self._cost_bound(current)
                chain.pop()
                break
            current, position = following
        value = costs[current]
        for earlier in reversed(chain):
            # Never more than the bound, which ``_fits`` reads first, so that masks and
            # ``advance`` agree (a completion walked on from an earlier state may be longer).
            value = min(UNREACHABLE, value + 1, self._cost_bound(earlier))
            costs[earlier] = value
        return costs[config]

    def _cost_bound(self, config: int) -> int:
        bound = self._tables.cost_bounds.get(config)
        if bound is None:
            bound = self._cost_bounds([config])[0]
        return bound

    def _cost_bounds(self, configs: list[int]) -> list[int]:
        """``_cost_bound`` of each of ``configs``, the unknown ones computed together."""
        known = self._tables.cost_bounds
        missing = [config for config in configs if config not in known]
        if missing:
            known.update(zip(missing, self._compute_cost_bounds(missing)))
        return [known[config] for config in configs]

    def _bound_bytes(self, method: str):
        """(the automaton's ``method``, the bytes its bound may spell), or None where bounds do
        not apply: token hooks change states between tokens, and a bound is a token count
        only over bytes that are tokens by themselves."""
        found = getattr(self.automaton, method, None)
        if found is None or self._hooks or not self.vocab.single_byte_tokens:
            return None
        return found, self.vocab.single_byte_tokens

    def _bounds_apply(self) -> bool:
        """Whether completion bounds apply (``_bound_bytes``)."""
        return self._bound_bytes("completion_bounds") is not None

    def _defers_partials_under_budget(self) -> bool:
        """Whether a budget's new masks leave the states of tokens ending inside a character
        uncomputed, bounding them by where the character leads instead
        (``_max_end_bound_unresolved``): where bounds apply and every byte that goes on
        with a character (0x80-0xBF) is a token by itself."""
        found = self._partials_bounded
        if found is None:
            applies = self._bound_bytes("completion_bounds")
            continuing = ((1 << 0x40) - 1) << 0x80
            found = self._partials_bounded = applies is not None and applies[1] & continuing == continuing
        return found

    def _compute_cost_bounds(self, configs: list[int]) -> list[int]:
        # A completion the automaton knows without a search, of bytes that are tokens by
        # themselves: the first byte's token leads to a configuration whose bound is one
        # less, so masks that admit tokens by this bound always leave a way to finish.
        applies = self._bound_bytes("completion_bounds")
        if applies is None:
            return [UNREACHABLE] * len(configs)
        completion_bounds, spellable = applies
        return [int(bound) if bound < UNREACHABLE else UNREACHABLE for bound in completion_bounds(configs, spellable)]

    _bounds_tighten = True

    def _max_end_bound(self, entry: MaskEntry, limit: int) -> int:
        unresolved = self._max_end_bound_unresolved(entry)
        if unresolved is not None and unresolved <= limit:
            return unresolved
        values = self._distinct_end_costs(entry, limit)[1]
        return int(values.max()) if len(values) else 0

    def _max_end_bound_unresolved(self, entry: MaskEntry) -> int | None:
        """A number no allowed token's bound exceeds, the states not computed yet left so
        (None when every state is computed). A deferred token ends inside a character
        whose whole form leads where the group's ASCII byte does; the bytes that finish
        the character are tokens by themselves (``_defers_partials_under_budget``), so they
        and the bound's bytes from there are a completion: its bound is at most theirs. A
        member whose state a counted chain has not made is bounded by the state it counts
        on from (``ChainStates.made_or_counted_from``)."""
        if not entry.unresolved:
            return None
        deferred = entry.deferred or ()
        unwalked = entry.unwalked
        if unwalked is not None and unwalked.reach is None:
            return None
        partials = bool(deferred) or (unwalked is not None and unwalked.partials)
        if partials and not self._defers_partials_under_budget():
            # Deferred by a matcher without a budget (masks are shared), where finishing a
            # character takes bytes that are no tokens by themselves: no bound holds.
            return None
        values = self._cost_bounds(entry.distinct_ends(resolve=False).tolist())
        character_ends = [part.character_ends() for part in deferred]
        if unwalked is not None and unwalked.partials:
            # An unwalked character starts at one of ``reach`` and leads to another.
            character_ends.append(unwalked.reach)
        if character_ends:
            values += [min(UNREACHABLE, bound + MOST_BYTES_TO_FINISH_A_CHARACTER)
                       for bound in self._cost_bounds(distinct(np.concatenate(character_ends)).tolist())]
        return max(values, default=0)

    def _completion(self, config: int) -> bytes | None:
        automaton = self.automaton
        # The bound's own path, where there is one, needs no search; its greedy tokens are
        # never more than the bound.
        applies = self._bound_bytes("bound_completion")
        if applies is not None:
            bound_completion, spellable = applies
            found = bound_completion(config, spellable)
            if found is not None:
                return found
        search = getattr(automaton, "completion", automaton.shortest_completion)
        try:
            return search(config)
        except ValueError:
            return None

    def _greedy_token_step(self, config: int, completion: bytes, position: int) -> tuple[int, int] | None:
        """(configuration after, position in ``completion`` after) the longest token that
        spells ``completion`` on from ``position``, or None."""
        automaton = self.automaton
        trie = self.vocab.trie
        node, current, best = 0, config, None
        for offset in range(position, len(completion)):
            value = completion[offset]
            node = trie.child(node, value)
            if node < 0:
                break
            current = automaton.step(current, value)
            if current == DEAD:
                break
            if trie.has_tokens(node):
                end = self._boundary(current) if self._hooks else current
                if end != DEAD:
                    best = (end, offset + 1)
        if best is None and self._hooks:
            any_end = automaton.after_any_token(config)
            if any_end != DEAD:
                any_end = self._boundary(any_end)
                best = None if any_end == DEAD else (any_end, position)
        return best

    def _distinct_end_costs(self, entry: MaskEntry, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the distinct states ``entry``'s tokens lead to, the cost of each or, where that
        is within ``limit``, its bound, whether each value is the cost), kept with the
        mask: a budget that binds asks again at every step with fewer tokens left, and the
        costs depend on the states alone. Only states whose bound passes ``limit`` search
        a completion."""
        table = entry.end_table
        if table is None:
            distinct_ends = entry.distinct_ends()
            bounds = np.array(self._cost_bounds(distinct_ends.tolist()), dtype=np.int64)
            table = entry.end_table = (distinct_ends, bounds, np.zeros(len(distinct_ends), dtype=bool))
        distinct_ends, values, exact = table
        unknown = ~exact & (values > limit)
        if unknown.any():
            for index in np.flatnonzero(unknown).tolist():
                values[index] = self._cost(int(distinct_ends[index]))
            exact |= unknown
            entry.end_costs = None
        return table

    def _end_costs(self, entry: MaskEntry, limit: int) -> np.ndarray:
        distinct_ends, values, _exact = self._distinct_end_costs(entry, limit)
        if entry.end_costs is None:
            end_of_token = np.searchsorted(distinct_ends, entry.ends)
            entry.end_costs = np.minimum(values[end_of_token], _COST_CEILING).astype(np.int32)
        return entry.end_costs
