"""JSON numbers under bounds and ``multipleOf`` as regular languages, built digit by digit.

A bound is exact for any decimal value: a number's text is compared with the bound by its
integer part first, then by its fraction digits (``frac_*`` below). Constrained numbers are
written without an exponent; an unconstrained ``number`` may use one.

A ``multipleOf`` step is exact for any decimal value too. Steps dividing a power of ten
(``5``, ``0.01``, ``25``) only read a number's last digits; any other step (``3``, ``0.25``)
is an automaton over the digits that keeps their remainder by the step, one rule per
remainder (``residue_rules``), which the engine inlines as one regular piece of the NFA.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

from surecall.engine.ir import (
    EMPTY, NOTHING, Complement, Intersect, Node, Ref, Seq, alt, byte_set, chars, literal, optional, plus, repeat, seq,
    star,
)

DIGIT = chars([(0x30, 0x39)])
NONZERO_DIGIT = chars([(0x31, 0x39)])
CANONICAL_INT = alt("0", seq(NONZERO_DIGIT, star(DIGIT)))
_EXPONENT = seq(chars([(0x45, 0x45), (0x65, 0x65)]), optional(chars([(0x2B, 0x2B), (0x2D, 0x2D)])), plus(DIGIT))
_ZERO_FRACTION = optional(seq(".", plus("0")))
_ANY_FRACTION = optional(seq(".", plus(DIGIT)))

MAX_MULTIPLE_DIGITS = 4
#: The most remainders (times the fraction digits read, plus one) a ``multipleOf`` step's
#: automaton keeps: one grammar rule each.
MAX_RESIDUE_STATES = 1_000


class NumberConstraintError(ValueError):
    """A numeric constraint surecall cannot express exactly."""


def number_syntax(*, integer: bool, exponent: bool) -> Node:
    fraction = _ZERO_FRACTION if integer else _ANY_FRACTION
    return seq(optional("-"), CANONICAL_INT, fraction, optional(_EXPONENT) if exponent and not integer else EMPTY)


def to_decimal(value) -> Decimal:
    if isinstance(value, bool):
        raise NumberConstraintError(f"{value!r} is not a number")
    try:
        result = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except InvalidOperation as error:
        raise NumberConstraintError(f"{value!r} is not a number") from error
    if not result.is_finite():
        raise NumberConstraintError(f"{value!r} is not a finite number")
    return result


def _split(magnitude: Decimal) -> tuple[str, str]:
    text = format(abs(magnitude), "f")
    integer, _, fraction = text.partition(".")
    integer = integer.lstrip("0") or "0"
    return integer, fraction.rstrip("0")


def _digits(lo: int, hi: int) -> Node:
    return chars([(0x30 + lo, 0x30 + hi)]) if lo <= hi else NOTHING


def _int_greater(n: str) -> Node:
    options = [seq(NONZERO_DIGIT, repeat(DIGIT, len(n), None))]
    for k, char in enumerate(n):
        digit = int(char)
        if digit < 9:
            options.append(seq(n[:k], _digits(digit + 1, 9), repeat(DIGIT, len(n) - k - 1, len(n) - k - 1)))
    return alt(*options)


def _int_less(n: str) -> Node:
    if n == "0":
        return NOTHING
    options: list[Node] = [literal("0")]
    if len(n) >= 2:
        options.append(seq(NONZERO_DIGIT, repeat(DIGIT, 0, len(n) - 2)))
    for k, char in enumerate(n):
        low = 1 if k == 0 else 0
        digit = int(char)
        if digit > low:
            options.append(seq(n[:k], _digits(low, digit - 1), repeat(DIGIT, len(n) - k - 1, len(n) - k - 1)))
    return alt(*options)


def _frac_compare(f: str, op: str, integer: bool) -> Node:
    """The optional ``.F`` part of a number whose integer part equals the bound's, with ``0.F op 0.f``."""
    if integer:
        holds = {">=": not f, ">": False, "<=": True, "<": bool(f)}[op]
        return _ZERO_FRACTION if holds else NOTHING
    tail = star(DIGIT)
    differ_up = [seq(".", f[:k], _digits(int(c) + 1, 9), tail) for k, c in enumerate(f) if c != "9"]
    differ_down = [seq(".", f[:k], _digits(0, int(c) - 1), tail) for k, c in enumerate(f) if c != "0"]
    proper_prefixes = [literal("." + f[:k]) for k in range(1, len(f))]
    if op == ">=":
        return _ANY_FRACTION if not f else alt(*differ_up, seq(".", f, tail))
    if op == ">":
        return alt(*differ_up, seq(".", f, star("0"), NONZERO_DIGIT, tail))
    if op == "<=":
        equal = seq(".", f, star("0")) if f else seq(".", plus("0"))
        return alt(EMPTY, *differ_down, *proper_prefixes, equal)
    return alt(EMPTY, *differ_down, *proper_prefixes) if f else NOTHING


def _magnitude_compare(bound: Decimal, op: str, integer: bool) -> Node:
    """Unsigned number texts (no exponent) whose value ``op bound``."""
    fraction = _ZERO_FRACTION if integer else _ANY_FRACTION
    if bound < 0:
        return seq(CANONICAL_INT, fraction) if op in (">", ">=") else NOTHING
    n, f = _split(bound)
    other = _int_greater(n) if op in (">", ">=") else _int_less(n)
    return alt(seq(other, fraction), seq(n, _frac_compare(f, op, integer)))


def equal_number(value: Decimal) -> Node:
    """Every spelling ``value_compare`` knows of exactly ``value``: its digits with any
    trailing zeros in a fraction (``5``, ``5.0``, ``5.00``), ``-0`` too for zero. What
    ``>= value`` and ``<= value`` accept together, written as one regular language rather
    than their intersection (which the automaton steps as a product)."""
    integer, fraction = _split(value)
    magnitude = seq(integer, seq(".", fraction, star("0")) if fraction else _ZERO_FRACTION)
    if value > 0:
        return magnitude
    return seq("-", magnitude) if value < 0 else seq(optional("-"), magnitude)


_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}


def value_compare(bound: Decimal, op: str, integer: bool) -> Node:
    """Signed number texts whose value ``op bound`` (op is one of ``>= > <= <``)."""
    return alt(
        _magnitude_compare(bound, op, integer),
        seq("-", _magnitude_compare(-bound, _FLIP[op], integer)),
    )


def _power_of_ten_divided(k: int) -> int | None:
    """The least n with ``k`` dividing 10^n, None past ``MAX_MULTIPLE_DIGITS``."""
    for n in range(MAX_MULTIPLE_DIGITS + 1):
        if (10**n) % k == 0:
            return n
    return None


def _multiples_of_integer(k: int, n: int) -> Node:
    """Unsigned integer texts divisible by ``k``, which divides 10^n: their last n digits decide."""
    if n == 0:
        return CANONICAL_INT
    small = [literal(str(v)) for v in range(0, 10 ** (n - 1), k)] if n > 1 else [literal("0")]
    suffixes = [format(v, f"0{n}d") for v in range(0, 10**n, k)]
    exact_length = [literal(s) for s in suffixes if s[0] != "0"]
    longer = seq(NONZERO_DIGIT, star(DIGIT), alt(*(literal(s) for s in suffixes)))
    return alt(*small, *exact_length, longer)


def _scaled(step: Decimal) -> tuple[int, int]:
    """(a, p) with ``step`` = a / 10^p, a a positive integer and p >= 0 as small as can be."""
    # Exact integer arithmetic: Decimal's own normalize() rounds to its context's precision.
    _sign, digits, exponent = step.as_tuple()
    coefficient = int("".join(map(str, digits)))
    while exponent < 0 and coefficient % 10 == 0:
        coefficient, exponent = coefficient // 10, exponent + 1
    return (coefficient * 10**exponent, 0) if exponent >= 0 else (coefficient, -exponent)


def common_multiple(steps) -> Decimal:
    """The least positive number every one of ``steps`` divides: a number is a multiple of
    each of them exactly when it is a multiple of this one."""
    scaled = [_scaled(positive_step(step)) for step in steps]
    places = max(p for _a, p in scaled)
    least = math.lcm(*(a * 10 ** (places - p) for a, p in scaled))
    return Decimal(f"{least}E-{places}")


def positive_step(step) -> Decimal:
    q = to_decimal(step)
    if q <= 0:
        raise NumberConstraintError("multipleOf must be greater than 0")
    return q


def multiple_of(step, integer: bool, rules: dict[str, Node] | None = None) -> Node:
    """Signed number texts (no exponent) that are a multiple of ``step``. A step that divides
    no power of ten up to 10^MAX_MULTIPLE_DIGITS needs ``rules``, the grammar's rules, to
    add its remainder automaton to (``residue_rules``)."""
    a, p = _scaled(positive_step(step))
    if integer:
        # An integer x is a multiple of a / 10^p when x * 10^p is one of a.
        a, p = a // math.gcd(a, 10**p), 0
    n = _power_of_ten_divided(a)
    if p == 0 and n is not None:
        magnitude = seq(_multiples_of_integer(a, n), _ZERO_FRACTION)
    elif a == 1:
        magnitude = seq(CANONICAL_INT, optional(seq(".", repeat(DIGIT, 1, p), star("0"))))
    elif rules is None:
        raise NumberConstraintError(f"multipleOf {step} needs the grammar's rules for its remainder automaton")
    else:
        magnitude = residue_rules(a, p, rules)
    return seq(optional("-"), magnitude)


def residue_rules(a: int, p: int, rules: dict[str, Node]) -> Node:
    """Unsigned number texts x (digits, then an optional fraction) with x * 10^p a multiple
    of ``a``, as rules added to ``rules`` (named after ``a`` and ``p``, so that a step met
    again reuses them): one per remainder by ``a`` of the integer digits read, then one per
    remainder and count of fraction digits read (up to p; past them only zeros).
    Returns the reference to the first rule."""
    if a * (p + 1) > MAX_RESIDUE_STATES:
        raise NumberConstraintError(
            f"multipleOf {Decimal(a).scaleb(-p)}: its digit automaton would keep {a * (p + 1)} remainders, "
            f"more than {MAX_RESIDUE_STATES}"
        )
    prefix = f"multiple_{a}_e{p}"
    start = f"{prefix}_start"
    if start in rules:
        return Ref(start)

    def digits_then(residue: int, digits: range, count: int | None) -> Node:
        """A digit read at ``residue``, then the rule of the remainder it leads to: of the
        integer part (``count`` None) or of ``count`` fraction digits. Digits leading to
        the same remainder share one character class; past the p-th fraction digit only
        zeros follow, and only where the remainder is 0."""
        targets: dict[int, list[int]] = {}
        for d in digits:
            targets.setdefault((10 * residue + d) % a, []).append(d)
        options = []
        for target, ds in targets.items():
            if count is None:
                after = Ref(f"{prefix}_i{target}")
            elif count < p and (count, target) in finishing:
                after = Ref(f"{prefix}_f{count}_{target}")
            elif count == p and target == 0:
                after = star("0")
            else:
                continue
            options.append(Seq((byte_set(0x30 + d for d in ds), after)))
        return alt(*options)

    def ends(residue: int, count: int) -> bool:
        # Where the text stops after ``count`` fraction digits, x * 10^p is the remainder
        # times 10 to the digits not written.
        return residue * 10 ** (p - count) % a == 0

    # (count, remainder) of the fraction states some digits still lead to a multiple from
    # (a step above 10 leaves some that none do): only those get rules, the grammar
    # refuses a rule that can never finish.
    finishing: set[tuple[int, int]] = set()
    for count in range(p - 1, 0, -1):
        for residue in range(a):
            following = ((10 * residue + d) % a for d in range(10))
            if ends(residue, count) or any(
                target == 0 if count + 1 == p else (count + 1, target) in finishing for target in following
            ):
                finishing.add((count, residue))

    def after_integer(residue: int) -> list[Node]:
        if p == 0:
            return [_ZERO_FRACTION] if residue == 0 else []
        return [seq(".", digits_then(residue, range(10), 1)), *([EMPTY] if ends(residue, 0) else [])]

    for residue in range(a):
        rules[f"{prefix}_i{residue}"] = alt(digits_then(residue, range(10), None), *after_integer(residue))
        for count in range(1, p):
            if (count, residue) in finishing:
                rules[f"{prefix}_f{count}_{residue}"] = alt(
                    digits_then(residue, range(10), count + 1), *([EMPTY] if ends(residue, count) else [])
                )
    # The integer part is "0" or starts with a non-zero digit.
    rules[start] = alt(seq("0", alt(*after_integer(0))), digits_then(0, range(1, 10), None))
    return Ref(start)


NON_INTEGER = seq(optional("-"), CANONICAL_INT, ".", star(DIGIT), NONZERO_DIGIT, star(DIGIT))
#: An integer in digits alone: no fraction, no exponent.
PLAIN_INTEGER = seq(optional("-"), CANONICAL_INT)


#: Integer ranges whose bounds have more digits than this stay an intersection of the two
#: bounds (the direct construction grows with the square of the digits).
_RANGE_MAX_DIGITS = 40


def _integer_range(lower: tuple[Decimal, bool], upper: tuple[Decimal, bool], fraction: Node) -> Node | None:
    """The integers between the bounds, as ``value_compare`` spells them (``fraction`` after
    the digits; ``-0`` where zero is inside), written as one regular language: what the two
    bounds accept together, without the intersection. None for bounds too long to write."""
    (low, low_exclusive), (high, high_exclusive) = lower, upper
    if max(len(_split(low)[0]), len(_split(high)[0])) > _RANGE_MAX_DIGITS:
        return None
    first = _floor(low) + 1 if low_exclusive else _ceiling(low)
    last = _ceiling(high) - 1 if high_exclusive else _floor(high)
    if first > last:
        return NOTHING
    options = []
    if last >= 0:
        options.append(_magnitudes_between(max(first, 0), last))
    if first <= 0:
        # Minus zero is zero: written wherever zero is inside.
        options.append(seq("-", _magnitudes_between(max(-last, 0), -first)))
    return seq(alt(*options), fraction)


def _floor(bound: Decimal) -> int:
    return int(bound.to_integral_value(ROUND_FLOOR))


def _ceiling(bound: Decimal) -> int:
    return int(bound.to_integral_value(ROUND_CEILING))


def _magnitudes_between(first: int, last: int) -> Node:
    """Canonical digit strings of the integers first..last (0 <= first <= last)."""
    options = []
    for length in range(len(str(first)), len(str(last)) + 1):
        low = max(first, 10 ** (length - 1) if length > 1 else 0)
        high = min(last, 10**length - 1)
        if low <= high:
            options.append(_same_length_between(str(low), str(high)))
    return alt(*options)


def _same_length_between(low: str, high: str) -> Node:
    """Digit strings of one length from ``low`` to ``high`` (as numbers)."""
    if len(low) == 1:
        return _digits(int(low), int(high))
    if low.strip("0") == "" and high.strip("9") == "":
        # Every string of the length. Splitting it by its first digit again would branch
        # twice per digit: 2^19 calls for a bound like 2^63 (a schema's int64 maximum).
        return repeat(DIGIT, len(low), len(low))
    if low[0] == high[0]:
        return seq(low[0], _same_length_between(low[1:], high[1:]))
    rest = len(low) - 1
    options = [seq(low[0], _same_length_between(low[1:], "9" * rest))]
    if int(high[0]) - int(low[0]) > 1:
        options.append(seq(_digits(int(low[0]) + 1, int(high[0]) - 1), repeat(DIGIT, rest, rest)))
    options.append(seq(high[0], _same_length_between("0" * rest, high[1:])))
    return alt(*options)


def number_language(
    *,
    integer: bool,
    lower: tuple[Decimal, bool] | None = None,
    upper: tuple[Decimal, bool] | None = None,
    multiple: object | None = None,
    non_integer: bool = False,
    excluded: tuple[Decimal, ...] = (),
    not_multiples: tuple[Decimal, ...] = (),
    plain_integer: bool = False,
    rules: dict[str, Node] | None = None,
) -> Node:
    """The texts of numbers meeting every given constraint.

    ``lower``/``upper`` are ``(bound, exclusive)``; ``excluded`` are values the number must not
    equal, ``not_multiples`` steps it must not be a multiple of (from a negated ``multipleOf``).
    With ``plain_integer`` an integer is written in digits alone (draft-04 and earlier, where
    ``1.0`` is no integer). ``rules``: the grammar's rules, which steps that divide no power
    of ten add their automata to (see ``multiple_of``).
    """
    plain = PLAIN_INTEGER if integer and plain_integer else None
    only_bounds = multiple is None and not (non_integer or excluded or not_multiples)
    if integer and lower is not None and upper is not None and only_bounds:
        found = _integer_range(lower, upper, EMPTY if plain is not None else _ZERO_FRACTION)
        if found is not None:
            return found
    parts: list[Node] = []
    if lower is not None:
        parts.append(value_compare(lower[0], ">" if lower[1] else ">=", integer))
    if upper is not None:
        parts.append(value_compare(upper[0], "<" if upper[1] else "<=", integer))
    if multiple is not None:
        parts.append(multiple_of(multiple, integer, rules))
    if non_integer:
        if integer:
            return NOTHING
        parts.append(NON_INTEGER)
    if excluded or not_multiples:
        # Among the plain spellings (those value_compare and multiple_of write, every one of
        # each value), the ones no spelling of an excluded value or of a multiple is: one
        # complement for all the values, so that many of them (a negated enum) stay one
        # operand of the intersection rather than one each.
        parts.append(number_syntax(integer=integer, exponent=False))
    if excluded:
        parts.append(Complement(alt(*(equal_number(value) for value in excluded))))
    parts.extend(Complement(multiple_of(step, integer, rules)) for step in not_multiples)
    if not parts:
        # Unconstrained plain integers are one regular language, not an intersection (which
        # the automaton steps as a product of its operands).
        return plain if plain is not None else number_syntax(integer=integer, exponent=True)
    if plain is not None:
        parts.append(plain)
    elif integer and multiple is None and lower is None and upper is None and not (excluded or not_multiples):
        parts.append(number_syntax(integer=True, exponent=False))
    return parts[0] if len(parts) == 1 else Intersect(tuple(parts))
