"""Regular expressions for the JSON Schema ``format`` values surecall enforces.

Each expression matches the *decoded* string (the grammar maps characters to their JSON
encodings) and is written so that every string it matches passes the format checker of
``jsonschema`` (with the ``format-nongpl`` extras): a grammar built from these never
produces a value that the final validation step rejects. Where a format has corners that a
regular expression cannot follow exactly (leap seconds, IPv6 zone ids, quoted e-mail local
parts with every escape), the expression covers a strict subset.

The dialect is the plain one that both Python's ``re`` and surecall's regex front end
understand: classes, ``(?:...)`` groups, ``|``, ``?*+`` and ``{m,n}``.
"""

from __future__ import annotations

_DIGIT = "[0-9]"
_HEX = "[0-9A-Fa-f]"

# Year 0000 is rejected by the checkers, so the year needs one non-zero digit somewhere.
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
# Leap years: divisible by 4 and not by 100, or divisible by 400 (but not year 0000).
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)"
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"

# Seconds stop at 59: the checker does not accept leap seconds.
_PARTIAL_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_TIME = f"{_PARTIAL_TIME}{_OFFSET}"
_DATE_TIME = f"{_DATE}[Tt]{_TIME}"

# RFC 3339 appendix A: units appear in order and without gaps (P1Y2D is not a duration).
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = "(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
_DURATION = f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"

_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"


def _ipv6() -> str:
    group = f"{_HEX}{{1,4}}"
    forms = [f"(?:{group}:){{7}}{group}", f"(?:{group}:){{6}}{_IPV4}"]
    # "::" stands for at least one group of zeros: `left` explicit groups before it,
    # up to 7 - left (or 5 - left before an embedded IPv4 address) after it.
    for left in range(8):
        head = "" if left == 0 else f"{group}(?::{group}){{{left - 1}}}"
        if left <= 6:
            forms.append(f"{head}::(?:{group}(?::{group}){{0,{6 - left}}})?")
        else:
            forms.append(f"{head}::")
        if left <= 5:
            forms.append(f"{head}::(?:{group}:){{0,{5 - left}}}{_IPV4}")
    return "(?:" + "|".join(forms) + ")"


_IPV6 = _ipv6()

def _label(max_length: int) -> str:
    """A hostname label of 1..max_length letters, digits and inner hyphens.

    "--" in the third and fourth place is reserved for encoded (IDNA) labels, whose
    validity needs punycode decoding: such labels are left out.
    """
    alnum, inner = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    shapes = [alnum, f"{inner}{alnum}", f"{inner}{{2}}{alnum}"][: max_length - 1]
    if max_length >= 5:
        shapes.append(f"{inner}(?:{alnum}{inner}|-{alnum}){inner}{{0,{max_length - 5}}}{alnum}")
    return f"{alnum}(?:{'|'.join(shapes)})?" if shapes else alnum


HOSTNAME_MAX_LENGTH = 253
HOSTNAME_MAX_LABELS = 8


def _hostname() -> str:
    # The 253-character limit is kept by bounding the label length by the label count
    # (a strict subset: at most HOSTNAME_MAX_LABELS labels).
    forms = []
    for count in range(1, HOSTNAME_MAX_LABELS + 1):
        longest = min(63, (HOSTNAME_MAX_LENGTH - (count - 1)) // count)
        label = _label(longest)
        forms.append(label if count == 1 else f"{label}(?:\\.{label}){{{count - 1}}}")
    return "(?:" + "|".join(forms) + ")"


_HOSTNAME = _hostname()
_EMAIL_DOMAIN = f"{_label(63)}(?:\\.{_label(63)})*"

_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_QUOTED_LOCAL = '"(?:[ !#-\\[\\]-~]|\\\\[ -~])*"'
_EMAIL = (
    f"(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|{_QUOTED_LOCAL})"
    f"@(?:{_EMAIL_DOMAIN}|\\[{_IPV4}\\]|\\[IPv6:{_IPV6}\\])"
)

_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"

# RFC 3986, collected from its ABNF.
_PCT = f"%{_HEX}{{2}}"
_UNRESERVED_SUB = "A-Za-z0-9._~!$&'()*+,;=\\-"
_PCHAR = f"(?:[{_UNRESERVED_SUB}:@]|{_PCT})"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:[{_UNRESERVED_SUB}@]|{_PCT})+"
_USERINFO = f"(?:[{_UNRESERVED_SUB}:]|{_PCT})*"
_REG_NAME = f"(?:[{_UNRESERVED_SUB}]|{_PCT})*"
_IP_LITERAL = f"\\[(?:{_IPV6}|v{_HEX}+\\.[{_UNRESERVED_SUB}:]+)\\]"
_HOST = f"(?:{_IP_LITERAL}|{_IPV4}|{_REG_NAME})"
_AUTHORITY = f"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_PATH_ABEMPTY = f"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = f"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_ROOTLESS = f"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_PATH_NOSCHEME = f"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_QUERY_OR_FRAGMENT = f"(?:{_PCHAR}|[/?])*"
_TAIL = f"(?:\\?{_QUERY_OR_FRAGMENT})?(?:#{_QUERY_OR_FRAGMENT})?"
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"
_URI = f"{_SCHEME}:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS})?{_TAIL}"
_RELATIVE_REF = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME})?{_TAIL}"
_URI_REFERENCE = f"(?:{_URI}|{_RELATIVE_REF})"

FORMAT_PATTERNS: dict[str, str] = {
    "date-time": _DATE_TIME,
    "date": _DATE,
    "time": _TIME,
    "duration": _DURATION,
    "email": _EMAIL,
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": _UUID,
    "uri": _URI,
    "uri-reference": _URI_REFERENCE,
}
"""Full-match regular expressions, one per supported format."""

_IPV4_PREFIX = "(?:3[0-2]|[12][0-9]|[0-9])"
_IPV6_PREFIX = "(?:12[0-8]|1[01][0-9]|[1-9]?[0-9])"
# A network's host bits are zero; of its prefixes, those on octet boundaries (and an address alone).
_IPV4_NETWORK = (
    f"(?:{_IPV4}(?:/32)?|{_OCTET}\\.{_OCTET}\\.{_OCTET}\\.0/24|{_OCTET}\\.{_OCTET}\\.0\\.0/16|{_OCTET}\\.0\\.0\\.0/8|0\\.0\\.0\\.0/0)"
)
_IPV6_NETWORK = f"{_IPV6}(?:/128)?"
_IPV4_INTERFACE = f"{_IPV4}(?:/{_IPV4_PREFIX})?"
_IPV6_INTERFACE = f"{_IPV6}(?:/{_IPV6_PREFIX})?"

PYDANTIC_FORMAT_PATTERNS: dict[str, str] = {
    "ipvanyaddress": f"(?:{_IPV4}|{_IPV6})",
    "ipv4network": _IPV4_NETWORK,
    "ipv6network": _IPV6_NETWORK,
    "ipvanynetwork": f"(?:{_IPV4_NETWORK}|{_IPV6_NETWORK})",
    "ipv4interface": _IPV4_INTERFACE,
    "ipv6interface": _IPV6_INTERFACE,
    "ipvanyinterface": f"(?:{_IPV4_INTERFACE}|{_IPV6_INTERFACE})",
}
"""Full-match expressions for formats Pydantic writes into its schemas (no JSON Schema format
of these names exists), each admitting values Pydantic accepts."""

NAIVE_DATE_TIME = f"{_DATE}[Tt]{_PARTIAL_TIME}"
"""A date-time without an offset (Pydantic's ``NaiveDatetime``, which refuses one)."""

FORMAT_MAX_LENGTH: dict[str, int] = {}
"""Length limits (in characters) that go with a format and are not part of its expression."""


def format_pattern(name: str) -> str | None:
    """The full-match expression for a format surecall enforces, or ``None`` if it has none."""
    return FORMAT_PATTERNS.get(name)
