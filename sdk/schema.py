"""JSON Schema (and everything that has one) to grammar.

``grammar_from_schema`` accepts Pydantic models, TypedDicts, dataclasses, functions, tool
dicts, LangChain tools and JSON Schema dicts (draft 2020-12 and draft-07): all of them go
through :func:`to_json_schema`, then one translation to grammar IR.

Every keyword is either enforced or reported (``uniqueItems`` over unbounded item sets by
the grammar's run-time ``text_check``, see :mod:`surecall.schema_unique`; the rest by the
grammar itself): an
:class:`UnsupportedSchemaError` names the keyword and its JSON pointer. With
``lenient=True`` the constraint is relaxed instead and listed in the returned grammar's
``relaxations`` (each also logged as a warning); values generated under a relaxed grammar
are still checked by :func:`surecall.validation.validate_json`.

Property order: ``property_order="schema"`` (the default, used for generation) writes the
listed properties in the order the schema gives them, followed by any additional ones;
``property_order="any"`` accepts them in any order, which is what checking arbitrary
documents against the grammar needs (see ``_Translator._any_order_members``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn
from urllib.parse import unquote, urldefrag, urljoin

from surecall.engine.errors import EmptyLanguageError, GrammarError
from surecall.engine.gc_pause import collector_paused
from surecall.engine.grammar import CheckedGrammar, Grammar
from surecall.engine.ir import (
    EMPTY,
    NOTHING,
    Alt,
    Bytes,
    Complement,
    Intersect,
    Node,
    Ref,
    Repeat,
    Seq,
    alt,
    byte_set,
    chars,
    literal,
    optional,
    repeat,
    seq,
    star,
)

from .formats import FORMAT_MAX_LENGTH, FORMAT_PATTERNS
from .schema_flatten import value_schema as flat_value_schema
from .schema_flatten import (
    TYPE_ATOMS,
    Flat,
    Normalizer,
    Part,
    SomeMember,
    Sub,
    and_subs,
    as_schemas,
    member_of as _member,
    negation_of,
    pattern_matches,
    type_of,
)
from .schema_inputs import SchemaInputError, parse_docstring, to_json_schema
from .schema_numbers import NumberConstraintError, common_multiple, equal_number, number_language, to_decimal
from .schema_strings import (
    ANY_DECODED_CHAR,
    ANY_STRING_BODY,
    ANY_STRING_CHAR,
    COUNTED_STRING_CHAR,
    EncodingError,
    encode_regular,
    encode_text,
    strings_other_than,
    within_length,
)
from .schema_unique import UniqueItemsCheck, UniquePolicy, conditional_unique

__all__ = [
    "grammar_from_schema",
    "translate_schema",
    "to_json_schema",
    "UnsupportedSchemaError",
    "UnsatisfiableSchemaError",
    "SchemaInputError",
    "Relaxation",
    "SchemaGrammar",
    "parse_docstring",
    "MAX_WHITESPACE",
    "ANY_ORDER_MAX_PROPERTIES",
    "ANY_ORDER_MAX_TRACKED_SETS",
]

logger = logging.getLogger("surecall.schema")

COMPLEMENT_MAX_STATES = 4000
"""Most automaton states when grouping keys by the patternProperties they match."""

PATTERN_CLASSES_MAX_PATTERNS = 6
"""Most patternProperties next to keys of other kinds."""

UNIQUE_MAX_VALUES = 8
"""``uniqueItems`` is enforced when the items are one of at most this many known values."""

MAX_WHITESPACE = 16
"""Most whitespace characters at one place in ``whitespace="flexible"`` mode."""

ANY_ORDER_MAX_PROPERTIES = 12
"""Most listed properties per object for ``property_order="any"`` (the grammar tracks which were
seen: one state per set of them, 4,096 at this limit)."""

#: Tracking up to this many properties keeps an any-order object's grammar small next to the limits.
ANY_ORDER_SMALL_TRACKING = 8

ANY_ORDER_MAX_TRACKED_SETS = 8_192
"""Most sets of written properties tracked over the any-order objects of one schema that track
more than ``ANY_ORDER_SMALL_TRACKING`` properties."""

ANY_ORDER_MAX_LITERAL_MEMBERS = 5
"""Objects in ``enum``/``const`` with at most this many members are accepted in any order (``property_order="any"``)."""

MAX_WANTED_MEMBERS = 5
"""Most kinds of member negations may ask one object for (each way to write a member is
tried for every set of them it meets)."""

MAX_COUNTED_WANTED_EXTRAS = 16
"""Most additional members, under ``maxProperties``, among which a negation's wanted member is placed."""

MAX_COUNTED_CONTAINS_STATES = 1_024
"""Most (position, count) states of an array counting its items that match ``contains``."""

MAX_SCHEMA_NESTING = 64
"""Most subschemas nested inside one another that are translated (recursion through a plain
``$ref`` is a rule calling itself and does not count)."""


class UnsupportedSchemaError(ValueError):
    """A schema keyword surecall cannot enforce (``keyword`` at JSON pointer ``pointer``)."""

    def __init__(self, keyword: str, pointer: str, message: str) -> None:
        self.keyword = keyword
        self.pointer = pointer or "#"
        self.message = message
        super().__init__(f"{message} (keyword {keyword!r} at {self.pointer})")

    def __reduce__(self):
        return (type(self), (self.keyword, self.pointer, self.message))


class UnsatisfiableSchemaError(UnsupportedSchemaError):
    """The schema admits no value at all (e.g. ``false``, or contradictory constraints)."""


@dataclass(frozen=True)
class Relaxation:
    """A constraint ``lenient=True`` dropped or weakened."""

    keyword: str
    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer}: {self.keyword}: {self.message}"


class SchemaGrammar(CheckedGrammar):
    """A grammar built from a schema; ``relaxations`` lists what ``lenient`` relaxed.

    ``text_check`` (or None) enforces ``uniqueItems`` on top of the grammar: the matcher
    masks tokens it rejects, and :meth:`accepts` applies it to whole texts.
    """

    __slots__ = ("relaxations", "json_schema")


def grammar_from_schema(
    schema: Any,
    *,
    whitespace: str = "compact",
    lenient: bool = False,
    property_order: str = "schema",
) -> SchemaGrammar:
    """The grammar of the JSON texts of the values valid under ``schema``.

    ``whitespace``: ``"compact"`` (no whitespace, like ``json.dumps(separators=(",", ":"))``),
    ``"spaced"`` (one space after each ``,`` and ``:`` and none elsewhere, like
    ``json.dumps`` by default) or ``"flexible"`` (up to :data:`MAX_WHITESPACE` whitespace
    characters around punctuation). ``property_order``: ``"schema"`` or ``"any"`` (see the module docstring).
    """
    return translate_schema(schema, whitespace=whitespace, lenient=lenient, property_order=property_order)


def translate_schema(schema: Any, *, whitespace: str = "compact", lenient: bool = False, property_order: str = "schema") -> SchemaGrammar:
    if whitespace not in ("compact", "flexible", "spaced"):
        raise ValueError(f"whitespace must be 'compact', 'flexible' or 'spaced', got {whitespace!r}")
    if property_order not in ("schema", "any"):
        raise ValueError(f"property_order must be 'schema' or 'any', got {property_order!r}")
    try:
        json_schema = to_json_schema(schema)
        translator = _Translator(json_schema, whitespace=whitespace, lenient=lenient, property_order=property_order)
        with collector_paused():  # thousands of grammar nodes: see collector_paused
            start = translator.translate_root()
            rules = _prune_unproductive({"start": start, **translator.rules})
    except RecursionError as error:
        raise UnsupportedSchemaError("schema", "#", "the schema nests too deeply to translate") from error
    if "start" not in rules:
        raise UnsatisfiableSchemaError("schema", "#", "the schema admits no value")
    try:
        grammar = SchemaGrammar(rules, "start")
        grammar.automaton  # compile now, so a grammar too large to build fails here and not mid-generation
    except EmptyLanguageError as error:
        raise UnsatisfiableSchemaError("schema", "#", "the schema admits no value") from error
    except GrammarError as error:
        hint = ""
        if translator.most_tracked > ANY_ORDER_SMALL_TRACKING:
            hint = (f"; an object under property_order='any' tracks which of its {translator.most_tracked} properties "
                    f"were written ({2 ** translator.most_tracked} sets), the default schema order does not")
        raise UnsupportedSchemaError("schema", "#", f"the schema's grammar cannot be built: {error}{hint}") from error
    text_check = None
    if translator.unique_at_run_time:
        resolver = translator.resolver
        pointer = conditional_unique(
            json_schema, resolver.resolve, resolver.base_of, legacy_ref_siblings=resolver.legacy_ref_siblings,
            tags_first=property_order == "schema",
        )
        if pointer is not None:
            translator.unsupported(
                "uniqueItems", pointer, "uniqueItems under anyOf/oneOf/if/then/else/not/contains is only enforced for a small finite set of items"
            )
        text_check = unique_items_check(json_schema, property_order)
    object.__setattr__(grammar, "relaxations", tuple(translator.relaxations))
    object.__setattr__(grammar, "json_schema", json_schema)
    object.__setattr__(grammar, "text_check", text_check)
    return grammar


def unique_items_check(json_schema: Any, property_order: str = "schema", *, items: bool = False) -> UniqueItemsCheck:
    """The run-time ``uniqueItems`` check of a (plain JSON) schema; rebuilt the same way when
    unpickled. With ``items``, of a text holding an array whose items are such values
    (a list of tool calls)."""
    legacy = _legacy_draft(json_schema)
    resolver = _Resolver(json_schema, _raise_unsupported, legacy_ref_siblings=legacy)
    policy = UniquePolicy(json_schema, resolver.resolve, resolver.base_of, legacy_ref_siblings=legacy)
    discriminators: set = set()
    conditional_unique(
        json_schema, resolver.resolve, resolver.base_of, legacy_ref_siblings=legacy,
        tags_first=property_order == "schema", discriminators=discriminators,
    )
    requires_unique = policy.requires_unique
    if items:
        def requires_unique(path: tuple) -> bool:
            return bool(path) and isinstance(path[0], int) and policy.requires_unique(path[1:])

    return UniqueItemsCheck(
        requires_unique, rebuild=(_rebuilt_unique_items_check, (json_schema, property_order, items)),
        discriminators=frozenset(discriminators),
    )


def _rebuilt_unique_items_check(json_schema: Any, property_order: str, items: bool) -> UniqueItemsCheck:
    return unique_items_check(json_schema, property_order, items=items)


def _raise_unsupported(keyword: str, pointer: str, message: str) -> NoReturn:
    raise UnsupportedSchemaError(keyword, pointer, message)


def _declares_draft(root: Any, drafts: tuple[str, ...]) -> bool:
    """Whether the schema's ``$schema`` names one of ``drafts``."""
    return isinstance(root, dict) and isinstance(root.get("$schema"), str) and any(
        draft in root["$schema"] for draft in drafts
    )


def _legacy_draft(root: Any) -> bool:
    return _declares_draft(root, ("draft-07", "draft-06", "draft-04", "draft-03"))


# --------------------------------------------------------------------------------------------
# $ref resolution


class _Resolver:
    """Finds ``$ref`` targets: JSON pointers, ``$id`` documents and ``$anchor`` names."""

    def __init__(self, root: Any, fatal, *, legacy_ref_siblings: bool) -> None:
        self.root = root
        self.fatal = fatal
        self.legacy_ref_siblings = legacy_ref_siblings
        self.documents: dict[str, tuple[Any, str]] = {"": (root, "#")}
        self.anchors: dict[tuple[str, str], tuple[Any, str]] = {}
        self.bases: dict[int, str] = {}
        # Negations of member schemas, by the member's id (see schema_flatten.negation_of).
        self.negations: dict[int, tuple[Any, dict]] = {}
        self._index(root, "", "#")

    def _index(self, schema: Any, base: str, pointer: str) -> None:
        if isinstance(schema, list):
            for i, item in enumerate(schema):
                self._index(item, base, f"{pointer}/{i}")
            return
        if not isinstance(schema, dict):
            return
        own_id = schema.get("$id")
        if self.legacy_ref_siblings and "$ref" in schema:
            own_id = None  # up to draft 7, everything next to $ref is ignored, $id included
        if isinstance(own_id, str):
            if own_id.startswith("#"):
                self.anchors[(base, own_id[1:])] = (schema, pointer)
            else:
                base = urljoin(base, own_id) if base else own_id
                base, _ = urldefrag(base)
                self.documents[base] = (schema, pointer)
        self.bases[id(schema)] = base
        anchor = schema.get("$anchor")
        if isinstance(anchor, str):
            self.anchors[(base, anchor)] = (schema, pointer)
        for key, value in schema.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for name, subschema in value.items():
                    self._index(subschema, base, f"{pointer}/{_escape(key)}/{_escape(name)}")
            elif key in _SCHEMA_VALUES and isinstance(value, (dict, list)):
                self._index(value, base, f"{pointer}/{_escape(key)}")

    def base_of(self, schema: Any, inherited: str) -> str:
        return self.bases.get(id(schema), inherited)

    def resolve(self, ref: Any, base: str, pointer: str) -> tuple[Any, str, str]:
        if not isinstance(ref, str):
            self.fatal("$ref", pointer, "$ref must be a string")
        target = urljoin(base, ref) if base else ref
        document_uri, fragment = urldefrag(target)
        if document_uri not in self.documents:
            self.fatal("$ref", pointer, f"cannot resolve {ref!r}: only references inside the schema are supported")
        document, document_pointer = self.documents[document_uri]
        fragment = unquote(fragment)
        if fragment == "":
            return document, document_uri, document_pointer
        if fragment.startswith("/"):
            node = document
            node_pointer = document_pointer
            node_base = document_uri
            for token in fragment[1:].split("/"):
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    self.fatal("$ref", pointer, f"cannot resolve {ref!r}: no {token!r} at that point")
                node_pointer = f"{node_pointer}/{_escape(token)}"
                node_base = self.bases.get(id(node), node_base)
            return node, node_base, node_pointer
        found = self.anchors.get((document_uri, fragment))
        if found is None:
            self.fatal("$ref", pointer, f"cannot resolve {ref!r}: unknown anchor")
        return found[0], document_uri, found[1]


# Where subschemas live (anything else, unknown keywords included, is plain data).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_SCHEMA_VALUES = frozenset(
    {
        "items", "prefixItems", "additionalItems", "additionalProperties", "allOf", "anyOf", "oneOf", "not",
        "if", "then", "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
        "contentSchema",
    }
)


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------------------------------
# translation


_WHITESPACE_CHARS = chars([(0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20)])


class _Translator:
    def __init__(self, root: Any, *, whitespace: str, lenient: bool, property_order: str) -> None:
        self.root = root
        self.lenient = lenient
        self.property_order = property_order
        self.whitespace = whitespace
        self.ws = repeat(_WHITESPACE_CHARS, 0, MAX_WHITESPACE) if whitespace == "flexible" else EMPTY
        self.relaxations: list[Relaxation] = []
        self.rules: dict[str, Node] = {}
        self._ref_rules: dict[int, str] = {}
        self._sub_rules: dict[tuple, tuple[str, Sub]] = {}
        self._counter = 0
        self._nesting = 0
        legacy = _legacy_draft(root)
        # Up to draft 4, "integer" excludes 1.0
        self.plain_integers = _declares_draft(root, ("draft-04", "draft-03"))
        self.resolver = _Resolver(root, self.fatal, legacy_ref_siblings=legacy)
        self.normalizer = Normalizer(
            self.resolver,
            self,
            legacy_ref_siblings=legacy,
            # if/then/else arrived in draft 7: to older validators they are unknown words
            conditionals=not _declares_draft(root, ("draft-06", "draft-04", "draft-03")),
        )
        self._validator = None
        self._json_value: Node | None = None
        self._key_classes: dict[tuple, list[tuple[frozenset, Node]]] = {}
        # An array whose uniqueItems the grammar cannot express was met: the text check enforces it.
        self.unique_at_run_time = False
        # The most properties an object under property_order="any" tracks, and the sets of
        # them all such objects track (2^n for n properties).
        self.most_tracked = 0
        self.tracked_sets = 0

    # -- reporting ---------------------------------------------------------------------------
    def unsupported(self, keyword: str, pointer: str, message: str) -> None:
        if not self.lenient:
            raise UnsupportedSchemaError(keyword, pointer, message)
        relaxation = Relaxation(keyword, pointer or "#", message)
        if relaxation not in self.relaxations:
            self.relaxations.append(relaxation)
            logger.warning("relaxed schema constraint: %s", relaxation)

    def fatal(self, keyword: str, pointer: str, message: str) -> NoReturn:
        raise UnsupportedSchemaError(keyword, pointer, message)

    def _name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    # -- entry points ---------------------------------------------------------------------
    def translate_root(self) -> Node:
        return self.translate_sub(Sub((Part.of(self.root, "", "#"),)), as_rule=False)

    def translate_sub(self, sub: Sub, *, as_rule: bool = True) -> Node:
        """The grammar of a subschema position; objects and arrays get their own rule."""
        if len(sub.parts) == 1 and sub.parts[0].schema is True:
            return self.json_value()
        # A position is known by its schemas and their bases: where it was reached from (its
        # pointer) changes nothing it accepts, and a negated recursive schema reaches the same
        # member negations again under ever longer pointers (see schema_flatten.negation_of).
        key = tuple((part.ident, part.base) for part in sub.parts)
        known = self._sub_rules.get(key)
        if known is not None:
            return Ref(known[0])
        # Recursion through a reference is a rule calling itself; a subschema that combines
        # a reference with other keywords is a new position at every level, so such a
        # schema would unroll until Python's stack ran out.
        if self._nesting >= MAX_SCHEMA_NESTING:
            self.fatal("$ref", sub.parts[0].pointer, f"subschemas nest more than {MAX_SCHEMA_NESTING} levels deep")
        self._nesting += 1
        try:
            return self._translate_new_sub(sub, key, as_rule)
        finally:
            self._nesting -= 1

    def _translate_new_sub(self, sub: Sub, key: tuple, as_rule: bool) -> Node:
        alternatives = self.normalizer.flatten_sub(sub)
        if len(alternatives) == 1 and alternatives[0].ref is not None:
            return self._ref(alternatives[0].ref)
        if not as_rule or not any(_structured(flat) for flat in alternatives):
            return alt(*(self.translate_flat(flat) for flat in alternatives)) if alternatives else NOTHING
        name = self._name("value")
        self._sub_rules[key] = (name, sub)
        self.rules[name] = alt(*(self.translate_flat(flat) for flat in alternatives)) if alternatives else NOTHING
        return Ref(name)

    def _ref(self, part: Part) -> Node:
        name = self._ref_rules.get(part.ident)
        if name is None:
            name = self._name("ref")
            self._ref_rules[part.ident] = name
            self.rules[name] = NOTHING
            alternatives = self.normalizer.flatten(part.schema, part.base, part.pointer)
            self.rules[name] = alt(*(self.translate_flat(flat) for flat in alternatives)) if alternatives else NOTHING
        return Ref(name)

    def json_value(self) -> Node:
        """Any JSON value (a recursive rule)."""
        if self._json_value is None:
            self._json_value = Ref("json_value")
            value = Ref("json_value")
            string = seq('"', ANY_STRING_BODY, '"')
            member = seq(string, self._colon(), value)
            self.rules["json_value"] = alt(
                "null",
                "true",
                "false",
                number_language(integer=False),
                string,
                seq("[", self.ws, optional(seq(value, star(seq(self._sep(), value)))), self.ws, "]"),
                seq("{", self.ws, optional(seq(member, star(seq(self._sep(), member)))), self.ws, "}"),
            )
        return self._json_value

    def _shared(self, node: Node, prefix: str) -> Node:
        """``node`` as a rule of its own, so that the states referring to it share one copy."""
        if isinstance(node, (Ref, Bytes)) or node in (NOTHING, EMPTY):
            return node
        name = self._name(prefix)
        self.rules[name] = node
        return Ref(name)

    def _sep(self) -> Node:
        return ", " if self.whitespace == "spaced" else seq(self.ws, ",", self.ws)

    def _colon(self) -> Node:
        return ": " if self.whitespace == "spaced" else seq(self.ws, ":", self.ws)

    # -- one flat alternative ---------------------------------------------------------------------
    def translate_flat(self, flat: Flat) -> Node:
        if flat.ref is not None:
            return self._ref(flat.ref)
        types = flat.types if flat.types is not None else TYPE_ATOMS
        if flat.enum is not None:
            values = self._enum_values(flat)
            return alt(*(self.value_literal(v) for v in values)) if values else NOTHING
        excluded = flat.exclude
        options: list[Node] = []
        if "null" in types and not any(v is None for v in excluded):
            options.append(literal("null"))
        if "boolean" in types:
            for value, text in ((True, "true"), (False, "false")):
                if not any(v is value for v in excluded):
                    options.append(literal(text))
        if "integer" in types or "nonint" in types:
            options.append(self._number(flat, integer="nonint" not in types, non_integer="integer" not in types))
        if "string" in types:
            options.append(seq('"', self.string_body(flat), '"'))
        if ("array" in types or "object" in types) and any(isinstance(v, (list, dict)) for v in excluded):
            self.unsupported("not", flat.pointer, "excluding array or object values")
        if "array" in types:
            options.append(self._array(flat))
        if "object" in types:
            options.append(self._object(flat))
        return alt(*options) if options else NOTHING

    def _enum_values(self, flat: Flat) -> list:
        """The values of ``flat.enum`` that meet the rest of ``flat``: its types (narrowed by
        negations, which the validator's schemas do not spell), exclusions, wanted members
        and source schemas."""
        # The sources' own enum and const are met already: flattening intersected them into
        # flat.enum. Validated again, each value would be looked up in every value before
        # it (a 5,000-value enum: 12 million comparisons).
        sources = [
            ({key: item for key, item in schema.items() if key not in ("enum", "const")}, base)
            if isinstance(schema, dict) and ("enum" in schema or "const" in schema) else (schema, base)
            for schema, base in flat.sources
        ]
        return [
            v for v in flat.enum
            if (flat.types is None or type_of(v) in flat.types)
            and not _member(v, flat.exclude)
            and self._valid(v, sources)
            and all(self._has_wanted(v, c) for c in flat.some_member)
        ]

    def _has_wanted(self, value: Any, wanted: SomeMember) -> bool:
        """Whether ``value`` (not an object: trivially) has the member ``wanted`` asks for."""
        if not isinstance(value, dict):
            return True
        return any(
            self._key_meets(wanted, key) and (wanted.value is None or self._valid_for(item, wanted.value))
            for key, item in value.items()
        )

    def _key_meets(self, wanted: SomeMember, key: str) -> bool:
        """Whether a member named ``key`` may be the one ``wanted`` asks for (its value aside)."""
        return (wanted.outside is None or key not in wanted.outside) and (
            wanted.names is None or self._valid_for(key, wanted.names)
        )

    def _valid_for(self, value: Any, sub: Sub) -> bool:
        return self._valid(value, [(part.schema, part.base) for part in sub.parts])

    def _valid(self, value: Any, sources: list) -> bool:
        if self._validator is None:
            from .validation import validator_for_schema

            self._validator = validator_for_schema(self.root)
        for schema, _base in sources:
            try:
                if not self._validator.evolve(schema=schema).is_valid(value):
                    return False
            except Exception:  # a schema jsonschema itself cannot evaluate: keep the value, validation decides
                continue
        return True

    def value_literal(self, value: Any) -> Node:
        """Every spelling of exactly ``value`` (numbers by value: 1, 1.0 and 1.00 are equal)."""
        if value is None or isinstance(value, bool):
            return literal(json.dumps(value))
        if isinstance(value, (int, float)):
            return equal_number(to_decimal(value))
        if isinstance(value, str):
            return seq('"', encode_text(value), '"')
        if isinstance(value, list):
            items = [self.value_literal(v) for v in value]
            body = seq(items[0], *(seq(self._sep(), item) for item in items[1:])) if items else EMPTY
            return seq("[", self.ws, body, self.ws, "]")
        if isinstance(value, dict):
            members = [seq('"', encode_text(k), '"', self._colon(), self.value_literal(v)) for k, v in value.items()]
            orders = [members]
            if self.property_order == "any" and len(members) <= ANY_ORDER_MAX_LITERAL_MEMBERS:
                orders = list(itertools.permutations(members))
            bodies = [seq(order[0], *(seq(self._sep(), m) for m in order[1:])) if order else EMPTY for order in orders]
            return seq("{", self.ws, alt(*bodies), self.ws, "}")
        self.fatal("enum", "#", f"{value!r} is not a JSON value")

    # -- numbers -----------------------------------------------------------------------------
    def _number(self, flat: Flat, *, integer: bool, non_integer: bool) -> Node:
        multiple = None
        if flat.multiples:
            try:
                multiple = common_multiple(flat.multiples)
            except NumberConstraintError as error:
                self.unsupported("multipleOf", flat.pointer, str(error))
        excluded = [to_decimal(v) for v in flat.exclude if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return self._number_language(flat, integer, non_integer, multiple, excluded)

    def _number_language(self, flat: Flat, integer: bool, non_integer: bool, multiple, excluded: list) -> Node:
        common = dict(
            integer=integer, lower=flat.lower, upper=flat.upper, non_integer=non_integer, excluded=tuple(excluded),
            plain_integer=self.plain_integers,
        )
        try:
            return number_language(
                **common,
                multiple=multiple,
                not_multiples=tuple(to_decimal(step) for kind, step in flat.not_matching if kind == "multipleOf"),
                rules=self.rules,
            )
        except NumberConstraintError as error:
            self.unsupported("multipleOf", flat.pointer, str(error))
            return number_language(**common)

    # -- strings -----------------------------------------------------------------------------
    def string_body(self, flat: Flat) -> Node:
        """The JSON string bodies (without quotes) of the strings ``flat`` accepts."""
        parts: list[Node] = []
        patterns = list(flat.string_patterns)
        if flat.min_length or flat.max_length is not None:
            if flat.max_length is not None and flat.max_length < flat.min_length:
                return NOTHING
            bounded = self._pattern_within_length(patterns, flat.min_length, flat.max_length)
            if bounded is not None:
                parts.append(bounded[1])
                del patterns[bounded[0]]
            else:
                # One counted repetition: the automaton keeps one copy of a character and counts.
                parts.append(repeat(COUNTED_STRING_CHAR, flat.min_length, flat.max_length))
        for pattern in patterns:
            node = self._pattern(pattern, f"{flat.pointer}/pattern")
            if node is not None:
                parts.append(node)
        for name in flat.formats:
            node = self._format(name, flat.pointer)
            if node is not None:
                parts.append(node)
        excluded = [v for v in flat.exclude if isinstance(v, str)]
        if excluded:
            parts.append(strings_other_than(excluded))
        if flat.not_matching:
            parts.extend(self._not_matching(flat))
        if not parts:
            return ANY_STRING_BODY
        return parts[0] if len(parts) == 1 else Intersect(tuple(parts))

    def _pattern(self, pattern: Any, pointer: str) -> Node | None:
        if not isinstance(pattern, str):
            self.fatal("pattern", pointer, "pattern must be a string")
        try:
            return encode_regular(_pattern_texts(pattern))
        except (GrammarError, EncodingError, RecursionError) as error:
            self.unsupported("pattern", pointer, f"pattern {pattern!r}: {error}")
            return None

    @staticmethod
    def _pattern_within_length(patterns: list, shortest: int, longest: int | None) -> tuple[int, Node] | None:
        """(index, string bodies) of the first of ``patterns`` whose texts of ``shortest``
        to ``longest`` characters are one regular node (``within_length``), None where
        none is; a pattern that fails here is left to ``_pattern``, which reports it."""
        for index, pattern in enumerate(patterns):
            if not isinstance(pattern, str):
                continue
            try:
                bounded = within_length(_pattern_texts(pattern), shortest, longest)
                if bounded is not None:
                    return index, encode_regular(bounded)
            except (GrammarError, EncodingError, RecursionError):
                continue
        return None

    def _not_matching(self, flat: Flat) -> list[Node]:
        """The bodies of strings matching none of ``flat.not_matching`` (from a negated
        ``pattern`` or ``format``), as intersection items: the json.dumps spellings, so that
        a body's spelling decides its decoded text, minus every spelling of a match."""
        matches = []
        for kind, value in flat.not_matching:
            if kind == "pattern":
                node = self._pattern(value, f"{flat.pointer}/pattern")
            elif kind == "format":
                node = self._format(value, flat.pointer)
            else:
                continue
            if node is not None:
                matches.append(node)
        if not matches:
            return []
        return [star(COUNTED_STRING_CHAR), Complement(alt(*matches))]

    def _format(self, name: str, pointer: str) -> Node | None:
        if name not in FORMAT_PATTERNS:
            from .validation import checked_formats

            if name in checked_formats():
                self.unsupported("format", f"{pointer}/format", f"format {name!r} is not supported")
            return None
        return _format_language(name)

    # -- arrays -------------------------------------------------------------------------------
    def _array(self, flat: Flat) -> Node:
        lo, hi = flat.min_items, flat.max_items
        if hi is not None and hi < lo:
            return NOTHING
        if flat.unique and (hi is None or hi > 1):
            values = self._finite_values(flat.items) if flat.items is not None and not flat.prefix and flat.contains is None else None
            if values is not None and len(values) <= UNIQUE_MAX_VALUES:
                return self._unique_array(values, lo, hi)
            self.unique_at_run_time = True
        rest = self.translate_sub(flat.items) if flat.items is not None else self.json_value()
        if flat.items is not None and flat.items.is_false():
            rest = NOTHING
        if flat.also_contains or (flat.contains is not None and not (flat.min_contains == 0 and flat.max_contains is None)):
            return self._array_with_contains(flat, rest)
        prefix = [self.translate_sub(sub) for sub in flat.prefix]
        # tail(i): the rest of the array after i elements.
        tail = self._rest_elements(rest, len(prefix), lo, hi)
        for i in range(len(prefix) - 1, -1, -1):
            options = []
            if i >= lo:
                options.append(EMPTY)
            if hi is None or i < hi:
                options.append(seq(self._sep() if i else EMPTY, prefix[i], tail))
            tail = alt(*options) if options else NOTHING
        return seq("[", self.ws, tail, self.ws, "]")

    def _finite_values(self, sub: Sub) -> list | None:
        """The values ``sub`` accepts if they are few and known (enum/const, booleans, null)."""
        values: list = []
        for flat in self.normalizer.flatten_sub(sub):
            if flat.ref is not None:
                return None
            if flat.enum is not None:
                candidates = self._enum_values(flat)
            else:
                types = flat.types if flat.types is not None else TYPE_ATOMS
                if types - {"null", "boolean"}:
                    return None
                candidates = [
                    value for value in ([None] if "null" in types else []) + ([True, False] if "boolean" in types else [])
                    if not _member(value, flat.exclude) and self._valid(value, flat.sources)
                ]
            for value in candidates:
                if not _member(value, values):
                    values.append(value)
        return values

    def _unique_array(self, values: list, lo: int, hi: int | None) -> Node:
        """Arrays of distinct members of ``values``: the grammar tracks which were used."""
        literals = [self._shared(self.value_literal(v), "item") for v in values]
        rule_names: dict[int, str] = {}

        def state(used: int) -> Node:
            if used in rule_names:
                return Ref(rule_names[used])
            rule = self._name("unique")
            rule_names[used] = rule
            count = bin(used).count("1")
            options: list[Node] = [EMPTY] if count >= lo else []
            if hi is None or count < hi:
                for i, item in enumerate(literals):
                    if not used & (1 << i):
                        options.append(seq(self._sep() if used else EMPTY, item, state(used | (1 << i))))
            self.rules[rule] = alt(*options) if options else NOTHING
            return Ref(rule)

        return seq("[", self.ws, state(0), self.ws, "]")

    def _rest_elements(self, element: Node, emitted: int, lo: int, hi: int | None) -> Node:
        low = max(0, lo - emitted)
        high = None if hi is None else hi - emitted
        if high is not None and high < low:
            return NOTHING
        if element == NOTHING or high == 0:
            return EMPTY if low == 0 else NOTHING
        if emitted:
            return repeat(seq(self._sep(), element), low, high)
        first = seq(element, repeat(seq(self._sep(), element), max(low - 1, 0), None if high is None else high - 1))
        return alt(EMPTY, first) if low == 0 else first

    def _array_with_contains(self, flat: Flat, element: Node) -> Node:
        if flat.also_contains:
            return self._array_containing_all(flat, element)
        if flat.prefix or flat.max_contains is not None or flat.max_items is not None or flat.min_items > flat.min_contains:
            return self._array_counting_contains(flat, element)
        matching = self.translate_sub(and_subs(flat.items, flat.contains))
        some_then_match = seq(star(seq(element, self._sep())), matching)
        body = seq(
            some_then_match,
            repeat(seq(self._sep(), some_then_match), flat.min_contains - 1, flat.min_contains - 1),
            star(seq(self._sep(), element)),
        )
        return seq("[", self.ws, body, self.ws, "]")

    def _array_counting_contains(self, flat: Flat, rest: Node) -> Node:
        """An array whose items matching ``contains`` are counted, ``minContains`` to
        ``maxContains`` of them, among ``minItems`` to ``maxItems`` items that start with
        ``prefixItems``: one state per position told apart and count. Without a maximum an
        item matching may go uncounted (the count is a lower bound that need only reach the
        minimum); with one, an item not counted must fail ``contains`` (its negation)."""
        prefix, low, high = flat.prefix, flat.min_items, flat.max_items
        least, most = flat.min_contains, flat.max_contains
        # Positions are told apart up to the prefix's end and the bounds on the item count.
        top = max(len(prefix), low, 1) if high is None else high
        counts = least + 1 if most is None else most + 1
        failing = None if most is None else self._negated(flat.contains)
        problem = None
        if most is not None and failing is None:
            problem = "maxContains with a contains whose parts resolve in different documents"
        elif (top + 1) * counts > MAX_COUNTED_CONTAINS_STATES:
            problem = f"contains counted over more than {MAX_COUNTED_CONTAINS_STATES} positions and counts"
        if problem is not None:
            self.unsupported("contains", flat.pointer, problem)
            return self._array(_without_contains(flat))
        forms_at: dict[int, list[tuple[int, Node]]] = {}

        def forms(position: int) -> list[tuple[int, Node]]:
            """(1 if it counts, the item) for each way to write the item at ``position``."""
            key = min(position, len(prefix))
            if key not in forms_at:
                schema = prefix[key] if key < len(prefix) else flat.items
                if key == len(prefix) and rest == NOTHING:
                    forms_at[key] = []
                else:
                    plain = rest if key == len(prefix) else self.translate_sub(schema)
                    other = plain if failing is None else self.translate_sub(and_subs(schema, failing))
                    forms_at[key] = [(1, self.translate_sub(and_subs(schema, flat.contains))), (0, other)]
            return forms_at[key]

        memo: dict[tuple[int, int], Node] = {}

        def state(position: int, count: int) -> Node:
            key = (position, count)
            if key in memo:
                return memo[key]
            options: list[Node] = []
            if position >= low and count >= least:
                options.append(EMPTY)
            loops: list[Node] = []
            if high is None or position < high:
                following = min(position + 1, top)
                for counted, item in forms(position):
                    after = count + counted if most is not None else min(count + counted, least)
                    if most is not None and after > most:
                        continue
                    if (following, after) == (position, count):
                        loops.append(item)
                    else:
                        options.append(seq(self._sep() if position else EMPTY, item, state(following, after)))
            node = alt(*options) if options else NOTHING
            if loops:
                node = seq(star(seq(self._sep(), alt(*loops))), node)
            memo[key] = node
            return node

        return seq("[", self.ws, state(0, 0), self.ws, "]")

    def _negated(self, sub: Sub) -> Sub | None:
        """The values ``sub`` refuses, as a conjunction; None when its parts resolve their
        references in different documents (one negated schema has one base)."""
        found = as_schemas([sub])
        if found is None:
            return None
        (member,), base = found
        return Sub((Part.of(negation_of(member, self.resolver), base, f"{sub.pointer}/not"),))

    def _array_containing_all(self, flat: Flat, element: Node) -> Node:
        """An array with an item matching each of its ``contains`` (every one of them with
        ``minContains`` 1 and no ``maxContains``): each way to write an item is credited with
        the ones it matches."""
        # A minContains of 0 (with no maximum) asks for nothing.
        conditions = ([flat.contains] if flat.min_contains else []) + flat.also_contains
        if flat.prefix or flat.max_contains is not None or flat.min_contains > 1 or len(conditions) > MAX_WANTED_MEMBERS:
            self.unsupported("contains", flat.pointer, f"several contains with prefixItems, maxContains, minContains above 1 or more than {MAX_WANTED_MEMBERS} of them")
            return self._array(_without_contains(flat))
        forms = {0: element}
        for bits, chosen in _nonempty_subsets(range(len(conditions))):
            matching = _conjunction(flat.items, (conditions[i] for i in chosen))
            forms[bits] = self._shared(self.translate_sub(matching), "item")
        everything = (1 << len(conditions)) - 1
        ways = Wants({}, {}, element, forms, everything)
        high = flat.max_items
        if high is not None and high > MAX_COUNTED_WANTED_EXTRAS:
            self.unsupported("contains", flat.pointer, f"several contains among more than {MAX_COUNTED_WANTED_EXTRAS} counted items")
            return self._array(_without_contains(flat))
        body = self._sequence_meeting(ways.extra_moves, everything, False, flat.min_items, high)
        return seq("[", self.ws, body, self.ws, "]")

    # -- objects --------------------------------------------------------------------------------
    def _object(self, flat: Flat) -> Node:
        wanted = flat.some_member
        if len(wanted) > MAX_WANTED_MEMBERS:
            self.unsupported("not", flat.pointer, f"more than {MAX_WANTED_MEMBERS} kinds of member wanted on one object")
            wanted = []
        listed = list(flat.props) + [name for name in flat.required if name not in flat.props]
        # The keys a wanted member must avoid are listed, so that the additional keys are
        # exactly the others (none of them written as an additional key).
        for condition in wanted:
            listed += sorted(name for name in condition.outside or () if name not in listed)
        required = set(flat.required)
        names_ok = self._property_name_check(flat)
        members: dict[str, Node] = {}
        forms: dict[str, dict[int, Node]] = {}
        for name in listed:
            value_schema = flat_value_schema(flat, name)
            if not names_ok(name) or (value_schema is not None and value_schema.is_false()):
                if name in required:
                    return NOTHING
                continue
            members[name] = self._shared(self._named_member(name, value_schema), "member")
            forms[name] = self._member_forms(wanted, name, value_schema, members[name])
        extra = self._shared(self._extra_member(flat, listed), "extra")
        extra_forms = self._extra_forms(flat, listed, wanted, extra)
        lo, hi = flat.min_props, flat.max_props
        if hi is not None and hi < lo:
            return NOTHING
        wants = Wants(members, forms, extra, extra_forms, (1 << len(wanted)) - 1)
        if self.property_order == "any":
            body = self._any_order_members(flat, wants, required, lo, hi)
        else:
            body = self._ordered_members(wants, required, lo, hi, flat.pointer)
        return seq("{", self.ws, body, self.ws, "}")

    def _named_member(self, name: str, value_schema) -> Node:
        value = self.translate_sub(value_schema) if value_schema is not None else self.json_value()
        return seq('"', encode_text(name), '"', self._colon(), value)

    def _member_forms(self, wanted: list[SomeMember], name: str, value_schema, member: Node) -> dict[int, Node]:
        """The ways to write member ``name``, by the wanted members each one is (a bit per
        ``wanted`` condition): the plain member is every one its key makes it whatever its
        value; a value meeting more conditions makes it more."""
        passing = [i for i, condition in enumerate(wanted) if self._key_meets(condition, name)]
        always = sum(1 << i for i in passing if wanted[i].value is None)
        found = {always: member}
        for bits, chosen in _nonempty_subsets([i for i in passing if wanted[i].value is not None]):
            value = _conjunction(value_schema, (wanted[i].value for i in chosen))
            found[always | bits] = self._shared(self._named_member(name, value), "member")
        return found

    def _extra_forms(self, flat: Flat, listed: list[str], wanted: list[SomeMember], extra: Node) -> dict[int, Node]:
        """The ways to write an additional member, by the wanted members each one is (as
        ``_member_forms``): every additional key is outside the listed ones, so a condition
        on nothing more is met by any of them."""
        always = sum(1 << i for i, c in enumerate(wanted) if c.names is None and c.value is None)
        found = {always: extra}
        narrowing = [i for i, c in enumerate(wanted) if c.names is not None or c.value is not None]
        for bits, chosen in _nonempty_subsets(narrowing):
            names = _conjunction(flat.property_names, (wanted[i].names for i in chosen))
            value = _conjunction(None, (wanted[i].value for i in chosen))
            patterns, additional = flat.patterns, flat.additional
            if value is not None:
                patterns = {pattern: and_subs(sub, value) for pattern, sub in patterns.items()}
                additional = and_subs(additional, value) if additional is not None else value
            narrowed = dataclasses.replace(flat, property_names=names, additional=additional, patterns=patterns)
            found[always | bits] = self._shared(self._extra_member(narrowed, listed), "extra")
        return found

    def _property_name_check(self, flat: Flat):
        if flat.property_names is None:
            return lambda name: True
        return lambda name: self._valid_for(name, flat.property_names)

    def _key_language(self, flat: Flat, listed: list[str], pattern: str | None) -> Node:
        parts: list[Node] = [strings_other_than(listed)] if listed else []
        if pattern is not None:
            node = self._pattern(pattern, f"{flat.pointer}/patternProperties/{_escape(pattern)}")
            if node is None:
                return NOTHING
            parts.append(node)
        if flat.property_names is not None:
            bodies = []
            for names_flat in self.normalizer.flatten_sub_through_refs(flat.property_names):
                types = names_flat.types if names_flat.types is not None else TYPE_ATOMS
                if names_flat.enum is not None:
                    bodies.extend(encode_text(v) for v in names_flat.enum if isinstance(v, str) and self._valid(v, names_flat.sources))
                elif "string" in types:
                    bodies.append(self.string_body(names_flat))
            parts.append(alt(*bodies) if bodies else NOTHING)
        if not parts:
            return ANY_STRING_BODY
        return parts[0] if len(parts) == 1 else Intersect(tuple(parts))

    def _extra_member(self, flat: Flat, listed: list[str]) -> Node:
        """One property not listed in ``properties`` (NOTHING if none may appear)."""
        additional = flat.additional
        if flat.patterns and not (all(sub.is_true() for sub in flat.patterns.values()) and (additional is None or additional.is_true())):
            subs = list(flat.patterns.values())
            if additional is not None and additional.is_false() and all(sub == subs[0] for sub in subs):
                keys = alt(*(self._key_language(flat, listed, p) for p in flat.patterns))
                return self._member(keys, self.translate_sub(subs[0]))
            return self._pattern_classes(flat, listed)
        if additional is not None and additional.is_false():
            return NOTHING
        value = self.translate_sub(additional) if additional is not None else self.json_value()
        if value == NOTHING:
            return NOTHING
        return self._member(self._key_language(flat, listed, None), value)

    def _pattern_classes(self, flat: Flat, listed: list[str]) -> Node:
        """Unlisted keys grouped by the set of patterns they match; each group takes the
        conjunction of those patterns' schemas, keys matching none take additionalProperties.

        The groups are read off the product of the pattern automata (over json.dumps
        spellings, so a key's spelling decides its decoded text) and written as right-linear
        rules: exploring the product finds which of the groups (one per set of patterns)
        any key falls in, and gives each one's language with it.
        """
        patterns = list(flat.patterns)
        # what lenient mode falls back to: unlisted keys with any value
        relaxed = self._member(self._key_language(Flat(pointer=flat.pointer), listed, None), self.json_value())
        if len(patterns) > PATTERN_CLASSES_MAX_PATTERNS:
            self.unsupported("patternProperties", flat.pointer, f"more than {PATTERN_CLASSES_MAX_PATTERNS} patterns next to other keys")
            return relaxed
        # The negations of a oneOf's branches repeat an object's keys many times over; its
        # key classes (a product of automata explored byte by byte) are found once.
        # (A propertyNames subschema is kept in the key with its schemas, so that their
        # identities, which it compares, stay theirs.)
        memo_key = (tuple(patterns), tuple(sorted(listed)), flat.property_names)
        classes = self._key_classes.get(memo_key)
        if classes is None:
            classes = self._explore_key_classes(flat, patterns, listed)
            if classes is None:
                return relaxed
            self._key_classes[memo_key] = classes
        members = []
        for group, keys in classes:
            if group:
                value_schema = None
                for i in sorted(group):
                    value_schema = and_subs(value_schema, flat.patterns[patterns[i]])
                value = self.translate_sub(value_schema)
            elif flat.additional is not None and flat.additional.is_false():
                continue
            else:
                value = self.translate_sub(flat.additional) if flat.additional is not None else self.json_value()
            members.append(self._member(keys, value))
        return alt(*members) if members else NOTHING

    def _explore_key_classes(self, flat: Flat, patterns: list[str], listed: list[str]) -> list[tuple[frozenset, Node]] | None:
        """(the set of patterns, the keys matching exactly those) for every set some unlisted
        key matches (see ``_pattern_classes``), by increasing set; None where a pattern or the
        key automaton cannot be built (lenient mode relaxes then)."""
        from surecall.engine.automaton import DEAD

        count = len(patterns)
        languages = []
        for pattern in patterns:
            node = self._pattern(pattern, f"{flat.pointer}/patternProperties/{_escape(pattern)}")
            if node is None:
                return None
            languages.append(node)
        if listed:
            languages.append(alt(*(encode_text(name) for name in listed)))
        if flat.property_names is not None:
            languages.append(self._key_language(Flat(property_names=flat.property_names, pointer=flat.pointer), [], None))
        automata = []
        for language in languages:
            try:
                automata.append(Grammar({"start": language}).automaton if language != NOTHING else None)
            except EmptyLanguageError:
                # A pattern no key matches, or key conditions no key meets at once (the
                # conjunction of several members a negation wants): read as never matching.
                automata.append(None)
            except GrammarError as error:
                self.unsupported("patternProperties", flat.pointer, f"cannot build the key automaton: {error}")
                return None
        if flat.property_names is not None and automata[-1] is None:
            return []  # no key meets propertyNames
        universe = Grammar({"start": star(COUNTED_STRING_CHAR)}).automaton
        listed_index = count if listed else None
        names_index = len(languages) - 1 if flat.property_names is not None else None

        # explore the product once; record transitions and which patterns accept where
        start = (tuple(DEAD if a is None else a.initial for a in automata), universe.initial)
        transitions: dict = {}
        accepting: dict = {}
        pending, seen = [start], {start}
        while pending:
            state = pending.pop()
            inner, outer = state
            by_target: dict = {}
            for byte in universe.next_bytes(outer):
                target = (tuple(a.step(c, byte) if c != DEAD else DEAD for a, c in zip(automata, inner)), universe.step(outer, byte))
                by_target.setdefault(target, []).append(byte)
                if target not in seen:
                    if len(seen) >= COMPLEMENT_MAX_STATES:
                        self.fatal("patternProperties", flat.pointer, "the key automaton for patternProperties is too large")
                    seen.add(target)
                    pending.append(target)
            transitions[state] = by_target
            if universe.is_accepting(outer):
                matched = frozenset(i for i, (a, c) in enumerate(zip(automata, inner)) if c != DEAD and a.is_accepting(c))
                if (listed_index is None or listed_index not in matched) and (names_index is None or names_index in matched):
                    accepting[state] = frozenset(i for i in matched if i < count)

        return [
            (group, self._class_rules(group, start, transitions, accepting))
            for group in sorted(set(accepting.values()), key=sorted)
        ]

    def _class_rules(self, group: frozenset, start, transitions: dict, accepting: dict) -> Node:
        names: dict = {}
        useful = _co_reachable({state for state, g in accepting.items() if g == group}, transitions)
        if start not in useful:
            return NOTHING
        for state in useful:
            names[state] = self._name("keys")
        for state in useful:
            options: list[Node] = [EMPTY] if accepting.get(state) == group else []
            for target, byte_list in transitions[state].items():
                if target in useful:
                    options.append(seq(byte_set(byte_list), Ref(names[target])))
            self.rules[names[state]] = alt(*options) if options else NOTHING
        return Ref(names[start])

    def _member(self, keys: Node, value: Node) -> Node:
        if keys == NOTHING or value == NOTHING:
            return NOTHING
        return seq('"', keys, '"', self._colon(), value)

    def _ordered_members(self, wants: "Wants", required: set, lo: int, hi: int | None, pointer: str) -> Node:
        """Listed properties in schema order, then the additional ones (with every wanted
        member among them, see ``Wants``)."""
        members = wants.members
        names = list(members)
        cap = max(1, lo, hi or 0)
        # Named states let the automaton builder share the common tails instead of copying them.
        use_rules = cap > 1 or len(names) > 4 or wants.all_met != 0
        memo: dict[tuple[int, int, int], Node] = {}

        def state(i: int, count: int, met: int) -> Node:
            key = (i, count, met)
            if key in memo:
                return memo[key]
            if i == len(names):
                node = self._extras_meeting(wants, wants.all_met & ~met, count, lo, hi, pointer)
            else:
                name = names[i]
                sep = self._sep() if count else EMPTY
                can_emit = hi is None or count < hi
                next_count = min(count + 1, cap)
                by_target = wants.member_moves(name, met)
                if next_count == count and list(by_target) == [met]:
                    member = seq(sep, by_target[met])
                    node = seq(member if name in required else optional(member), state(i + 1, count, met)) if can_emit else (
                        NOTHING if name in required else state(i + 1, count, met)
                    )
                else:
                    options = []
                    if name not in required:
                        options.append(state(i + 1, count, met))
                    if can_emit:
                        for target, written in by_target.items():
                            options.append(seq(sep, written, state(i + 1, next_count, target)))
                    node = alt(*options) if options else NOTHING
            if use_rules and node not in (NOTHING, EMPTY):
                rule = self._name("props")
                self.rules[rule] = node
                node = Ref(rule)
            memo[key] = node
            return node

        return state(0, 0, 0)

    def _extras_tail(self, extra: Node, count: int, lo: int, hi: int | None, at_least: int = 0) -> Node:
        low = max(0, lo - count, at_least)
        high = None if hi is None else hi - count
        if high is not None and high < low:
            return NOTHING
        if extra == NOTHING or high == 0:
            return EMPTY if low == 0 else NOTHING
        if count:
            return repeat(seq(self._sep(), extra), low, high)
        first = seq(extra, repeat(seq(self._sep(), extra), max(low - 1, 0), None if high is None else high - 1))
        return alt(EMPTY, first) if low == 0 else first

    def _extras_meeting(self, wants: "Wants", needed: int, count: int, lo: int, hi: int | None, pointer: str) -> Node:
        """``_extras_tail`` with the wanted members in ``needed`` (bits) among the additional ones."""
        extra = wants.extra
        if needed & ~wants.extra_always == 0:
            return self._extras_tail(extra, count, lo, hi, at_least=1 if needed else 0)
        low = max(0, lo - count)
        high = None if hi is None else hi - count
        if high is not None and high > MAX_COUNTED_WANTED_EXTRAS:
            self.unsupported("not", pointer, f"a wanted member among more than {MAX_COUNTED_WANTED_EXTRAS} counted additional members")
            return self._extras_tail(extra, count, lo, hi)  # lenient: the conditions are dropped
        return self._sequence_meeting(wants.extra_moves, needed, count > 0, low, high)

    def _sequence_meeting(self, moves, needed: int, after_separator: bool, low: int, high: int | None) -> Node:
        """Separated elements, ``low`` to ``high`` of them, among which the ones that meet
        every condition in ``needed`` (bits): ``moves(need)`` gives the elements by the
        conditions still needed after one of them."""
        # Elements written so far are counted up to what matters: ``low`` (at least one, so
        # that the ones after the first all follow a separator), or every one up to ``high``.
        top = max(low, 1) if high is None else high
        memo: dict[tuple[int, int], Node] = {}

        def element(node: Node, placed: int) -> Node:
            return node if placed == 0 and not after_separator else seq(self._sep(), node)

        def state(need: int, placed: int) -> Node:
            key = (need, placed)
            if key in memo:
                return memo[key]
            options: list[Node] = []
            if need == 0 and placed >= low:
                options.append(EMPTY)
            loops: list[Node] = []
            if high is None or placed < high:
                following = min(placed + 1, top)
                for target, written in moves(need).items():
                    if target == need and following == placed:
                        loops.append(written)
                    else:
                        options.append(seq(element(written, placed), state(target, following)))
            node = alt(*options) if options else NOTHING
            if loops:
                node = seq(star(element(alt(*loops), placed)), node)
            memo[key] = node
            return node

        return state(needed, 0)

    def _any_order_members(self, flat: Flat, wants: "Wants", required: set, lo: int, hi: int | None) -> Node:
        """Listed properties in any order.

        The grammar tracks which required properties were written (a set of at most
        ANY_ORDER_MAX_PROPERTIES names); optional ones may appear anywhere. A key written
        twice is read last-wins by JSON parsers and every occurrence matches its schema,
        so this stays sound; with ``minProperties`` every property is tracked instead, so
        that a repeated key cannot make up the count.
        """
        members = wants.members
        names = list(members)
        if any(name not in members for name in required):
            return NOTHING
        tracked = names if lo > 0 else [n for n in names if n in required]
        if len(tracked) > ANY_ORDER_MAX_PROPERTIES:
            self.fatal(
                "properties", flat.pointer,
                f"property_order='any' tracks at most {ANY_ORDER_MAX_PROPERTIES} properties per object",
            )
        self.most_tracked = max(self.most_tracked, len(tracked))
        if len(tracked) > ANY_ORDER_SMALL_TRACKING:
            self.tracked_sets += 2 ** len(tracked)
        if self.tracked_sets > ANY_ORDER_MAX_TRACKED_SETS:
            # Each set is a grammar rule: past this many, building them takes seconds and
            # the grammar nears its size limit. Small objects (most) do not count.
            self.fatal(
                "properties", flat.pointer,
                f"property_order='any' tracks at most {ANY_ORDER_MAX_TRACKED_SETS} sets of written properties "
                f"over the objects of a schema tracking more than {ANY_ORDER_SMALL_TRACKING} (2^n for an object tracking n)",
            )
        untracked = [n for n in names if n not in tracked]
        # Free members (untracked and additional ones) by the wanted members each way of
        # writing one is: one shared rule per set of ways, made as states ask for them.
        free_rules: dict[tuple, Node] = {}

        def free_moves(met: int) -> dict[int, Node]:
            ways: dict[int, list[tuple]] = {}
            for name in untracked:
                for target, choice in wants.member_choices(name, met):
                    ways.setdefault(target, []).append(choice)
            for target, choice in wants.extra_choices(met):
                ways.setdefault(target, []).append(choice)
            found = {}
            for target, choices in ways.items():
                key = tuple(choices)
                if key not in free_rules:
                    free_rules[key] = self._shared(alt(*(wants.node_of(choice) for choice in choices)), "free")
                if free_rules[key] != NOTHING:
                    found[target] = free_rules[key]
            return found

        cap = max(1, lo, hi or 0)
        required_bits = sum(1 << i for i, name in enumerate(tracked) if name in required)
        all_tracked = (1 << len(tracked)) - 1
        rule_names: dict[tuple[int, int, int], str] = {}

        def state(seen: int, count: int, met: int) -> Node:
            key = (seen, count, met)
            if key in rule_names:
                return Ref(rule_names[key])
            rule = self._name("anyorder")
            rule_names[key] = rule
            self.rules[rule] = NOTHING
            options: list[Node] = []
            # Once every tracked property is written, members after which the state is the
            # same again (untracked ones, once the count is capped) repeat in place: written
            # as the rule calling itself, every member would nest one more call, and no two
            # key positions would share a parse state (nor the masks cached by it). Earlier
            # states keep calling themselves: recursive, they are compiled once each, where
            # a loop would let every path through the tracked properties inline them again.
            repeating: list[Node] = []
            if seen & required_bits == required_bits and count >= lo and met == wants.all_met:
                options.append(EMPTY)
            sep = self._sep() if count else EMPTY
            if hi is None or count < hi:
                next_count = min(count + 1, cap)
                for i, name in enumerate(tracked):
                    if not seen & (1 << i):
                        for target, written in wants.member_moves(name, met).items():
                            options.append(seq(sep, written, state(seen | (1 << i), next_count, target)))
                for target, free in free_moves(met).items():
                    after = (seen, next_count, target)
                    if after == key and seen == all_tracked:
                        repeating.append(free)
                    else:
                        options.append(seq(sep, free, state(*after)))
            body = alt(*options) if options else NOTHING
            if repeating:
                body = seq(star(seq(sep, alt(*repeating))), body)
            self.rules[rule] = body
            return Ref(rule)

        return state(0, 0, 0)


@dataclass
class Wants:
    """An object's members and the ways to write each one, by the wanted members (from
    negations, one bit per condition) each way is; ``all_met`` is every bit (0: none wanted)."""

    members: dict
    forms: dict
    extra: Node
    extra_forms: dict
    all_met: int

    @property
    def extra_always(self) -> int:
        return next(iter(self.extra_forms))  # the plain way comes first

    def member_choices(self, name: str, met: int) -> list[tuple[int, tuple]]:
        """(wanted bits met after, a handle on the way) of each way to write ``name`` that
        adds something the plain member does not."""
        return _useful_ways(self.forms[name], met, name)

    def extra_choices(self, met: int) -> list[tuple[int, tuple]]:
        return _useful_ways(self.extra_forms, met, None)

    def node_of(self, choice: tuple) -> Node:
        name, bits = choice
        return (self.extra_forms if name is None else self.forms[name])[bits]

    def member_moves(self, name: str, met: int) -> dict[int, Node]:
        """The ways to write ``name`` from ``met``, one alternative per wanted bits met after."""
        return _moves(self, self.member_choices(name, met))

    def extra_moves(self, need: int) -> dict[int, Node]:
        """The ways to write an additional member, by the wanted bits still needed after (of ``need``)."""
        full = self.all_met
        return {full & ~target: node for target, node in _moves(self, self.extra_choices(full & ~need)).items()}


def _nonempty_subsets(indices):
    """(bit mask, indices) of each non-empty subset of ``indices``, smallest first."""
    indices = list(indices)
    for size in range(1, len(indices) + 1):
        for chosen in itertools.combinations(indices, size):
            yield sum(1 << i for i in chosen), chosen


def _conjunction(start: Sub | None, subs) -> Sub | None:
    for sub in subs:
        start = and_subs(start, sub)
    return start


def _useful_ways(forms: dict[int, Node], met: int, name) -> list[tuple[int, tuple]]:
    """The plain way (first in ``forms``) and the others that meet more than it from ``met``
    (a narrower way meeting nothing more only repeats some of its strings)."""
    plain = next(iter(forms))
    ways = [(met | plain, (name, plain))]
    for bits in forms:
        if bits != plain and met | bits != met | plain:
            ways.append((met | bits, (name, bits)))
    return ways


def _moves(wants: Wants, choices: list[tuple[int, tuple]]) -> dict[int, Node]:
    """The ways ``choices`` name, one alternative per target (none for a way nothing spells)."""
    by_target: dict[int, list[Node]] = {}
    for target, choice in choices:
        node = wants.node_of(choice)
        if node != NOTHING:
            by_target.setdefault(target, []).append(node)
    return {target: nodes[0] if len(nodes) == 1 else alt(*nodes) for target, nodes in by_target.items()}


def _co_reachable(targets: set, transitions: dict) -> set:
    """States from which some state in ``targets`` can be reached."""
    reverse: dict = {}
    for state, by_target in transitions.items():
        for target in by_target:
            reverse.setdefault(target, set()).add(state)
    found, pending = set(targets), list(targets)
    while pending:
        for previous in reverse.get(pending.pop(), ()):
            if previous not in found:
                found.add(previous)
                pending.append(previous)
    return found


def _structured(flat: Flat) -> bool:
    types = flat.types if flat.types is not None else TYPE_ATOMS
    return flat.enum is None and flat.ref is None and bool(types & {"array", "object"})


def _without_contains(flat: Flat) -> Flat:
    return dataclasses.replace(flat, contains=None, also_contains=[])


def _outside_classes(pattern: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, groups open around it) of each character of a regex outside its
    character classes and escapes; a parenthesis counts at its group's outer depth."""
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        else:
            depth -= char == ")"
            yield i, char, depth
            depth += char == "("
        i += 1


def _top_level_alternatives(pattern: str) -> list[str]:
    """Split a regex at its top-level ``|`` (outside groups and classes)."""
    cuts = [i for i, char, depth in _outside_classes(pattern) if char == "|" and depth == 0]
    return [pattern[start + 1 : end] for start, end in zip([-1, *cuts], [*cuts, len(pattern)])]


@lru_cache(maxsize=1024)
def _pattern_texts(pattern: str) -> Node:
    """The decoded texts a JSON Schema ``pattern`` matches (a search, so unanchored ends
    take anything), as a regular node over characters (memoised: a pattern under a union
    is in every alternative, and under a length limit it is tried inside the bound first)."""
    branches = []
    for branch in _top_level_alternatives(pattern):
        body, anchored_start, anchored_end = _strip_anchors(branch)
        branches.append(seq(
            EMPTY if anchored_start else star(ANY_DECODED_CHAR),
            _text_from_here(body, anchored_start, anchored_end),
        ))
    return alt(*branches)


def _text_from_here(body: str, at_start: bool, anchored_end: bool) -> Node:
    """The decoded texts that the pattern sequence ``body`` and what may follow it match
    (nothing when ``anchored_end``, else anything); ``at_start``: ``body`` begins the text.

    A lookahead in the sequence itself (``^(?!tmp_)\\w+$``, ``(?=.{1,255}$)...``) asks
    of everything after its position that it starts with a match of the lookahead's
    pattern (or, negated, does not): that rest is intersected with the lookahead's
    pattern followed by anything, or with its complement; a lookahead's own pattern may
    hold one the same way, and so may a group matched once, spread into its alternatives.
    A lookahead inside a quantified group is still refused by the regex parser."""
    from surecall.engine.regex import regex_to_ir

    tail = EMPTY if anchored_end else star(ANY_DECODED_CHAR)
    found = _top_level_lookahead(body)
    if found is None:
        grouped = _group_holding_a_lookahead(body)
        if grouped is not None:
            # A group matched once is its alternatives each in its place, which brings a
            # lookahead inside it into the sequence: ``(a|b(?!x)c)d`` is ``ad|b(?!x)cd``.
            before, content, after = grouped
            return alt(*(_text_from_here(before + branch + after, at_start, anchored_end)
                         for branch in _top_level_alternatives(content)))
        return seq(regex_to_ir(body) if body else EMPTY, tail)
    before, negative, inner, after = found
    here_is_start = at_start and not before
    if after.startswith("^"):
        # Repeated after a lookahead at the start (``^(?!x)^y``), it asserts nothing more.
        if not here_is_start:
            raise GrammarError(f"'^' after a lookahead that is not at the start of the text ({body!r})")
        after = after[1:]
    if _strip_anchors(before)[2]:
        raise GrammarError(f"'$' before a lookahead ({body!r})")
    rest = _text_from_here(after, here_is_start, anchored_end)
    looked = []
    for branch in _top_level_alternatives(inner):
        branch, anchored, exact = _strip_anchors(branch)
        if anchored and not here_is_start:
            raise GrammarError(f"'^' inside a lookahead that is not at the start of the text ({inner!r})")
        looked.append(_text_from_here(branch, here_is_start, exact))
    ahead = alt(*looked)
    checked = Intersect((rest, Complement(ahead) if negative else ahead))
    return seq(regex_to_ir(before) if before else EMPTY, checked)


def _top_level_groups(body: str) -> list[tuple[int, int]]:
    """Where each group outside groups and classes of ``body`` opens and closes."""
    groups, opened = [], 0
    for i, char, depth in _outside_classes(body):
        if depth == 0 and char == "(":
            opened = i
        elif depth == 0 and char == ")":
            groups.append((opened, i))
    return groups


def _top_level_lookahead(body: str) -> tuple[str, bool, str, str] | None:
    """The first ``(?=...)`` or ``(?!...)`` outside groups and classes of ``body``: (the
    text before it, whether it is negative, its pattern, the text after it); None if none."""
    for opened, closed in _top_level_groups(body):
        if body[opened + 1 : opened + 3] in ("?=", "?!"):
            return body[:opened], body[opened + 2] == "!", body[opened + 3 : closed], body[closed + 1 :]
    return None


def _group_holding_a_lookahead(body: str) -> tuple[str, str, str] | None:
    """The first plain group outside groups and classes of ``body``, repeated by no
    quantifier, with a lookahead somewhere inside: (the text before it, its pattern, the
    text after it); None if none."""
    for opened, closed in _top_level_groups(body):
        content = body[opened + 1 : closed]
        if content.startswith("?:"):
            content = content[2:]
        elif content.startswith("?"):
            continue  # lookbehind or named: left to the regex parser
        if ("(?=" in content or "(?!" in content) and body[closed + 1 : closed + 2] not in ("*", "+", "?", "{"):
            return body[:opened], content, body[closed + 1 :]
    return None


def _strip_anchors(branch: str) -> tuple[str, bool, bool]:
    anchored_start = branch.startswith("^")
    if anchored_start:
        branch = branch[1:]
    anchored_end = False
    if branch.endswith("$"):
        backslashes = len(branch) - 1 - len(branch[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            anchored_end = True
            branch = branch[:-1]
    return branch, anchored_start, anchored_end


@lru_cache(maxsize=None)
def _format_language(name: str) -> Node:
    """The JSON string bodies of a supported format (one per format name: IR nodes are
    immutable, so every schema shares it)."""
    from surecall.engine.regex import regex_to_ir

    node = encode_regular(regex_to_ir(FORMAT_PATTERNS[name]))
    if name in FORMAT_MAX_LENGTH:
        node = Intersect((node, repeat(ANY_STRING_CHAR, 0, FORMAT_MAX_LENGTH[name])))
    return node


def _prune_unproductive(rules: dict[str, Node]) -> dict[str, Node]:
    """Drop rules that derive no finite string and every reference to them."""
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            if name not in productive and _derives(node, productive):
                productive.add(name)
                changed = True
    if len(productive) == len(rules):
        return rules
    memo: dict = {}
    return {name: _replace_refs(node, productive, memo) for name, node in rules.items() if name in productive}


def _derives(node: Node, productive: set[str]) -> bool:
    if isinstance(node, Ref):
        return node.name in productive
    if isinstance(node, Seq):
        return all(_derives(item, productive) for item in node.items)
    if isinstance(node, Alt):
        return any(_derives(item, productive) for item in node.items)
    if isinstance(node, Repeat):
        return node.min == 0 or _derives(node.item, productive)
    if isinstance(node, Intersect):
        return all(_derives(item, productive) for item in node.items)
    return True


def _replace_refs(node: Node, productive: set[str], memo: dict) -> Node:
    """``node`` with references to unproductive rules made NOTHING. Subtrees without any
    are returned as they are, and shared subtrees are visited once (``memo``, by identity:
    it holds the node too, so its id is not reused)."""
    found = memo.get(id(node))
    if found is not None:
        return found[1]
    replaced = node
    if isinstance(node, Ref):
        replaced = node if node.name in productive else NOTHING
    elif isinstance(node, (Seq, Alt, Intersect)):
        items = [_replace_refs(item, productive, memo) for item in node.items]
        if any(new is not old for new, old in zip(items, node.items)):
            if isinstance(node, Seq):
                replaced = seq(*items)
            elif isinstance(node, Alt):
                items = [item for item in items if item != NOTHING]
                replaced = alt(*items) if items else NOTHING
            else:
                replaced = Intersect(tuple(items))
    elif isinstance(node, Repeat):
        item = _replace_refs(node.item, productive, memo)
        if item == NOTHING:
            replaced = EMPTY
        elif item is not node.item:
            replaced = repeat(item, node.min, node.max)
    memo[id(node)] = (node, replaced)
    return replaced
