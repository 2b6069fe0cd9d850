"""The optional native trie walk (``_native.c``) and whether this install has it.

The extension is built when the package is installed with a C compiler at hand; without
one the matcher walks the trie with numpy, which gives the same masks more slowly.
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
