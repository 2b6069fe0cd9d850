"""Pausing Python's cyclic garbage collector while a bulk build runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off (back on after it, if it was on).

    Building an automaton or its distance tables makes tens of thousands of small lists
    and tuples; each few hundred of them start a collection that walks every container
    alive, the automata already built included, which can cost several times the build
    itself. Nothing the builds make is cyclic garbage, so pausing loses nothing.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
