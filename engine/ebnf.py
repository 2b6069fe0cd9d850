"""The EBNF dialect: parsing into grammar IR and printing IR back.

Syntax::

    name ::= expression ;             (* a rule; '=' works as well as '::=' *)
    'literal'  "literal"              (* escapes: \\n \\t \\r \\f \\v \\0 \\\\ \\' \\" \\uXXXX \\u{X...}
                                         \\UXXXXXXXX, and \\xNN for the raw byte NN *)
    #'regex'  #"regex"                (* a regular expression terminal (see regex.py) *)
    a b   a , b                       (* concatenation *)
    a | b   ( ... )                   (* alternation, grouping *)
    x*  x+  x?  x{m}  x{m,}  x{m,n}   (* repetition *)
    any!                              (* exactly one token of the vocabulary *)
    except!('s1', 's2'[, n])          (* text containing none of the strings (at most n tokens) *)
    except!(rule[, n])                (* the rule must expand to an alternation of strings *)
    intersect!(a, b, ...)             (* strings matched by every (regular) expression *)
    complement!(a)                    (* as an argument of intersect!: strings a does not match *)

The start rule is ``start`` if defined, else the first rule. Errors name the line,
column and rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import GrammarError
from .ir import (
    MAX_GROUP_DEPTH,
    Alt,
    AnyToken,
    Bytes,
    ByteSet,
    CharSet,
    Except,
    Complement,
    Intersect,
    Node,
    Ref,
    Repeat,
    Seq,
    alt,
    repeat,
    seq,
)
from .regex import regex_to_ir

#: Most strings an ``except!(rule)`` may expand to.
MAX_EXCEPT_STRINGS = 1_000

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_INT = re.compile(r"[0-9]+")
_HEX = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0", "a": "\a", "b": "\b",
                   "\\": "\\", "'": "'", '"': '"'}


@dataclass(frozen=True)
class _ExceptRule(Node):
    """``except!(rule, n)`` until every rule is known."""

    name: str
    max_tokens: int | None
    line: int
    column: int
    rule: str | None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.rule: str | None = None
        self.references: list[tuple[str, int, str]] = []
        # Inside the argument list of intersect!(..) a comma separates arguments
        # instead of concatenating (again allowed inside parentheses there).
        self.in_arguments = False
        self.except_rules: list[_ExceptRule] = []
        self.group_depth = 0

    # -- positions and errors ---------------------------------------------------------
    def location(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, column

    def error(self, message: str, pos: int | None = None, rule: str | None = None) -> GrammarError:
        line, column = self.location(self.pos if pos is None else pos)
        return GrammarError(message, line=line, column=column, rule=rule or self.rule)

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch.isspace():
                self.pos += 1
            elif text.startswith("(*", self.pos):
                end = text.find("*)", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.pos = end + 2
            else:
                break

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, token: str, what: str) -> None:
        self.skip()
        if not self.text.startswith(token, self.pos):
            found = self.text[self.pos : self.pos + 10] or "end of input"
            raise self.error(f"expected {what}, found {found!r}")
        self.pos += len(token)

    def name(self) -> str | None:
        self.skip()
        match = _NAME.match(self.text, self.pos)
        if not match:
            return None
        self.pos = match.end()
        return match.group()

    # -- grammar ----------------------------------------------------------------------
    def parse(self) -> tuple[dict[str, Node], str, dict[str, int]]:
        rules: dict[str, Node] = {}
        defined_at: dict[str, int] = {}
        while self.peek():
            self.rule = None
            start = self.pos
            name = self.name()
            if name is None:
                raise self.error("expected a rule name")
            if self.text.startswith("!", self.pos):
                raise self.error(f"'{name}!' cannot be defined as a rule", start)
            if name in rules:
                raise self.error(f"rule {name!r} is defined twice", start, rule=name)
            self.rule = name
            self.skip()
            if self.text.startswith("::=", self.pos):
                self.pos += 3
            elif self.text.startswith("=", self.pos):
                self.pos += 1
            else:
                raise self.error("expected '::=' after the rule name")
            body = self.alternation()
            if self.peek() != ";":
                if self.peek() == ")":
                    raise self.error("unbalanced ')'")
                raise self.error("expected ';' at the end of the rule")
            self.pos += 1
            self.rule = None
            rules[name] = body
            defined_at[name] = start
        if not rules:
            raise self.error("the grammar has no rules")
        return rules, ("start" if "start" in rules else next(iter(rules))), defined_at

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        return alt(*branches) if len(branches) > 1 else branches[0]

    def sequence(self) -> Node:
        items: list[Node] = []
        while True:
            ch = self.peek()
            if ch == "," and not self.in_arguments:
                self.pos += 1
                continue
            if ch == ",":
                return seq(*items)
            if not ch or ch in ";|)":
                return seq(*items)
            items.append(self.term())

    def term(self) -> Node:
        node = self.factor()
        while True:
            ch = self.peek()
            start = self.pos
            if ch in ("*", "+", "?"):
                self.pos += 1
                node = repeat(node, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[ch])
            elif ch == "{":
                self.pos += 1
                low = self.integer("a repetition count")
                high: int | None = low
                if self.peek() == ",":
                    self.pos += 1
                    high = None if self.peek() == "}" else self.integer("a repetition bound")
                self.expect("}", "'}'")
                if high is not None and high < low:
                    raise self.error(f"bad repetition bounds {{{low},{high}}}", start)
                node = repeat(node, low, high)
            else:
                return node

    def integer(self, what: str) -> int:
        self.skip()
        match = _INT.match(self.text, self.pos)
        if not match:
            raise self.error(f"expected {what}")
        self.pos = match.end()
        return int(match.group())

    def factor(self) -> Node:
        ch = self.peek()
        start = self.pos
        if ch in ("'", '"'):
            return Bytes(self.literal())
        if ch == "#":
            self.pos += 1
            if self.peek() not in ("'", '"'):
                raise self.error("expected a quoted regular expression after '#'")
            quote_pos = self.pos
            pattern = self.raw_string()
            try:
                return regex_to_ir(pattern)
            except GrammarError as exc:
                offset = (exc.column or 1) - 1
                line, column = self.location(quote_pos + 1 + offset)
                raise type(exc)(exc.message, line=line, column=column, rule=self.rule) from None
        if ch == "(":
            if self.group_depth >= MAX_GROUP_DEPTH:
                raise self.error(f"groups nested more than {MAX_GROUP_DEPTH} deep")
            self.pos += 1
            outer, self.in_arguments = self.in_arguments, False
            self.group_depth += 1
            node = self.alternation()
            self.group_depth -= 1
            self.in_arguments = outer
            if self.peek() != ")":
                raise self.error("expected ')'", start)
            self.pos += 1
            return node
        name = self.name()
        if name is None:
            found = ch or "end of input"
            raise self.error(f"unexpected {found!r}")
        if self.text.startswith("!", self.pos):
            self.pos += 1
            return self.special(name, start)
        self.references.append((name, start, self.rule))
        return Ref(name)

    def special(self, name: str, start: int) -> Node:
        if name == "any":
            return AnyToken()
        if name == "except":
            return self.except_args(start)
        if name == "intersect":
            self.expect("(", "'(' after intersect!")
            outer, self.in_arguments = self.in_arguments, True
            items = [self.alternation()]
            while self.peek() == ",":
                self.pos += 1
                items.append(self.alternation())
            self.in_arguments = outer
            self.expect(")", "')'")
            return Intersect(tuple(items))
        if name == "complement":
            if not self.in_arguments:
                raise self.error("complement! is only allowed as an argument of intersect!", start)
            self.expect("(", "'(' after complement!")
            item = self.alternation()
            self.expect(")", "')'")
            return Complement(item)
        raise self.error(f"unknown special nonterminal '{name}!'", start)

    def except_args(self, start: int) -> Node:
        self.expect("(", "'(' after except!")
        strings: list[bytes] = []
        rule_name = None
        limit = None
        rule_pos = self.pos
        while True:
            ch = self.peek()
            if ch in ("'", '"'):
                if rule_name is not None:
                    raise self.error("except! takes either strings or one rule name")
                literal_pos = self.pos
                value = self.literal()
                if not value:
                    raise self.error("except! strings must not be empty", literal_pos)
                strings.append(value)
            elif ch.isdigit():
                limit = self.integer("a token limit")
                if self.peek() != ")":
                    raise self.error("the token limit must be the last argument of except!")
            else:
                rule_pos = self.pos
                found = self.name()
                if found is None or strings or rule_name is not None:
                    raise self.error("expected strings, one rule name or a token limit in except!")
                rule_name = found
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect(")", "')' closing except!")
            break
        if rule_name is not None:
            line, column = self.location(rule_pos)
            placeholder = _ExceptRule(rule_name, limit, line, column, self.rule)
            self.references.append((rule_name, rule_pos, self.rule))
            return placeholder
        if not strings:
            raise self.error("except! needs at least one string", start)
        return Except(tuple(strings), limit)

    # -- strings ----------------------------------------------------------------------
    def raw_string(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        i = self.pos + 1
        while i < len(self.text):
            ch = self.text[i]
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                self.pos = i + 1
                return self.text[start + 1 : i]
            i += 1
        raise self.error("unterminated string", start)

    def literal(self) -> bytes:
        start = self.pos
        raw = self.raw_string()
        out = bytearray()
        i = 0
        while i < len(raw):
            ch = raw[i]
            if ch != "\\":
                out += ch.encode("utf-8")
                i += 1
                continue
            escape_pos = start + 1 + i
            code = raw[i + 1] if i + 1 < len(raw) else ""
            if code in _SIMPLE_ESCAPES:
                out += _SIMPLE_ESCAPES[code].encode("utf-8")
                i += 2
            elif code == "x":
                digits = raw[i + 2 : i + 4]
                if len(digits) != 2 or any(c not in _HEX for c in digits):
                    raise self.error("bad \\x escape: expected two hex digits", escape_pos)
                out.append(int(digits, 16))
                i += 4
            elif code in ("u", "U"):
                if code == "u" and raw[i + 2 : i + 3] == "{":
                    end = raw.find("}", i + 3)
                    digits = raw[i + 3 : end] if end > 0 else ""
                    i = end + 1
                else:
                    width = 4 if code == "u" else 8
                    digits = raw[i + 2 : i + 2 + width]
                    if len(digits) != width:
                        digits = ""
                    i += 2 + width
                if not digits or any(c not in _HEX for c in digits) or int(digits, 16) > 0x10FFFF:
                    raise self.error(f"bad \\{code} escape", escape_pos)
                value = int(digits, 16)
                if 0xD800 <= value <= 0xDFFF:
                    raise self.error("surrogate code points cannot be encoded", escape_pos)
                out += chr(value).encode("utf-8")
            else:
                raise self.error(f"unknown escape \\{code}", escape_pos)
        return bytes(out)


def _finite_strings(node: Node, rules: dict[str, Node], active: frozenset = frozenset()) -> set[bytes] | None:
    """The strings of an expression made only of literals, alternation, sequence and rules; else None."""
    t = type(node)
    if t is Bytes:
        return {node.value}
    if t is Ref:
        if node.name in active or node.name not in rules:
            return None
        return _finite_strings(rules[node.name], rules, active | {node.name})
    if t is Alt:
        result: set[bytes] = set()
        for item in node.items:
            strings = _finite_strings(item, rules, active)
            if strings is None:
                return None
            result |= strings
            if len(result) > MAX_EXCEPT_STRINGS:
                return None
        return result
    if t is Seq:
        result = {b""}
        for item in node.items:
            strings = _finite_strings(item, rules, active)
            if strings is None:
                return None
            result = {a + b for a in result for b in strings}
            if len(result) > MAX_EXCEPT_STRINGS:
                return None
        return result
    return None


def _rewrite(node: Node, replace) -> Node:
    """Rebuild ``node`` bottom-up with ``replace`` applied to every node (identity when nothing changes)."""
    t = type(node)
    if t is Seq or t is Alt or t is Intersect:
        items = tuple(_rewrite(item, replace) for item in node.items)
        if any(new is not old for new, old in zip(items, node.items)):
            node = t(items)
    elif t is Repeat:
        item = _rewrite(node.item, replace)
        if item is not node.item:
            node = Repeat(item, node.min, node.max)
    elif t is Complement:
        item = _rewrite(node.item, replace)
        if item is not node.item:
            node = Complement(item)
    return replace(node)


def parse_ebnf(text: str) -> tuple[dict[str, Node], str]:
    """Parse the EBNF dialect into ``(rules, start_rule_name)``."""
    if not isinstance(text, str):
        raise TypeError(f"EBNF grammar must be str, got {type(text).__name__}")
    parser = _Parser(text)
    rules, start, defined_at = parser.parse()
    for name, pos, rule in parser.references:
        if name not in rules:
            raise parser.error(f"undefined rule {name!r}", pos, rule=rule)

    def resolve(node: Node) -> Node:
        if type(node) is not _ExceptRule:
            return node
        strings = _finite_strings(Ref(node.name), rules)
        if strings is None or not strings or b"" in strings:
            raise GrammarError(
                f"except!({node.name}) needs a rule that expands to an alternation of non-empty strings",
                line=node.line,
                column=node.column,
                rule=node.rule,
            )
        return Except(tuple(sorted(strings)), node.max_tokens)

    rules = {name: _rewrite(body, resolve) for name, body in rules.items()}
    from .grammar import check_productive

    try:
        check_productive(rules)
    except GrammarError as exc:
        line, column = parser.location(defined_at[exc.rule]) if exc.rule in defined_at else (None, None)
        raise GrammarError(exc.message, line=line, column=column, rule=exc.rule) from None
    return rules, start


# ---------------------------------------------------------------------------
# Printing


def _quote(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "'" + "".join(_quote_byte(b) for b in data) + "'"
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or not ch.isprintable():
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def _quote_byte(b: int) -> str:
    if 0x20 <= b < 0x7F and b not in (0x27, 0x5C):
        return chr(b)
    return f"\\x{b:02x}"


def _class_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isalnum() and cp < 0x80:
        return ch
    return f"\\u{{{cp:x}}}"


def _regex_class(ranges, negated: bool) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}")
    return "#'[" + ("^" if negated else "") + "".join(parts) + "]'"


_NOTHING_TEXT = "#'[^\\u{0}-\\u{10ffff}]'"


def _node_to_ebnf(node: Node, names: dict[str, str], context: int = 0) -> str:
    """``context``: 0 = top of a rule, 1 = inside a sequence, 2 = operand of a postfix operator."""
    t = type(node)
    if t is Bytes:
        return _quote(node.value)
    if t is ByteSet:
        ranges = [(lo, hi) for lo, hi in node.ranges if lo <= hi]
        if not ranges:
            return _NOTHING_TEXT
        if all(hi < 0x80 for _lo, hi in ranges):
            return _regex_class(ranges, False)
        text = " | ".join(_quote(bytes([b])) for lo, hi in ranges for b in range(lo, hi + 1))
        return f"({text})" if context and len(text) > 6 and "|" in text else text
    if t is CharSet:
        return _regex_class(node.ranges, node.negated)
    if t is Seq:
        if not node.items:
            return "''"
        text = " ".join(_node_to_ebnf(item, names, 1) for item in node.items)
        return f"({text})" if context == 2 and len(node.items) > 1 else text
    if t is Alt:
        if not node.items:
            return _NOTHING_TEXT
        text = " | ".join(_node_to_ebnf(item, names, 0) for item in node.items)
        return f"({text})" if context and len(node.items) > 1 else text
    if t is Repeat:
        inner = _node_to_ebnf(node.item, names, 2)
        lo, hi = node.min, node.max
        suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
        if suffix is None:
            suffix = f"{{{lo},}}" if hi is None else (f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}")
        return inner + suffix
    if t is Ref:
        return names[node.name]
    if t is AnyToken:
        return "any!"
    if t is Except:
        args = [_quote(s) for s in node.strings]
        if node.max_tokens is not None:
            args.append(str(node.max_tokens))
        return f"except!({', '.join(args)})"
    if t is Intersect:
        return "intersect!(" + ", ".join(_node_to_ebnf(item, names, 0) for item in node.items) + ")"
    if t is Complement:
        return "complement!(" + _node_to_ebnf(node.item, names, 0) + ")"
    raise GrammarError(f"cannot print grammar node {node!r}")


def rules_to_ebnf(rules, start: str) -> str:
    """Print rules in the dialect so that ``parse_ebnf`` reads back the same grammar."""
    order = [start] + [name for name in rules if name != start]
    names: dict[str, str] = {}
    used: set[str] = set()
    for name in order:
        candidate = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
        if not _NAME.fullmatch(candidate):
            candidate = "r_" + candidate
        if candidate in ("any", "except", "intersect"):
            candidate += "_"
        if name != start and candidate == "start":
            candidate = "start_"
        base, n = candidate, 1
        while candidate in used:
            n += 1
            candidate = f"{base}_{n}"
        used.add(candidate)
        names[name] = candidate
    return "".join(f"{names[name]} ::= {_node_to_ebnf(rules[name], names)};\n" for name in order)
