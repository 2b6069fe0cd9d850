"""Pausing Python's cyclic garbage collector while a bulk build runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(*, promote: bool = False) -> Iterator[None]:
    """Run the block with the cyclic collector off (back on after it, if it was on).

    Building an automaton or its distance tables makes tens of thousands of small lists
    and tuples; each few hundred of them start a collection that walks every container
    alive, the automata already built included, which can cost several times the build
    itself. Nothing the builds make is cyclic garbage, so pausing loses nothing.

    What the block made is still in the youngest generation afterwards, and the next
    young collections walk all of it, twice before it is old: inside the first masks,
    a millisecond or more each. With ``promote`` (after a whole build, when the collector
    was on) one collection of the young generations right after the block makes it old
    at once, so that the build pays for it instead of the first tokens.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            if promote:
                gc.collect(1)
