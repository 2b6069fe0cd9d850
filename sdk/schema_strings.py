"""JSON string encodings as grammar IR.

The grammar works on JSON text, the schema constrains the decoded string. A decoded
character has several spellings in JSON (``/`` or ``\\/``, a control character as a short
escape or ``\\u00XX``); a set of decoded characters is mapped to the set of its spellings
so that a regular language over decoded strings becomes one over JSON string bodies.

Where the schema constrains the content (pattern, format, excluded values), characters
other than ``"``, ``\\``, ``/`` and control characters are spelled raw: any accepted text
then decodes to a string that satisfies the constraint, which is what soundness needs.
Unconstrained strings and plain length limits accept every spelling, ``\\uXXXX`` included
(a surrogate pair counts as one character, a lone surrogate is never produced).
"""

from __future__ import annotations

import re
from functools import lru_cache

from surecall.engine.ir import (
    EMPTY,
    NOTHING,
    Alt,
    Bytes,
    ByteSet,
    CharSet,
    Complement,
    Intersect,
    Node,
    Repeat,
    Seq,
    alt,
    chars,
    literal,
    repeat,
    seq,
    star,
)

MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


class EncodingError(ValueError):
    """A regular expression node that has no exact JSON string encoding."""


def _hex_digit(value: int) -> Node:
    char = "0123456789abcdef"[value]
    return chars([(ord(char), ord(char)), (ord(char.upper()), ord(char.upper()))]) if value >= 10 else literal(char)


_HEX = chars([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)])
_ANY_CODE_POINT = chars([(0, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, MAX_CODE_POINT)])


def _after_escape_u() -> Node:
    # Four hex digits except D800-DFFF, or a surrogate pair: D800-DBFF, then an escape of DC00-DFFF.
    not_d = chars([(0x30, 0x39), (0x41, 0x43), (0x61, 0x63), (0x45, 0x46), (0x65, 0x66)])
    d = chars([(0x44, 0x44), (0x64, 0x64)])
    high = chars([(0x38, 0x39), (0x41, 0x42), (0x61, 0x62)])
    low = chars([(0x43, 0x46), (0x63, 0x66)])
    return alt(
        seq(not_d, _HEX, _HEX, _HEX),
        seq(d, alt(seq(chars([(0x30, 0x37)]), _HEX, _HEX), seq(high, _HEX, _HEX, "\\u", d, low, _HEX, _HEX))),
    )


# One decoded character in any spelling. Spellings that start alike share their start (one
# backslash, one "u"): each is an NFA position that every parse state inside a string holds.
ANY_STRING_CHAR = alt(
    chars([(0x20, 0x21), (0x23, 0x5B), (0x5D, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, MAX_CODE_POINT)]),
    seq("\\", alt(chars([(ord(c), ord(c)) for c in '"\\/bfnrt']), seq("u", _after_escape_u()))),
)

ANY_STRING_BODY = star(ANY_STRING_CHAR)


def _effective_ranges(charset: CharSet) -> list[tuple[int, int]]:
    ranges = sorted(charset.ranges)
    if not charset.negated:
        result = ranges
    else:
        result = []
        next_start = 0
        for lo, hi in ranges:
            if lo > next_start:
                result.append((next_start, lo - 1))
            next_start = max(next_start, hi + 1)
        if next_start <= MAX_CODE_POINT:
            result.append((next_start, MAX_CODE_POINT))
    return _subtract(result, _SURROGATES)


def _subtract(ranges: list[tuple[int, int]], removed: tuple[int, int]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in ranges:
        if hi < removed[0] or lo > removed[1]:
            out.append((lo, hi))
            continue
        if lo < removed[0]:
            out.append((lo, removed[0] - 1))
        if hi > removed[1]:
            out.append((removed[1] + 1, hi))
    return out


def _contains(ranges: list[tuple[int, int]], code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


def encode_char_ranges(ranges: list[tuple[int, int]]) -> Node:
    """The JSON spellings of any one character in ``ranges`` (code point ranges, inclusive)."""
    return _encoded_char_ranges(tuple(ranges))


@lru_cache(maxsize=4096)
def _encoded_char_ranges(ranges: tuple[tuple[int, int], ...]) -> Node:
    # Memoised: the same classes recur (every character of every known key, and the
    # rest of the alphabet next to them), and the nodes are immutable, so one copy
    # serves every use, in one schema and the next.
    ranges = list(ranges)
    raw = _subtract(_subtract(ranges, (0, 0x1F)), (0x22, 0x22))
    raw = _subtract(raw, (0x5C, 0x5C))
    options: list[Node] = []
    if raw:
        options.append(chars(raw))
    # Every escape after one backslash: a letter or sign, or u00 and two hex digits.
    controls = sorted({code for lo, hi in ranges for code in range(lo, min(hi, 0x1F) + 1)})
    letters = [sign for code, sign in ((0x22, '"'), (0x5C, "\\"), (0x2F, "/")) if _contains(ranges, code)]
    letters += [_SHORT_ESCAPES[code] for code in controls if code in _SHORT_ESCAPES]
    escapes: list[Node] = []
    if letters:
        escapes.append(chars([(ord(letter), ord(letter)) for letter in letters]))
    if len(controls) == 0x20:
        escapes.append(seq("u00", chars([(0x30, 0x31)]), _HEX))
    elif controls:
        escapes.append(seq("u00", alt(*(seq(_hex_digit(code >> 4), _hex_digit(code & 15)) for code in controls))))
    if escapes:
        options.append(seq("\\", alt(*escapes)))
    return alt(*options) if options else NOTHING


# One character in the spellings json.dumps uses (raw, short escapes, \u00XX for control
# characters): the unit of length-limited strings.
COUNTED_STRING_CHAR = encode_char_ranges(_subtract([(0, MAX_CODE_POINT)], _SURROGATES))


def encode_text(text: str) -> Node:
    """The JSON spellings of the decoded string ``text`` (without the quotes)."""
    if not text:
        return EMPTY
    # Most characters have one spelling, themselves: runs of them are one literal.
    parts: list[Node] = []
    for run in _ESCAPABLE_RUNS.split(text):
        if _ESCAPABLE_RUNS.fullmatch(run):
            parts.extend(_encode_char(char) for char in run)
        elif run:
            parts.append(literal(run))
    return seq(*parts)


#: Runs of the characters with more than one JSON spelling (escapes) or none in UTF-8 (lone
#: surrogates), captured by ``split``.
_ESCAPABLE_RUNS = re.compile(r'([\x00-\x1f"\\/\ud800-\udfff]+)')


def _encode_char(char: str) -> Node:
    code = ord(char)
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        # A lone surrogate (a JSON text may escape one) has no UTF-8 form: only its escape spells it.
        return seq("\\u", *(_hex_digit(int(digit, 16)) for digit in f"{code:04x}"))
    return encode_char_ranges([(code, code)])


def encode_regular(node: Node) -> Node:
    """Map a regular language over decoded characters to one over JSON string bodies."""
    if isinstance(node, Bytes):
        try:
            return encode_text(node.value.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise EncodingError("a byte literal that is not UTF-8 text") from error
    if isinstance(node, CharSet):
        return encode_char_ranges(_effective_ranges(node))
    if isinstance(node, ByteSet):
        if any(hi > 0x7F for _, hi in node.ranges):
            raise EncodingError("a byte class reaching beyond ASCII")
        return encode_char_ranges(list(node.ranges))
    if isinstance(node, Seq):
        return seq(*(encode_regular(item) for item in node.items))
    if isinstance(node, Alt):
        return alt(*(encode_regular(item) for item in node.items)) if node.items else NOTHING
    if isinstance(node, Repeat):
        return repeat(encode_regular(node.item), node.min, node.max)
    if isinstance(node, Intersect):
        # Every spelling of a text is one of the text's alone, so the spellings of an
        # intersection are those its items' spellings share, and a complement takes out the
        # spellings of what it complements, as long as some item spells only texts.
        if all(isinstance(item, Complement) for item in node.items):
            raise EncodingError("an intersection of complements only")
        return Intersect(tuple(
            Complement(encode_regular(item.item)) if isinstance(item, Complement) else encode_regular(item)
            for item in node.items
        ))
    raise EncodingError(f"a {type(node).__name__} node inside a string constraint")


ANY_DECODED_CHAR = _ANY_CODE_POINT


def _fixed_length(node: Node) -> int | None:
    """How many decoded characters every text of ``node`` has, None where they differ (or
    where ``node`` is not a plain regular node over characters)."""
    if isinstance(node, Bytes):
        try:
            return len(node.value.decode("utf-8"))
        except UnicodeDecodeError:
            return None
    if isinstance(node, CharSet):
        return 1
    if isinstance(node, ByteSet):
        return 1 if all(hi <= 0x7F for _, hi in node.ranges) else None
    if isinstance(node, Seq):
        lengths = [_fixed_length(item) for item in node.items]
        return None if None in lengths else sum(lengths)
    if isinstance(node, Alt):
        lengths = {_fixed_length(item) for item in node.items}
        return lengths.pop() if len(lengths) == 1 else None
    if isinstance(node, Repeat) and node.max == node.min:
        length = _fixed_length(node.item)
        return None if length is None else length * node.min
    return None


def within_length(node: Node, shortest: int, longest: int | None) -> Node | None:
    """The texts of ``node`` (a regular language over decoded characters) that have
    ``shortest`` to ``longest`` characters, as one node without an intersection; None
    where the bound cannot go inside ``node``'s shape.

    It goes inside a sequence with one part of varying length (the others' lengths are
    taken off the bound), each alternative, and a repetition of a fixed-length item (its
    count is bounded): ``^[A-Z][a-z0-9_]*$`` under ``maxLength: 64`` becomes
    ``[A-Z][a-z0-9_]{0,63}``, which the automaton counts, where intersecting a counted
    string with the pattern's automaton builds a state per pattern state and length."""
    fixed = _fixed_length(node)
    if fixed is not None:
        return node if shortest <= fixed and (longest is None or fixed <= longest) else NOTHING
    if isinstance(node, Alt):
        branches = [within_length(item, shortest, longest) for item in node.items]
        return None if None in branches else alt(*branches)
    if isinstance(node, Seq):
        lengths = [_fixed_length(item) for item in node.items]
        varying = [index for index, length in enumerate(lengths) if length is None]
        if len(varying) != 1:
            return None
        index = varying[0]
        others = sum(length for length in lengths if length is not None)
        if longest is not None and longest < others:
            return NOTHING
        inner = within_length(node.items[index], max(0, shortest - others),
                              None if longest is None else longest - others)
        if inner is None:
            return None
        return seq(*node.items[:index], inner, *node.items[index + 1:])
    if isinstance(node, Repeat):
        size = _fixed_length(node.item)
        if not size:
            return None
        fewest = max(node.min, -(-shortest // size))
        most = node.max
        if longest is not None:
            most = longest // size if most is None else min(most, longest // size)
        if most is not None and most < fewest:
            return NOTHING
        return repeat(node.item, fewest, most)
    return None


#: Code points with escapes in JSON, the other ASCII ones, and the rest (see strings_other_than).
_KEY_ZONES = (
    ((0x00, 0x1F), (0x22, 0x22), (0x2F, 0x2F), (0x5C, 0x5C)),
    ((0x20, 0x21), (0x23, 0x2E), (0x30, 0x5B), (0x5D, 0x7F)),
    ((0x80, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, MAX_CODE_POINT)),
)


def strings_other_than(values: list[str]) -> Node:
    """JSON string bodies whose decoded value is none of ``values`` (built on a trie)."""
    # Objects of one shape recur all over a large schema, each naming the same keys.
    return _strings_other_than(tuple(sorted(set(values))))


@lru_cache(maxsize=256)
def _strings_other_than(values: tuple[str, ...]) -> Node:
    trie: dict = {}
    for value in values:
        node = trie
        for char in value:
            node = node.setdefault(char, {})
        node[None] = True
    any_rest = star(encode_char_ranges([(0, MAX_CODE_POINT)]))
    # The characters leaving the keys at a node, by zone: known keys are mostly plain
    # ASCII, so the characters with escapes and those past ASCII are whole zones at almost
    # every node, one class each, which the automaton builds once for all of them.
    whole_zones = [encode_char_ranges(list(zone)) for zone in _KEY_ZONES]

    def leaving(codes: list[int]) -> list[Node]:
        parts = []
        for zone, whole in zip(_KEY_ZONES, whole_zones):
            inside = [code for code in codes if any(low <= code <= high for low, high in zone)]
            if not inside:
                parts.append(whole)
                continue
            rest = list(zone)
            for code in inside:
                rest = _subtract(rest, (code, code))
            if rest:
                parts.append(encode_char_ranges(rest))
        return parts

    def build(node: dict) -> Node:
        children = sorted(key for key in node if key is not None)
        # The options are distinct by construction (the end of the string, one per next
        # character, the rest of the alphabet) and none is an Alt: they make an Alt as
        # they are, without alt()'s duplicate check, which hashes every new subtree.
        options: list[Node] = [] if None in node else [EMPTY]
        for char in children:
            options.append(seq(encode_char_ranges([(ord(char), ord(char))]), build(node[char])))
        parts = leaving([ord(char) for char in children])
        if parts:
            options.append(seq(parts[0] if len(parts) == 1 else Alt(tuple(parts)), any_rest))
        if not options:
            return NOTHING
        return options[0] if len(options) == 1 else Alt(tuple(options))

    return build(trie)
