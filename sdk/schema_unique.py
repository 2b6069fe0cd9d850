"""Run-time enforcement of ``uniqueItems``, which no context-free grammar can express.

The grammar of a schema accepts arrays with repeated items; this module supplies the
text check the matcher applies on top of the grammar (the ``text_check`` of a
``SchemaGrammar``). The check scans the JSON text as it grows, keeps for every open
array that must be unique the canonical values of its completed items, and declares
the text dead as soon as an item completes equal to an earlier one, or a ``true``,
``false`` or ``null`` that repeats one begins (it cannot become anything else). Values compare as
JSON Schema says: numbers by value (``1`` equals ``1.0``), objects regardless of key
order, ``true`` never equal to ``1``.

Which arrays must be unique follows from the instance location: from the root, every
schema that applies for sure (``$ref``, ``allOf``, ``properties``, ``patternProperties``,
``additionalProperties``, ``prefixItems``, ``items``, ``additionalItems``) is followed
along the path, so recursion through ``$ref`` works at any depth, and so is the one
``anyOf``/``oneOf`` branch that alone admits arrays (or objects) when the value is one.
So is the branch of a discriminated union (:func:`discriminator`) that the object's first
property names: the scan records that property's value as it is written, and the path
carries it to the keys after it (tool calls name their tool this way).
Any other ``uniqueItems`` under a conditional applicator (``anyOf``, ``oneOf``,
``if``/``then``/``else``, ``not``, ``contains``, dependent schemas) only applies when its
branch does, which the check cannot know; :func:`conditional_unique` finds it so the
translator can report it.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

#: Bytes after which whitespace, ``,``, ``]`` or ``}`` ends a number or literal in progress.
_SCALAR_BYTES = frozenset(b"0123456789+-.eEtruefalsn")
_WHITESPACE = frozenset(b" \t\n\r")
#: A token that contains none of these cannot start a repeated literal or complete an item outside a string.
_COMPLETING = b'"]},[ \t\n\reltfn'
_LITERALS = {ord("t"): (True,), ord("f"): (False,), ord("n"): (None,)}
#: Outside strings and scalars these bytes complete nothing.
_INERT = frozenset(b" \t\n\r,:")
_CLOSING = frozenset(b"]}")
#: Bytes that keep a string's text from reading as itself in plain ASCII: control
#: characters, the backslash, and every byte past ASCII.
_NOT_PLAIN_ASCII = bytes(range(0x20)) + b"\\" + bytes(range(0x80, 0x100))

# Applicators whose subschemas hold only when some condition does.
_CONDITIONAL = ("anyOf", "oneOf", "not", "if", "then", "else", "contains", "unevaluatedItems", "unevaluatedProperties")
_CONDITIONAL_MAPS = ("dependentSchemas", "dependencies")


_CONTAINERS = frozenset({"array", "object"})


def _kind_of(value: Any) -> str:
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "scalar"


def admitted_containers(schema: Any, base: str, resolve, base_of) -> frozenset:
    """Which of "array"/"object" a branch admits, judged by its type, const and enum (through ``$ref``)."""
    for _ in range(16):
        if schema is False:
            return frozenset()
        if not isinstance(schema, dict):
            return _CONTAINERS
        base = base_of(schema, base)
        kinds = _CONTAINERS
        declared = schema.get("type")
        if isinstance(declared, str):
            declared = [declared]
        if isinstance(declared, list):
            kinds = kinds & frozenset(declared)
        if "const" in schema:
            kinds = kinds & {_kind_of(schema["const"])}
        if isinstance(schema.get("enum"), list):
            kinds = kinds & {_kind_of(value) for value in schema["enum"]}
        if "$ref" not in schema or kinds != _CONTAINERS:
            return kinds
        schema, base, _ = resolve(schema["$ref"], base, "#")
    return _CONTAINERS


def sure_branches(schema: dict, base: str, resolve, base_of) -> list:
    """(keyword, index, containers) for ``anyOf``/``oneOf`` branches that alone admit arrays or objects.

    When only one branch admits arrays, a valid array satisfies that branch: it applies for sure.
    """
    found = []
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if not isinstance(branches, list):
            continue
        admitted = [admitted_containers(branch, base, resolve, base_of) for branch in branches]
        for i, kinds in enumerate(admitted):
            alone = frozenset(kind for kind in kinds if not any(kind in other for j, other in enumerate(admitted) if j != i))
            if alone:
                found.append((keyword, i, alone))
    return found


_UNIONS = ("anyOf", "oneOf")
_NOT_ONE_VALUE = object()


def discriminator(schema: dict, keyword: str, base: str, resolve, base_of) -> tuple[str, dict] | None:
    """(name, {canonical value: branch index}) when the branches of ``schema[keyword]`` form
    a discriminated union that the text tells apart by its first property: every branch
    (through ``$ref``) is an object schema whose first listed property is ``name``,
    required, with a ``const`` (or one-member ``enum``) of its own, no two the same, and
    no ``allOf`` (which could list properties ahead of it). Else None."""
    branches = schema.get(keyword)
    if not isinstance(branches, list) or len(branches) < 2:
        return None
    name = None
    index: dict = {}
    for i, branch in enumerate(branches):
        branch = _through_refs(branch, base, resolve, base_of)
        if not isinstance(branch, dict) or "allOf" in branch:
            return None
        properties = branch.get("properties")
        if not isinstance(properties, dict) or not properties:
            return None
        first = next(iter(properties))
        name = first if name is None else name
        required = branch.get("required")
        if first != name or not isinstance(required, list) or name not in required:
            return None
        value = _one_value(properties[name])
        if value is _NOT_ONE_VALUE or value in index:
            return None
        index[value] = i
    return name, index


def _through_refs(schema: Any, base: str, resolve, base_of) -> Any:
    """``schema`` followed through ``$ref``s that have nothing beside them that could list
    properties (None when they do, or when the chain does not end)."""
    for _ in range(16):
        if not isinstance(schema, dict) or "$ref" not in schema:
            return schema
        if any(key in schema for key in ("properties", "required", "allOf", "anyOf", "oneOf")):
            return None
        base = base_of(schema, base)
        schema, base, _ = resolve(schema["$ref"], base, "#")
    return None


def _one_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return _NOT_ONE_VALUE
    if "const" in schema:
        return canonical(schema["const"])
    enum = schema.get("enum")
    if isinstance(enum, list) and len(enum) == 1:
        return canonical(enum[0])
    return _NOT_ONE_VALUE


def canonical(value: Any) -> Any:
    """A hashable form under which two JSON values are equal exactly when JSON Schema says so."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, Decimal, _FarNumber)):
        return ("number", Decimal(value) if isinstance(value, float) else value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(canonical(item) for item in value))
    return ("object", frozenset((key, canonical(item)) for key, item in value.items()))


class _FarNumber(tuple):
    """A nonzero number whose exponent is beyond what ``Decimal`` holds (``1e2000000000000000000``),
    exactly: (sign, significant digits without trailing zeros, exponent of the last digit).
    It equals no ``Decimal`` or ``int`` (none is that large or that small), and two such
    numbers are equal exactly when these are."""


def _exact_number(text: str) -> "Decimal | _FarNumber":
    """A JSON number, exactly, of any size (``Decimal``s equal ``int``s of the same value)."""
    try:
        return Decimal(text)
    except InvalidOperation:
        pass
    mantissa, _, exponent = text.lower().partition("e")
    sign = mantissa.startswith("-")
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Decimal(0)
    stripped = digits.rstrip("0")
    return _FarNumber((sign, stripped, int(exponent or 0) - len(fraction) + len(digits) - len(stripped)))


def _parse(text: bytes) -> Any:
    # Both kinds of number through _exact_number: Decimal takes exponents up to about 10**18
    # and int() refuses more than 4,300 digits, and a JSON number may be larger still.
    return json.loads(text, parse_float=_exact_number, parse_int=_exact_number)


def _closing_quote(data: bytes) -> int:
    """Where the quote closing a string that ``data`` continues (not after a backslash) is, -1 if none."""
    escaped = False
    for index, byte in enumerate(data):
        if escaped:
            escaped = False
        elif byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            return index
    return -1


_NOT_SPLIT_YET = object()


def _split_at_closing_quote(data: bytes) -> tuple | bool | None:
    """A token's bytes inside a string, split at the quote that closes it: (the bytes
    before the quote, those after it, whether the bytes before are plain ASCII: no escape,
    no control character); True when the token closes no string (it is inside one, an
    escaped quote at most); None when it holds no quote at all."""
    end = data.find(b'"')
    if end < 0:
        return None
    if b"\\" in data[:end]:
        end = _closing_quote(data)
        if end < 0:
            return True
    written = data[:end]
    return written, data[end + 1 :], len(written.translate(None, _NOT_PLAIN_ASCII)) == len(written)


def _closed_string_is_new(raw: bytes, seen: frozenset) -> bool | None:
    """Whether the string whose text is ``raw`` is none of ``seen`` (None when ``raw`` is
    no JSON string text: the scan decides)."""
    try:
        if b"\\" in raw or min(raw, default=0x20) < 0x20:
            value = _parse(b'"' + raw + b'"')  # escapes, as the scan reads them
        else:
            value = raw.decode("utf-8")
    except ValueError:  # not a JSON string (UnicodeDecodeError is one)
        return None
    return ("string", value) not in seen


def _plain_rests(content: bytes, seen: frozenset) -> frozenset | None:
    """The bytes that complete each seen string after ``content`` (the text of a string so
    far), when ``content`` is plain: no escape, no control character, whole UTF-8 (a seen
    string that cannot be written plainly is no plain completion of it); else None."""
    if b"\\" in content or min(content, default=0x20) < 0x20:
        return None
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    rests = set()
    for item in seen:
        # Items are ``canonical`` forms: ("null",) has no value, strings are ("string", text).
        if item[0] != "string":
            continue
        try:
            encoded = item[1].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, from an escape: not a plain completion
            continue
        if encoded.startswith(content):
            rests.add(encoded[len(content) :])
    return frozenset(rests)


class _Frame:
    """An open array or object of the text being scanned."""

    __slots__ = ("is_array", "path", "unique", "seen", "index", "expect_key", "key", "start", "tags")

    def __init__(self, is_array: bool, path: tuple, unique: bool, start: int) -> None:
        self.is_array = is_array
        self.path = path
        self.unique = unique
        self.seen: frozenset = frozenset()
        self.index = 0
        self.expect_key = not is_array
        self.key: Any = None
        self.start = start
        # Of an object: (key, canonical value) of the discriminating properties written so far.
        self.tags: tuple = ()

    def copy(self) -> "_Frame":
        twin = _Frame.__new__(_Frame)
        twin.is_array, twin.path, twin.unique, twin.seen = self.is_array, self.path, self.unique, self.seen
        twin.index, twin.expect_key, twin.key, twin.start = self.index, self.expect_key, self.key, self.start
        twin.tags = self.tags
        return twin

    def child_path(self) -> tuple:
        """The instance path of the value being written: an index in an array; in an object,
        its key, or (key, tags) once discriminating properties were written."""
        if self.is_array:
            return self.path + (self.index,)
        return self.path + (((self.key, self.tags),) if self.tags else (self.key,))


class ScanState:
    """Where the scan of a JSON prefix stands (immutable for callers: ``feed`` returns a new one)."""

    __slots__ = ("text", "frames", "in_string", "escaped", "string_start", "string_is_key", "scalar_start")

    def __init__(self) -> None:
        self.text = b""
        self.frames: tuple = ()
        self.in_string = False
        self.escaped = False
        self.string_start = -1
        self.string_is_key = False
        self.scalar_start = -1

    @property
    def unique_open(self) -> bool:
        return any(frame.unique for frame in self.frames)


class UniqueItemsCheck:
    """The matcher's text check for ``uniqueItems`` (see the module docstring).

    ``requires_unique(path)`` says whether the array at an instance path (a tuple of
    keys and indices) must have unique items. A key of an object that holds properties
    named in ``discriminators`` with a scalar value written before it is ``(key, tags)``,
    ``tags`` the (name, canonical value) of those properties in the order written.
    """

    def __init__(
        self, requires_unique: Callable[[tuple], bool], rebuild: tuple | None = None, *, discriminators: frozenset = frozenset()
    ) -> None:
        self._requires_unique = requires_unique
        self._decided: dict[tuple, bool] = {}
        self._rebuild = rebuild
        self._discriminators = discriminators
        # Each token's bytes split at the quote that closes a string it continues (see
        # ``_split_at_closing_quote``): the same in every state, and the quick verdicts of a
        # string in a unique array read every token holding a quote, at every step.
        self._splits: dict[bytes, tuple | bool | None] = {}

    def __reduce__(self):
        if self._rebuild is None:
            raise TypeError("this uniqueItems check cannot be pickled (it was built without a recipe)")
        return self._rebuild

    def _unique_at(self, path: tuple) -> bool:
        found = self._decided.get(path)
        if found is None:
            found = self._decided[path] = bool(self._requires_unique(path))
        return found

    def initial(self) -> ScanState:
        return ScanState()

    def trigger_bytes(self, state: ScanState) -> bytes:
        """A token containing none of these bytes leaves ``feed`` successful (``b""``: every token does)."""
        if not state.unique_open:
            return b"["
        return b'"' if state.in_string else _COMPLETING

    def trigger_in_order(self, state: ScanState) -> bytes | None:
        """Bytes a token must hold in this order to fail, when ``trigger_bytes`` says too
        little: with no unique array open, a token can only fail by opening one and
        repeating an item in it, which takes a comma after its ``[`` (in JSON). While no
        unique array holds an item yet (nor can those a token opens), a repeat takes two
        items of one array inside the token and a comma between them."""
        if not state.unique_open:
            return b"[,"
        if not any(frame.seen for frame in state.frames if frame.unique):
            return b","
        return None

    def refused_among(self, state: ScanState, datas: list[bytes]) -> list[int]:
        """The indices of ``datas`` that ``feed`` refuses from ``state``: the same answers
        as feeding each, most of them found without scanning a copy of the text (see
        ``_quick_verdicts``)."""
        verdicts = self._quick_verdicts(state, datas)
        refused = []
        for index, data in enumerate(datas):
            verdict = verdicts[index] if verdicts is not None else None
            if verdict is None:
                verdict = self.feed(state, data) is not None
            if not verdict:
                refused.append(index)
        return refused

    def _quick_verdicts(self, state: ScanState, datas: list[bytes]) -> list[bool | None] | None:
        """Per token of ``datas``, whether ``feed`` passes it (None where only ``feed`` can
        tell), or None when there is no quick verdict for ``state``.

        Inside a string in a unique array, a token that closes it and goes on with
        punctuation that completes nothing (``",`` ``"]`` ...), possibly opening a string it
        does not close (``","`` ``"],"``), is decided by the closed string alone.
        """
        if not state.unique_open or not state.in_string or state.escaped:
            return None
        content = state.text[state.string_start + 1 :]
        frames = state.frames
        # A key, or a string that is no item of a unique array, never repeats anything.
        seen = None
        if not state.string_is_key and frames and frames[-1].is_array and frames[-1].unique:
            seen = frames[-1].seen

        def closes_quietly(rest: bytes) -> bool:
            # Whether what follows the closing quote completes no item of a unique array.
            depth = len(frames)
            for index, byte in enumerate(rest):
                if byte in _CLOSING:
                    depth -= 1
                    if depth < 0 or (depth > 0 and frames[depth - 1].is_array and frames[depth - 1].unique):
                        return False
                elif byte == 0x22:
                    # A string opened and not closed inside the token completes nothing.
                    return 0x22 not in rest[index + 1 :]
                elif byte not in _INERT:
                    return False
            return True

        # Many tokens end alike (``",`` ``"]``): each ending is judged once.
        quiet_after: dict[bytes, bool] = {}
        # The rest of every seen string after the text so far, where both are plain
        # (no escape, no control character, whole UTF-8): a plain ASCII token completes a
        # repeat exactly when what it holds before its quote is one of them.
        repeats = _plain_rests(content, seen) if seen else None
        splits = self._splits
        verdicts: list[bool | None] = []
        for data in datas:
            split = splits.get(data, _NOT_SPLIT_YET)
            if split is _NOT_SPLIT_YET:
                split = splits[data] = _split_at_closing_quote(data)
            if split is True or split is None:
                verdicts.append(split)  # the string goes on, or no quote at all
                continue
            written, rest, plain = split
            quiet = quiet_after.get(rest)
            if quiet is None:
                quiet = quiet_after[rest] = closes_quietly(rest)
            if not quiet:
                verdicts.append(None)
            elif seen is None:
                verdicts.append(True)
            elif repeats is not None and plain:
                verdicts.append(written not in repeats)
            else:
                verdicts.append(_closed_string_is_new(content + written, seen))
        return verdicts

    def accepts(self, text: bytes) -> bool:
        return self.feed(self.initial(), text) is not None

    def feed(self, state: ScanState, data: bytes) -> ScanState | None:
        """The state after ``data``, or None once an array that must be unique has a repeated item."""
        new = ScanState.__new__(ScanState)
        text = new.text = state.text + data
        # Frames are shared with ``state`` until this feed changes them (only the innermost
        # one ever changes): most tokens touch none, and deep documents have many.
        frames = list(state.frames)
        owned = [False] * len(frames)
        in_string, escaped = state.in_string, state.escaped
        string_start, string_is_key, scalar_start = state.string_start, state.string_is_key, state.scalar_start
        discriminators = self._discriminators

        def innermost() -> _Frame:
            if not owned[-1]:
                frames[-1] = frames[-1].copy()
                owned[-1] = True
            return frames[-1]

        def completed(start: int, end: int) -> bool:
            if frames and not frames[-1].is_array and frames[-1].key in discriminators and text[start] not in b"[{":
                frame = innermost()
                frame.tags = frame.tags + ((frame.key, canonical(_parse(text[start:end]))),)
            if not frames or not frames[-1].is_array or not frames[-1].unique:
                return True
            value = canonical(_parse(text[start:end]))
            if value in frames[-1].seen:
                return False
            frame = innermost()
            frame.seen = frame.seen | {value}
            return True

        for i in range(len(state.text), len(text)):
            byte = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif byte == 0x5C:
                    escaped = True
                elif byte == 0x22:
                    in_string = False
                    if string_is_key:
                        innermost().key = _parse(text[string_start : i + 1])
                    elif not completed(string_start, i + 1):
                        return None
                continue
            if scalar_start >= 0:
                if byte in _SCALAR_BYTES:
                    if text[scalar_start : i + 1] in (b"true", b"false", b"null"):
                        start, scalar_start = scalar_start, -1
                        if not completed(start, i + 1):
                            return None
                    continue
                start, scalar_start = scalar_start, -1
                if not completed(start, i):
                    return None
            if byte in _WHITESPACE:
                continue
            if byte == 0x22:
                in_string, string_start = True, i
                string_is_key = bool(frames) and not frames[-1].is_array and frames[-1].expect_key
            elif byte in (0x5B, 0x7B):
                is_array = byte == 0x5B
                path = frames[-1].child_path() if frames else ()
                frames.append(_Frame(is_array, path, is_array and self._unique_at(path), i))
                owned.append(True)
            elif byte in (0x5D, 0x7D):
                if not frames:
                    continue
                closed = frames.pop()
                owned.pop()
                if not completed(closed.start, i + 1):
                    return None
            elif byte == 0x2C:
                if frames:
                    if frames[-1].is_array:
                        innermost().index += 1
                    else:
                        innermost().expect_key = True
            elif byte == 0x3A:
                if frames:
                    innermost().expect_key = False
            else:
                scalar_start = i
                # A literal is decided by its first letter: a repeated one is refused before it is spelled out.
                literal = _LITERALS.get(byte)
                if literal is not None and frames and frames[-1].unique and canonical(literal[0]) in frames[-1].seen:
                    return None
        new.frames = tuple(frames)
        new.in_string, new.escaped = in_string, escaped
        new.string_start, new.string_is_key, new.scalar_start = string_start, string_is_key, scalar_start
        return new


# --------------------------------------------------------------------------------------------
# which arrays must be unique


class UniquePolicy:
    """``requires_unique(path)`` over a JSON Schema, following only applicators that always apply.

    ``resolve(ref, base, pointer) -> (schema, base, pointer)`` and ``base_of(schema, base)``
    come from the translator's ``$ref`` resolver.
    """

    def __init__(self, root: Any, resolve, base_of, *, legacy_ref_siblings: bool = False) -> None:
        self.root = root
        self.resolve = resolve
        self.base_of = base_of
        # Up to draft 7 everything next to a $ref is ignored.
        self.legacy_ref_siblings = legacy_ref_siblings

    def _closure(self, located: list, kind: str, tags: tuple = ()) -> list:
        """Every schema that applies for sure at the location of ``located`` (schema, base,
        pointer), holding a ``kind``; for an object, ``tags`` are the discriminating
        properties written in it so far, which pick the branch of a discriminated union."""
        out, seen, stack = [], set(), list(located)
        while stack:
            schema, base, pointer = stack.pop()
            if not isinstance(schema, dict) or id(schema) in seen:
                continue
            seen.add(id(schema))
            base = self.base_of(schema, base)
            if "$ref" in schema:
                stack.append(self.resolve(schema["$ref"], base, pointer))
                if self.legacy_ref_siblings:
                    continue
            out.append((schema, base, pointer))
            for i, member in enumerate(schema.get("allOf") or ()):
                stack.append((member, base, f"{pointer}/allOf/{i}"))
            for keyword, i, kinds in sure_branches(schema, base, self.resolve, self.base_of):
                if kind in kinds:
                    stack.append((schema[keyword][i], base, f"{pointer}/{keyword}/{i}"))
            if tags:
                for keyword in _UNIONS:
                    chosen = self._tagged_branch(schema, keyword, base, dict(tags))
                    if chosen is not None:
                        stack.append((schema[keyword][chosen], base, f"{pointer}/{keyword}/{chosen}"))
        return out

    def _tagged_branch(self, schema: dict, keyword: str, base: str, tags: dict) -> int | None:
        """The branch of ``schema[keyword]`` whose discriminator has the value written, if any."""
        found = discriminator(schema, keyword, base, self.resolve, self.base_of)
        if found is None or found[0] not in tags:
            return None
        return found[1].get(tags[found[0]])

    def _children(self, schema: dict, base: str, pointer: str, key: Any) -> list:
        found = []
        if isinstance(key, int):
            prefix = schema.get("prefixItems")
            items = schema.get("items")
            if isinstance(items, list):
                prefix, items = items, schema.get("additionalItems")
                prefix_key = "items"
            else:
                prefix_key = "prefixItems"
            if isinstance(prefix, list) and key < len(prefix):
                found.append((prefix[key], base, f"{pointer}/{prefix_key}/{key}"))
            elif items is not None:
                found.append((items, base, f"{pointer}/items"))
            return found
        properties = schema.get("properties") or {}
        matched = False
        if key in properties:
            matched = True
            found.append((properties[key], base, f"{pointer}/properties/{key}"))
        for pattern, sub in (schema.get("patternProperties") or {}).items():
            try:
                hit = re.search(pattern, key) is not None
            except re.error:
                hit = False
            if hit:
                matched = True
                found.append((sub, base, f"{pointer}/patternProperties/{pattern}"))
        if not matched and "additionalProperties" in schema:
            found.append((schema["additionalProperties"], base, f"{pointer}/additionalProperties"))
        return found

    def requires_unique(self, path: tuple) -> bool:
        located = [(self.root, "", "#")]
        for step in path:
            key, tags = step if isinstance(step, tuple) else (step, ())
            kind = "array" if isinstance(key, int) else "object"
            located = [
                child
                for schema, base, pointer in self._closure(located, kind, tags)
                for child in self._children(schema, base, pointer, key)
            ]
            if not located:
                return False
        return any(schema.get("uniqueItems") is True for schema, _, _ in self._closure(located, "array"))


def conditional_unique(
    root: Any, resolve, base_of, *, legacy_ref_siblings: bool = False, tags_first: bool = False,
    discriminators: set | None = None,
) -> str | None:
    """The pointer of a ``uniqueItems: true`` that applies only under a condition, if any.

    Each schema is visited with the containers (array, object) for which it surely
    applies where it is reached: all of them along ``$ref``, ``allOf`` and the child
    keywords, those it alone admits for an ``anyOf``/``oneOf`` branch, none under a
    conditional applicator. Arrays of at most one item are unique anyway and do not count.
    With ``tags_first`` (properties are written in schema order), the branches of a
    discriminated union (see :func:`discriminator`) apply for sure to objects: the check
    knows the branch from its first property before anything else of the object is
    written. Their discriminating property names are added to ``discriminators``.
    """
    seen: set = set()
    stack = [(root, "", "#", _CONTAINERS)]
    while stack:
        schema, base, pointer, sure = stack.pop()
        if not isinstance(schema, dict) or (id(schema), sure) in seen:
            continue
        seen.add((id(schema), sure))
        base = base_of(schema, base)
        if legacy_ref_siblings and "$ref" in schema:
            stack.append((*resolve(schema["$ref"], base, pointer), sure))
            continue
        max_items = schema.get("maxItems")
        if "array" not in sure and schema.get("uniqueItems") is True and not (isinstance(max_items, int) and max_items <= 1):
            return pointer
        if "$ref" in schema:
            target, target_base, target_pointer = resolve(schema["$ref"], base, pointer)
            stack.append((target, target_base, target_pointer, sure))
        branch_sure = {(keyword, i): sure & kinds for keyword, i, kinds in sure_branches(schema, base, resolve, base_of)}
        if tags_first and "object" in sure:
            for keyword in _UNIONS:
                found = discriminator(schema, keyword, base, resolve, base_of)
                if found is None:
                    continue
                if discriminators is not None:
                    discriminators.add(found[0])
                for i in range(len(schema[keyword])):
                    branch_sure[(keyword, i)] = branch_sure.get((keyword, i), frozenset()) | {"object"}
        for key, value in schema.items():
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                child = _CONTAINERS if "object" in sure else frozenset()
                stack.extend((sub, base, f"{pointer}/{key}/{name}", child) for name, sub in value.items())
            elif key in _CONDITIONAL_MAPS and isinstance(value, dict):
                stack.extend((sub, base, f"{pointer}/{key}/{name}", frozenset()) for name, sub in value.items())
            elif key in ("allOf", "items", "prefixItems", "additionalItems", "additionalProperties") or key in _CONDITIONAL:
                if key == "allOf":
                    child = sure
                elif key == "additionalProperties":
                    child = _CONTAINERS if "object" in sure else frozenset()
                elif key in _CONDITIONAL:
                    child = frozenset()
                else:
                    child = _CONTAINERS if "array" in sure else frozenset()
                if isinstance(value, list):
                    stack.extend((sub, base, f"{pointer}/{key}/{i}", branch_sure.get((key, i), child)) for i, sub in enumerate(value))
                else:
                    stack.append((value, base, f"{pointer}/{key}", child))
    return None
