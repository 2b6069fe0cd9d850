"""The native extension is optional for users, but CI and development builds must have it.

A C file that no longer compiles leaves the package on its pure Python path (or, in a
source tree, on the last extension that did compile), which passes every behaviour test
while running many times slower. ``SURECALL_REQUIRE_NATIVE=1`` (set by CI) turns that
into a failure here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from surecall.engine import native

REQUIRED = os.environ.get("SURECALL_REQUIRE_NATIVE") == "1"


@pytest.mark.skipif(not REQUIRED, reason="SURECALL_REQUIRE_NATIVE=1 is not set")
def test_the_native_extension_is_built_from_the_current_sources():
    assert native.AVAILABLE, "the native extension is missing: did engine/_native*.c compile?"
    assert native.walk is not None and native.states is not None
    built = Path(native._native.__file__)
    sources = sorted(built.parent.glob("_native*.c")) + sorted(built.parent.glob("_native*.h"))
    stale = [source.name for source in sources if source.stat().st_mtime > built.stat().st_mtime]
    assert not stale, f"{built.name} is older than {stale}: the last build of the extension failed"
