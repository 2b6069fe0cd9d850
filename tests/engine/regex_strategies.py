"""Hypothesis strategies for random regular expressions over the supported subset.

Each strategy yields ``(ours, python)``: the pattern for ``regex_to_ir`` and an
equivalent pattern for Python's ``re`` (compiled with ``re.ASCII``), so the two can be
compared on random strings.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

# ECMA-262 white space, which is what \s means here; Python's ASCII \s is narrower.
PY_SPACE = "\\t-\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
ALPHABET = ["a", "b", "c", "z", "A", "0", "7", "_", "-", ".", " ", "\n", "\t", "é", "ß", "€", "😀", "\u00a0", "\u3000", "\x00", "]"]


def _class_char(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[" else ch


@st.composite
def class_atoms(draw):
    """(ours, python) for one item inside [...]."""
    kind = draw(st.sampled_from(["char", "range", "d", "w", "s", "D", "W", "escape"]))
    if kind == "char":
        ch = _class_char(draw(st.sampled_from(ALPHABET)))
        return ch, ch
    if kind == "range":
        lo, hi = sorted(draw(st.lists(st.sampled_from(ALPHABET), min_size=2, max_size=2)), key=ord)
        text = f"{_class_char(lo)}-{_class_char(hi)}"
        return text, text
    if kind == "escape":
        cp = ord(draw(st.sampled_from(ALPHABET)))
        return f"\\u{{{cp:x}}}", f"\\U{cp:08x}"
    if kind == "s":
        return "\\s", PY_SPACE
    return "\\" + kind, "\\" + kind


@st.composite
def leaves(draw):
    """(ours, python) for an atom outside classes."""
    kind = draw(st.sampled_from(["literal", "literal", "dot", "class", "shorthand", "escape"]))
    if kind == "literal":
        ch = draw(st.sampled_from(ALPHABET))
        return re.escape(ch), re.escape(ch)
    if kind == "dot":
        return ".", "."
    if kind == "shorthand":
        name = draw(st.sampled_from("dwsDWS"))
        if name == "s":
            return "\\s", f"[{PY_SPACE}]"
        if name == "S":
            return "\\S", f"[^{PY_SPACE}]"
        return "\\" + name, "\\" + name
    if kind == "escape":
        cp = ord(draw(st.sampled_from(ALPHABET)))
        if cp < 0x100 and draw(st.booleans()):
            return f"\\x{cp:02x}", f"\\x{cp:02x}"
        if cp < 0x10000:
            return f"\\u{cp:04x}", f"\\u{cp:04x}"
        return f"\\u{{{cp:x}}}", f"\\U{cp:08x}"
    items = draw(st.lists(class_atoms(), min_size=1, max_size=3))
    negated = "^" if draw(st.booleans()) else ""
    return "[" + negated + "".join(i[0] for i in items) + "]", "[" + negated + "".join(i[1] for i in items) + "]"


def _extend(children):
    def group(pair):
        kind = pair[1]
        ours, py = pair[0]
        if kind == 0:
            return f"(?:{ours})", f"(?:{py})"
        if kind == 1:
            return f"(?P<g>{ours})", f"({py})"  # Python rejects repeated group names
        return f"({ours})", f"({py})"

    def quantify(pair):
        (ours, py), (quantifier, lazy) = pair
        suffix = quantifier + ("?" if lazy else "")
        return f"(?:{ours}){suffix}", f"(?:{py}){suffix}"

    # {4,} and up are compiled as counted repetitions, the rest unrolled.
    quantifiers = st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}", "{1,3}", "{4}", "{2,5}", "{0,6}"])
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("".join(x[0] for x in xs), "".join(x[1] for x in xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("|".join(x[0] for x in xs), "|".join(x[1] for x in xs))),
        st.tuples(children, st.integers(0, 2)).map(group),
        st.tuples(children, st.tuples(quantifiers, st.booleans())).map(quantify),
    )


regexes = st.recursive(leaves(), _extend, max_leaves=6)
