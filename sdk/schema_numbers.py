"""JSON numbers under bounds and ``multipleOf`` as regular languages, built digit by digit.

A bound is exact for any decimal value: a number's text is compared with the bound by its
integer part first, then by its fraction digits (``frac_*`` below). Constrained numbers are
written without an exponent; an unconstrained ``number`` may use one.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

from surecall.engine.ir import EMPTY, NOTHING, Complement, Intersect, Node, alt, chars, literal, optional, plus, repeat, seq, star

DIGIT = chars([(0x30, 0x39)])
NONZERO_DIGIT = chars([(0x31, 0x39)])
CANONICAL_INT = alt("0", seq(NONZERO_DIGIT, star(DIGIT)))
_EXPONENT = seq(chars([(0x45, 0x45), (0x65, 0x65)]), optional(chars([(0x2B, 0x2B), (0x2D, 0x2D)])), plus(DIGIT))
_ZERO_FRACTION = optional(seq(".", plus("0")))
_ANY_FRACTION = optional(seq(".", plus(DIGIT)))

MAX_MULTIPLE_DIGITS = 4


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


def _multiples_of_integer(k: int) -> Node:
    """Unsigned integer texts divisible by ``k`` (k of the form 2^a 5^b, divides 10^n)."""
    n = 0
    while (10**n) % k:
        n += 1
        if n > MAX_MULTIPLE_DIGITS:
            raise NumberConstraintError(f"multipleOf {k} is only supported for divisors of 10^{MAX_MULTIPLE_DIGITS}")
    if n == 0:
        return CANONICAL_INT
    small = [literal(str(v)) for v in range(0, 10 ** (n - 1), k)] if n > 1 else [literal("0")]
    suffixes = [format(v, f"0{n}d") for v in range(0, 10**n, k)]
    exact_length = [literal(s) for s in suffixes if s[0] != "0"]
    longer = seq(NONZERO_DIGIT, star(DIGIT), alt(*(literal(s) for s in suffixes)))
    return alt(*small, *exact_length, longer)


def multiple_of(step, integer: bool) -> Node:
    """Signed number texts (no exponent) that are a multiple of ``step``."""
    q = to_decimal(step)
    if q <= 0:
        raise NumberConstraintError("multipleOf must be greater than 0")
    q = q.normalize()
    sign, digits, exponent = q.as_tuple()
    coefficient = int("".join(map(str, digits)))
    if exponent >= 0:
        magnitude = seq(_multiples_of_integer(coefficient * 10**exponent), _ZERO_FRACTION)
    elif coefficient == 1 and not integer:
        places = -exponent
        magnitude = seq(CANONICAL_INT, optional(seq(".", repeat(DIGIT, 1, places), star("0"))))
    elif coefficient == 1:
        magnitude = seq(CANONICAL_INT, _ZERO_FRACTION)
    else:
        raise NumberConstraintError(f"multipleOf {step} is not supported (only 10^-n and divisors of 10^n)")
    return seq(optional("-"), magnitude)


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
) -> Node:
    """The texts of numbers meeting every given constraint.

    ``lower``/``upper`` are ``(bound, exclusive)``; ``excluded`` are values the number must not
    equal, ``not_multiples`` steps it must not be a multiple of (from a negated ``multipleOf``).
    With ``plain_integer`` an integer is written in digits alone (draft-04 and earlier, where
    ``1.0`` is no integer).
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
        parts.append(multiple_of(multiple, integer))
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
    parts.extend(Complement(multiple_of(step, integer)) for step in not_multiples)
    if not parts:
        # Unconstrained plain integers are one regular language, not an intersection (which
        # the automaton steps as a product of its operands).
        return plain if plain is not None else number_syntax(integer=integer, exponent=True)
    if plain is not None:
        parts.append(plain)
    elif integer and multiple is None and lower is None and upper is None and not (excluded or not_multiples):
        parts.append(number_syntax(integer=True, exponent=False))
    return parts[0] if len(parts) == 1 else Intersect(tuple(parts))
