"""Regular expressions to grammar IR.

Supported subset (full-match semantics; Python ``re`` / ECMA-262 syntax):

* literal characters and escapes: ``\\n \\t \\r \\f \\v \\0 \\a \\e \\cX \\xNN \\uXXXX \\u{X...}
  \\UXXXXXXXX``, and any escaped punctuation;
* character classes ``[...]`` / ``[^...]`` with ranges and the shorthands below, ``.``
  (any character except ``\\n``);
* ``\\d \\w \\s`` and their negations ``\\D \\W \\S`` (ASCII digits and word characters, as
  in ECMA-262 and JSON Schema; ``\\s`` is ECMA-262's Unicode white space);
* Unicode general categories ``\\p{L}``, ``\\p{Lu}``, ``\\p{Letter}``, ``\\p{gc=Nd}``, ... and
  their negations ``\\P{..}`` (from Python's ``unicodedata``; scripts are not supported);
* groups ``(...)``, ``(?:...)``, named groups ``(?P<name>...)`` / ``(?<name>...)``,
  comments ``(?#...)``;
* alternation ``|`` and the quantifiers ``* + ? {m} {m,} {m,n}``, greedy or lazy
  (lazy ones match the same language); a ``{`` that does not start one of these is a
  literal, as in ECMA-262 (so ``x{,2}`` matches the text ``x{,2}``);
* ``^`` at the start and ``$`` at the end (of the whole pattern or of a top-level
  alternative).

Everything else (lookaround, backreferences, ``\\b``, Unicode scripts, inline flags,
possessive quantifiers, ``^``/``$`` in the middle) raises ``UnsupportedRegexError``
naming the position.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from .errors import GrammarError, UnsupportedRegexError
from .ir import MAX_CODE_POINT, MAX_GROUP_DEPTH, NOTHING, CharSet, Node, alt, chars, literal, repeat, seq

#: Largest repetition count accepted in ``{m,n}``.
MAX_REPEAT = 10_000

_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_SHORTHANDS = {"d": (_DIGIT, False), "D": (_DIGIT, True), "w": (_WORD, False), "W": (_WORD, True),
               "s": (_SPACE, False), "S": (_SPACE, True)}
_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}
_UNSUPPORTED_ESCAPES = {
    "b": "word boundaries (\\b)",
    "B": "word boundaries (\\B)",
    "A": "anchors (\\A)",
    "Z": "anchors (\\Z)",
    "z": "anchors (\\z)",
    "G": "anchors (\\G)",
    "k": "backreferences (\\k<name>)",
    "N": "named characters (\\N{...})",
}


_CATEGORY_NAMES = {
    "Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
    "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
    "Decimal_Number": "Nd", "Letter_Number": "Nl", "Other_Number": "No", "Punctuation": "P",
    "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z", "Space_Separator": "Zs",
    "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C", "Control": "Cc",
    "Format": "Cf", "Surrogate": "Cs", "Private_Use": "Co", "Unassigned": "Cn",
}


@lru_cache(maxsize=1)
def _category_table() -> dict[str, tuple[tuple[int, int], ...]]:
    """Code point ranges of every two-letter general category (built once, on first use)."""
    ranges: dict[str, list[list[int]]] = {}
    previous = None
    for cp in range(MAX_CODE_POINT + 1):
        category = unicodedata.category(chr(cp))
        if category == previous:
            ranges[category][-1][1] = cp
        else:
            ranges.setdefault(category, []).append([cp, cp])
            previous = category
    return {name: tuple((lo, hi) for lo, hi in spans) for name, spans in ranges.items()}


def _category_ranges(name: str) -> tuple[tuple[int, int], ...] | None:
    for prefix in ("gc=", "General_Category="):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = _CATEGORY_NAMES.get(name, name)
    table = _category_table()
    if name == "LC":
        return table.get("Lu", ()) + table.get("Ll", ()) + table.get("Lt", ())
    if len(name) == 1:
        found = tuple(span for category, spans in table.items() if category[0] == name for span in spans)
        return found or None
    return table.get(name)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _complement(ranges) -> tuple[tuple[int, int], ...]:
    out, nxt = [], 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return tuple(out)


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pos = 0

    # -- helpers ----------------------------------------------------------------------
    def error(self, message: str, pos: int | None = None, unsupported: bool = False) -> GrammarError:
        at = self.pos if pos is None else pos
        cls = UnsupportedRegexError if unsupported else GrammarError
        return cls(f"{message} at position {at} in regex {self.pattern!r}", column=at + 1)

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.pattern[i] if i < len(self.pattern) else ""

    def take(self) -> str:
        ch = self.peek()
        if not ch:
            raise self.error("unexpected end of pattern")
        self.pos += 1
        return ch

    # -- grammar ----------------------------------------------------------------------
    def parse(self) -> Node:
        node, _ = self.alternation(at_start=True, depth=0)
        if self.pos < len(self.pattern):
            raise self.error("unbalanced ')'")
        return node

    def alternation(self, at_start: bool, depth: int) -> tuple[Node, int | None]:
        """Returns the node and the position of a ``$`` ending it (every branch must end with one)."""
        branches = []
        ends: list[int | None] = []
        while True:
            node, ended = self.sequence(at_start, depth)
            branches.append(node)
            ends.append(ended)
            if self.peek() == "|":
                self.pos += 1
                continue
            break
        anchors = [end for end in ends if end is not None]
        if anchors and len(anchors) < len(ends) and depth > 0:
            raise self.error("'$' is only supported at the end of the pattern", anchors[0], True)
        return alt(*branches) if len(branches) > 1 else branches[0], (anchors[0] if anchors else None)

    def sequence(self, at_start: bool, depth: int) -> tuple[Node, int | None]:
        items: list[Node] = []
        anchored_end_at = None
        while True:
            ch = self.peek()
            if not ch or ch == "|" or (ch == ")" and depth > 0):
                return seq(*items), anchored_end_at
            if ch == ")":
                raise self.error("unbalanced ')'")
            start = self.pos
            if anchored_end_at is not None:
                raise self.error("'$' is only supported at the end of the pattern", anchored_end_at, True)
            if ch == "^":
                self.pos += 1
                if not at_start or items:
                    raise self.error("'^' is only supported at the start of the pattern", start, True)
                continue
            if ch == "$":
                self.pos += 1
                anchored_end_at = start
                continue
            if ch in "*+?":
                raise self.error(f"nothing to repeat with {ch!r}")
            if ch == "{" and self._quantifier_ahead():
                raise self.error("nothing to repeat with '{'")
            atom, ended = self.atom(at_start and not items, depth)
            if ended is not None:
                anchored_end_at = ended
            atom = self.quantified(atom, ended is not None)
            items.append(atom)

    def _quantifier_ahead(self) -> bool:
        end = self.pattern.find("}", self.pos)
        if end < 0:
            return False
        body = self.pattern[self.pos + 1 : end]
        lo, comma, hi = body.partition(",")
        return _is_number(lo) and (not comma or not hi or _is_number(hi))

    def quantified(self, atom: Node, ended: bool) -> Node:
        while True:
            ch = self.peek()
            start = self.pos
            if ch == "*":
                lo, hi = 0, None
                self.pos += 1
            elif ch == "+":
                lo, hi = 1, None
                self.pos += 1
            elif ch == "?":
                lo, hi = 0, 1
                self.pos += 1
            elif ch == "{" and self._quantifier_ahead():
                end = self.pattern.index("}", self.pos)
                body = self.pattern[self.pos + 1 : end]
                self.pos = end + 1
                lo_text, comma, hi_text = body.partition(",")
                lo = int(lo_text)
                hi = (None if not hi_text else int(hi_text)) if comma else lo
                if hi is not None and hi < lo:
                    raise self.error("bad repetition bounds (min > max)", start)
                if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
                    raise self.error(f"repetition count above {MAX_REPEAT}", start, True)
            else:
                return atom
            if ended:
                raise self.error("quantified '$'", start, True)
            if self.peek() == "?":
                self.pos += 1  # lazy: same language
            elif self.peek() == "+":
                raise self.error("possessive quantifiers", self.pos, True)
            atom = repeat(atom, lo, hi)
            if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._quantifier_ahead()):
                raise self.error("multiple repeat")

    def atom(self, at_start: bool, depth: int) -> tuple[Node, int | None]:
        ch = self.take()
        if ch == "(":
            return self.group(at_start, depth)
        if ch == "[":
            return self.char_class(), None
        if ch == ".":
            return CharSet(((0x0A, 0x0A),), True), None
        if ch == "\\":
            start = self.pos - 1
            ranges, negated, code_point = self.escape(in_class=False)
            if code_point is not None:
                return self._literal(code_point, start), None
            return chars(ranges, negated), None
        return self._literal(ord(ch), self.pos - 1), None

    def _literal(self, code_point: int, at: int) -> Node:
        if 0xD800 <= code_point <= 0xDFFF:
            # Text is matched as UTF-8, which has no encoding for a lone surrogate.
            raise self.error("a surrogate code point, which UTF-8 cannot encode,", at)
        return literal(chr(code_point))

    def group(self, at_start: bool, depth: int) -> tuple[Node, int | None]:
        start = self.pos - 1
        if self.peek() == "?":
            self.pos += 1
            kind = self.take()
            if kind == ":":
                pass
            elif kind == "#":
                end = self.pattern.find(")", self.pos)
                if end < 0:
                    raise self.error("missing ')' after comment", start)
                self.pos = end + 1
                return seq(), None
            elif kind == "P" and self.peek() == "<":
                self.pos += 1
                self._group_name(start)
            elif kind == "P" and self.peek() == "=":
                raise self.error("backreferences", start, True)
            elif kind == "<" and self.peek() in ("=", "!"):
                raise self.error("lookbehind", start, True)
            elif kind == "<":
                self._group_name(start)
            elif kind in ("=", "!"):
                raise self.error("lookahead", start, True)
            elif kind == ">":
                raise self.error("atomic groups", start, True)
            else:
                raise self.error("inline flags and other group extensions", start, True)
        if depth >= MAX_GROUP_DEPTH:
            raise self.error(f"groups nested more than {MAX_GROUP_DEPTH} deep", start, True)
        node, ended = self.alternation(at_start, depth + 1)
        if self.peek() != ")":
            raise self.error("missing ')'", start)
        self.pos += 1
        return node, ended

    def _group_name(self, start: int) -> None:
        end = self.pattern.find(">", self.pos)
        name = self.pattern[self.pos : end] if end >= 0 else ""
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise self.error("bad group name", start)
        self.pos = end + 1

    def escape(self, in_class: bool) -> tuple[tuple, bool, int | None]:
        """After a backslash: (ranges, negated, None) for a class, or (None, False, code point)."""
        start = self.pos - 1
        ch = self.take()
        if ch in _SHORTHANDS:
            ranges, negated = _SHORTHANDS[ch]
            return ranges, negated, None
        if ch in _SIMPLE_ESCAPES:
            return (), False, _SIMPLE_ESCAPES[ch]
        if in_class and ch == "b":
            return (), False, 0x08
        if ch == "0" and not self.peek().isdigit():
            return (), False, 0
        if ch.isdigit():
            raise self.error("backreferences and octal escapes", start, True)
        if ch == "x":
            return (), False, self._hex(2, start)
        if ch == "u":
            if self.peek() == "{":
                end = self.pattern.find("}", self.pos)
                digits = self.pattern[self.pos + 1 : end] if end > 0 else ""
                if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits):
                    raise self.error("bad \\u{...} escape", start)
                self.pos = end + 1
                return (), False, self._check_code_point(int(digits, 16), start)
            return (), False, self._hex(4, start)
        if ch == "U":
            return (), False, self._hex(8, start)
        if ch in ("p", "P"):
            if self.peek() != "{":
                raise self.error(f"expected '{{' after \\{ch}", start)
            end = self.pattern.find("}", self.pos)
            name = self.pattern[self.pos + 1 : end] if end > 0 else ""
            ranges = _category_ranges(name) if name else None
            if ranges is None:
                raise self.error(f"Unicode property {name!r} (only general categories are supported)", start, True)
            self.pos = end + 1
            return tuple(sorted(ranges)), ch == "P", None
        if ch == "c":
            letter = self.take()
            if not letter.isascii() or not letter.isalpha():
                raise self.error("bad \\c escape", start)
            return (), False, ord(letter) % 32
        if ch in _UNSUPPORTED_ESCAPES:
            raise self.error(_UNSUPPORTED_ESCAPES[ch], start, True)
        if ch.isascii() and ch.isalnum():
            raise self.error(f"unknown escape \\{ch}", start, True)
        return (), False, ord(ch)

    def _hex(self, count: int, start: int) -> int:
        digits = self.pattern[self.pos : self.pos + count]
        if len(digits) != count or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise self.error(f"bad escape: expected {count} hex digits", start)
        self.pos += count
        return self._check_code_point(int(digits, 16), start)

    def _check_code_point(self, value: int, start: int) -> int:
        if value > MAX_CODE_POINT:
            raise self.error("code point out of range", start)
        return value

    def char_class(self) -> Node:
        start = self.pos - 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            ch = self.peek()
            if not ch:
                raise self.error("unterminated character class", start)
            if ch == "]" and not first:
                self.pos += 1
                break
            first = False
            lo_pos = self.pos
            low, low_set = self._class_atom()
            if low_set is not None:
                ranges.extend(low_set)
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high, high_set = self._class_atom()
                if high_set is not None:
                    raise self.error("bad character range", lo_pos)
                if high < low:
                    raise self.error("bad character range (reversed)", lo_pos)
                ranges.append((low, high))
            else:
                ranges.append((low, low))
        if not ranges:
            return NOTHING if not negated else CharSet((), True)
        return chars(ranges, negated)

    def _class_atom(self) -> tuple[int, list | None]:
        ch = self.take()
        if ch == "[" and self.peek() in (":", "=", "."):
            raise self.error("POSIX character classes", self.pos - 1, True)
        if ch != "\\":
            return ord(ch), None
        ranges, negated, code_point = self.escape(in_class=True)
        if code_point is not None:
            return code_point, None
        return 0, list(_complement(ranges) if negated else ranges)


def regex_to_ir(pattern: str) -> Node:
    """Compile a regular expression (full-match semantics) into grammar IR."""
    if not isinstance(pattern, str):
        raise TypeError(f"regex pattern must be str, got {type(pattern).__name__}")
    return _Parser(pattern).parse()
