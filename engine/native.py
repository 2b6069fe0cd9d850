"""The optional native code (``_native*.c``) and whether this install has it.

``walk`` is the matcher's trie walk (over a trie as ``trie_tables`` holds it), ``run_tails`` and ``live_exits`` the token groups'
exit paths, ``successor_stats`` how a configuration's ASCII successors fall by token
group, ``product_moves`` an intersection's moves from one state, ``set_bits`` the packing of token ids into mask words and ``bit_ids`` its undoing; ``states`` the automaton's
closure, row scan and interning (``nfa_tables``, ``close``, ``plain_scans``, ``frozen``,
``intern_info``; ``successor``, which closes and interns a row entry's configuration in
the containers an automaton binds to its tables with ``bind``; ``entry`` and ``fill_row``,
which fill a row entry, a whole row or the row's parts below a byte, and which the walks
call directly; ``successors``, a row's successors by some bytes, filling the parts they
fall in; ``count_shifted``, a configuration with its repetition counts moved on, and
``shifted_counts``, whether a move only counts on; ``items``, a configuration's items,
made on first use for one built in plain form, and ``intern``, which finds such a one too;
``utf8_agrees``;
``partition``, which splits the bytes by the byte sets a row scans; ``bound_tables`` and
``completion_bounds``, a token budget's completion bounds of many configurations). The
extension is built when the package is installed with a C compiler at hand; without one
the matcher walks the trie with numpy and the automaton builds its states in Python, with
the same results, more slowly.
Setting ``SURECALL_NATIVE=0`` in the environment turns the extension off.
"""

from __future__ import annotations

import os

try:
    from . import _native
except ImportError:  # built without a C compiler, or from a source tree never installed
    _native = None

AVAILABLE = _native is not None and os.environ.get("SURECALL_NATIVE", "1") != "0"
walk = _native.walk if AVAILABLE else None
trie_tables = _native.trie_tables if AVAILABLE else None
run_tails = _native.run_tails if AVAILABLE else None
live_exits = _native.live_exits if AVAILABLE else None
group_exits = _native.group_exits if AVAILABLE else None
set_bits = _native.set_bits if AVAILABLE else None
bit_ids = _native.bit_ids if AVAILABLE else None
successor_stats = _native.successor_stats if AVAILABLE else None
product_moves = _native.product_moves if AVAILABLE else None
states = _native if AVAILABLE else None
