"""Schema normal form: every schema becomes a list of *flat* alternatives.

A flat alternative is a plain conjunction of per-type constraints (no ``allOf``, ``anyOf``,
``oneOf``, ``not``, ``if``, no ``$ref`` with siblings). ``allOf`` is a real merge of
constraints, ``anyOf`` a union of alternatives, ``not`` is pushed down to the keywords
(De Morgan), ``oneOf`` is kept exclusive by adding the negation of the other branches
unless the branches are disjoint (``_disjoint``: by types, values, or a property told
apart, looking through ``$ref``s), ``if/then/else`` becomes
``(if and then) or (not if and else)``. Subschemas (property values, items, ...) are
kept as :class:`Sub` conjunctions and normalised only when the translator reaches them,
which is what lets recursive schemas stay recursive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from .formats import FORMAT_PATTERNS
from .schema_numbers import NumberConstraintError, to_decimal

TYPE_ATOMS = frozenset({"null", "boolean", "integer", "nonint", "string", "array", "object"})
_TYPE_NAMES = {
    "null": {"null"},
    "boolean": {"boolean"},
    "integer": {"integer"},
    "number": {"integer", "nonint"},
    "string": {"string"},
    "array": {"array"},
    "object": {"object"},
}

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
        "writeOnly", "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$defs", "definitions",
        "$vocabulary", "contentMediaType", "contentEncoding", "contentSchema",
    }
)
UNSUPPORTED_KEYWORDS = frozenset({"$dynamicRef", "$recursiveRef"})
#: Keywords reading what the other schemas holding for the same value evaluate.
UNEVALUATED = frozenset({"unevaluatedProperties", "unevaluatedItems"})
MAX_ALTERNATIVES = 256
#: Most anyOf branches written as one alternative per set of them holding (under an UNEVALUATED keyword).
MAX_BRANCHES_BY_WHAT_HOLDS = 4
#: Most pairs of a product past MAX_ALTERNATIVES looked at one by one for ones no value meets.
MAX_PAIRS_TOLD_APART = 16 * MAX_ALTERNATIVES
MAX_REF_DEPTH = 40


@dataclass(frozen=True)
class Part:
    """One schema in its resolution context."""

    schema: Any = field(compare=False)
    base: str
    pointer: str
    ident: int = 0

    @staticmethod
    def of(schema: Any, base: str, pointer: str) -> "Part":
        return Part(schema, base, pointer, id(schema))


@dataclass(frozen=True)
class Sub:
    """A conjunction of schemas (a subschema position after merging)."""

    parts: tuple[Part, ...]

    def and_(self, other: "Sub | None") -> "Sub":
        if other is None:
            return self
        return Sub(self.parts + tuple(p for p in other.parts if p not in self.parts))

    @property
    def pointer(self) -> str:
        return self.parts[0].pointer

    def is_false(self) -> bool:
        return any(p.schema is False for p in self.parts)

    def is_true(self) -> bool:
        return all(p.schema is True or (isinstance(p.schema, dict) and not _constraint_keys(p.schema)) for p in self.parts)


@dataclass(frozen=True)
class SomeMember:
    """A member an object must have (what negating ``additionalProperties``,
    ``patternProperties`` or ``propertyNames`` asks for): its key is none of ``outside`` and
    meets ``names``, its value meets ``value`` (None: no condition)."""

    outside: frozenset | None
    names: Sub | None
    value: Sub | None


KEYWORDS = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
        "propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
        "dependencies", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains",
        "minContains", "maxContains", "uniqueItems", "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf", "anyOf",
        "oneOf", "not", "if", "then", "else", "$ref", "__types__", "__exclude__", "__some_member__",
        "__not_matching__", "unevaluatedProperties", "unevaluatedItems",
    }
) | UNSUPPORTED_KEYWORDS


def _constraint_keys(schema: dict) -> list[str]:
    """The keys of ``schema`` that constrain values (unknown keys are annotations to validators)."""
    return [key for key in schema if key in KEYWORDS]


def and_subs(a: Sub | None, b: Sub | None) -> Sub | None:
    if a is None:
        return b
    return a.and_(b)


@dataclass
class Flat:
    """A conjunction of per-type constraints; ``None`` means "no constraint"."""

    types: frozenset | None = None
    enum: list | None = None
    exclude: list = field(default_factory=list)
    ref: Part | None = None
    # objects
    props: dict = field(default_factory=dict)
    required: list = field(default_factory=list)
    additional: Sub | None = None
    patterns: dict = field(default_factory=dict)
    property_names: Sub | None = None
    # each entry (a SomeMember): the object must have such a member (from negations)
    some_member: list = field(default_factory=list)
    min_props: int = 0
    max_props: int | None = None
    # arrays
    prefix: list = field(default_factory=list)
    items: Sub | None = None
    min_items: int = 0
    max_items: int | None = None
    contains: Sub | None = None
    min_contains: int = 1
    max_contains: int | None = None
    unique: bool = False
    # further contains, each asking for one matching item (minContains 1, no maxContains)
    also_contains: list = field(default_factory=list)
    # strings
    min_length: int = 0
    max_length: int | None = None
    string_patterns: list = field(default_factory=list)
    formats: list = field(default_factory=list)
    # values matching none of these, from negations: ("pattern", regex) or ("format", name) for
    # strings, ("multipleOf", step) for numbers
    not_matching: list = field(default_factory=list)
    # numbers
    lower: tuple | None = None
    upper: tuple | None = None
    multiples: list = field(default_factory=list)
    # where the constraints came from (validated against when filtering enum values)
    sources: list = field(default_factory=list)
    pointer: str = ""
    # What unevaluatedProperties reads: the properties that schemas holding for the value
    # (not negated ones) evaluate, by name or pattern, or all of them (additionalProperties
    # or an inner unevaluatedProperties).
    evaluated: frozenset = frozenset()
    evaluated_patterns: frozenset = frozenset()
    evaluates_all: bool = False
    # And what unevaluatedItems reads: the items prefixItems evaluate, whether items (or
    # additionalItems, or an inner unevaluatedItems) evaluates all, and the contains
    # schemas (each evaluates the items it matches).
    evaluated_prefix: int = 0
    evaluates_all_items: bool = False
    evaluating_contains: tuple = ()
    # A $ref met inside a negation: what it refers to evaluates nothing either.
    annotations_dropped: bool = False


class Reporter(Protocol):
    """Raises or records what cannot be expressed (the translator supplies it)."""

    def unsupported(self, keyword: str, pointer: str, message: str) -> None:
        """Raise, or (lenient mode) record a relaxation and return so the caller relaxes."""

    def fatal(self, keyword: str, pointer: str, message: str) -> NoReturn:
        """Raise: no relaxation exists."""


class _ProbeFailed(Exception):
    """A look through a ``$ref`` met something it cannot flatten."""


class _Probe:
    """The reporter of a look through ``$ref``s: gives up instead of raising or recording."""

    def unsupported(self, keyword: str, pointer: str, message: str) -> NoReturn:
        raise _ProbeFailed(message)

    def fatal(self, keyword: str, pointer: str, message: str) -> NoReturn:
        raise _ProbeFailed(message)


#: How many ``$ref`` hops ``oneOf`` follows to tell its branches apart.
_REF_HOPS_COMPARED = 4


def _child(pointer: str, *keys: Any) -> str:
    for key in keys:
        pointer += "/" + str(key).replace("~", "~0").replace("/", "~1")
    return pointer


def _tighter(a: tuple | None, b: tuple | None, lower: bool) -> tuple | None:
    if a is None:
        return b
    if b is None:
        return a
    if a[0] != b[0]:
        return (max if lower else min)(a, b, key=lambda bound: bound[0])
    return (a[0], a[1] or b[1])


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class Normalizer:
    """Turns schemas into lists of :class:`Flat` alternatives."""

    def __init__(self, resolver, reporter: Reporter, legacy_ref_siblings: bool, conditionals: bool = True) -> None:
        self.resolver = resolver
        self.reporter = reporter
        self.legacy_ref_siblings = legacy_ref_siblings
        self.conditionals = conditionals
        # The $ref targets being expanded (see _flatten_target).
        self._open_targets: set[tuple[int, str]] = set()
        # Inside a schema with unevaluatedProperties or unevaluatedItems: each alternative must
        # know exactly which schemas hold, since those (and only those) evaluate properties and items.
        self._exact_annotations = 0

    # -- entry points -------------------------------------------------------------------
    def flatten_sub(self, sub: Sub, depth: int = 0) -> list[Flat]:
        alternatives = [Flat()]
        for part in sub.parts:
            alternatives = self._product(alternatives, self.flatten(part.schema, part.base, part.pointer, depth), part.pointer, depth)
        return alternatives

    def flatten(
        self, schema: Any, base: str, pointer: str, depth: int = 0, record: bool = True,
        assumed: frozenset = frozenset(),
    ) -> list[Flat]:
        """The alternatives ``schema`` is the union of. ``assumed``: properties the instance
        is known to have (the ``required`` of schemas applying to it around this one), which
        tell ``oneOf`` branches apart."""
        if depth > MAX_REF_DEPTH:
            self._refuse_ref_cycle(pointer)
        if schema is True:
            return [Flat(pointer=pointer)]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            self.reporter.fatal("schema", pointer, f"a schema must be an object or a boolean, got {type(schema).__name__}")
        base = self.resolver.base_of(schema, base)
        for keyword in UNSUPPORTED_KEYWORDS & schema.keys():
            self.reporter.unsupported(keyword, _child(pointer, keyword), f"{keyword} is not supported")
        here = assumed | _required_names(schema)
        if "$ref" in schema:
            target, target_base, target_pointer = self.resolver.resolve(schema["$ref"], base, _child(pointer, "$ref"))
            ref_flat = Flat(ref=Part.of(target, target_base, target_pointer), pointer=pointer)
            siblings = {
                k: v for k, v in schema.items()
                if k not in ("$ref", *UNEVALUATED) and k in KEYWORDS and k not in UNSUPPORTED_KEYWORDS
            }
            if self.legacy_ref_siblings or not (siblings or UNEVALUATED & schema.keys()):
                return [ref_flat]
            with self._annotations_exact(schema):
                inlined = self._flatten_target(target, target_base, target_pointer, depth + 1, here)
                rest = self.flatten(siblings, base, pointer, depth, record=False, assumed=here)
                alternatives = self._product(inlined, rest, pointer, depth)
            alternatives = self._unevaluated_closed(alternatives, schema, base, pointer, depth)
            return self._recorded(alternatives, schema, base) if record else alternatives

        with self._annotations_exact(schema):
            alternatives = self._applicators(schema, base, pointer, depth, here)
        alternatives = self._unevaluated_closed(alternatives, schema, base, pointer, depth)
        return self._recorded(alternatives, schema, base) if record else alternatives

    def _applicators(self, schema: dict, base: str, pointer: str, depth: int, here: frozenset) -> list[Flat]:
        """``flatten`` of a schema without ``$ref``, before its ``unevaluated*`` keywords."""
        alternatives = [self._keywords(schema, base, pointer)]
        for i, member in enumerate(schema.get("allOf", ())):
            alternatives = self._product(alternatives, self.flatten(member, base, _child(pointer, "allOf", i), depth, assumed=here), pointer, depth)
        if "anyOf" in schema:
            branches = [self.flatten(member, base, _child(pointer, "anyOf", i), depth, assumed=here)
                        for i, member in enumerate(schema["anyOf"])]
            if self._exact_annotations and len(branches) > 1 and any(map(_annotates, branches)):
                union = self._any_of_by_what_holds(schema["anyOf"], branches, base, _child(pointer, "anyOf"), depth)
            else:
                union = [flat for alternatives_of_branch in branches for flat in alternatives_of_branch]
            alternatives = self._product(alternatives, union, pointer, depth)
        if "oneOf" in schema:
            alternatives = self._product(alternatives, self._one_of(schema["oneOf"], base, _child(pointer, "oneOf"), depth, here), pointer, depth)
        if "not" in schema:
            negated = self._negation_or_relax(schema["not"], base, _child(pointer, "not"), "not", depth)
            if negated is not None:
                alternatives = self._product(alternatives, negated, pointer, depth)
        if self.conditionals and "if" in schema and ("then" in schema or "else" in schema):
            alternatives = self._product(alternatives, self._if_then_else(schema, base, pointer, depth), pointer, depth)
        elif self.conditionals and "if" in schema and self._exact_annotations:
            # Alone, if constrains nothing, but where it holds its annotations count.
            condition = self.flatten(schema["if"], base, _child(pointer, "if"), depth)
            if _annotates(condition):
                negated = self._negation_or_relax(schema["if"], base, _child(pointer, "if"), "if", depth)
                if negated is not None:
                    alternatives = self._product(alternatives, condition + negated, pointer, depth)
        dependent_required = dict(schema.get("dependentRequired", {}))
        dependent_schemas = dict(schema.get("dependentSchemas", {}))
        for key, value in schema.get("dependencies", {}).items():
            (dependent_required if isinstance(value, list) else dependent_schemas)[key] = value
        for key, names in dependent_required.items():
            branches = [Flat(props={key: Sub((Part.of(False, base, pointer),))}, pointer=pointer),
                        Flat(required=list(dict.fromkeys([key, *names])), pointer=pointer)]
            alternatives = self._product(alternatives, branches, pointer, depth)
        for key, dependent in dependent_schemas.items():
            present = self.flatten(dependent, base, _child(pointer, "dependentSchemas", key), depth)
            absent = [Flat(props={key: Sub((Part.of(False, base, pointer),))}, pointer=pointer)]
            present = self._product([Flat(required=[key], pointer=pointer)], present, pointer, depth)
            alternatives = self._product(alternatives, absent + present, pointer, depth)
        return alternatives

    # -- helpers ------------------------------------------------------------------------
    def _recorded(self, alternatives: list[Flat], schema: Any, base: str) -> list[Flat]:
        for flat in alternatives:
            flat.sources.append((schema, base))
        return alternatives

    def _product(self, left: list[Flat], right: list[Flat], pointer: str, depth: int) -> list[Flat]:
        # A side of one alternative does not multiply the other: a plain union of many
        # branches (hundreds of tools) grows with the schema, not past it.
        many = min(len(left), len(right)) > 1 and len(left) * len(right) > MAX_ALTERNATIVES
        if many and len(left) * len(right) > MAX_PAIRS_TOLD_APART:
            self.reporter.fatal("anyOf", pointer, f"the combinators expand to more than {MAX_ALTERNATIVES} alternatives")
        out = []
        for a in left:
            for b in right:
                # Past the limit, pairs no instance meets are left out before counting:
                # conditions on a tag (if type is A then ...) multiply into products most
                # of whose members contradict themselves.
                if many and _disjoint([a], [b]):
                    continue
                for merged in self._merge(a, b, pointer, depth):
                    if self._satisfiable(merged):
                        out.append(merged)
                if many and len(out) > MAX_ALTERNATIVES:
                    self.reporter.fatal("anyOf", pointer, f"the combinators expand to more than {MAX_ALTERNATIVES} alternatives")
        return out

    def _satisfiable(self, flat: Flat) -> bool:
        if flat.ref is not None:
            return True
        empty = _empty_kinds(flat)
        if empty:
            # Merging a branch with the negations of others (oneOf, not) leaves many
            # conjunctions whose objects or arrays cannot exist; typing them so drops the
            # alternatives that are empty as a whole before they multiply further.
            flat.types = (TYPE_ATOMS if flat.types is None else flat.types) - empty
        if flat.types is not None and not flat.types:
            return False
        return flat.enum is None or bool(flat.enum)

    def _merge(self, a: Flat, b: Flat, pointer: str, depth: int) -> list[Flat]:
        if a.ref is not None or b.ref is not None:
            if a.ref is not None and _is_empty(b):
                return [_copy_flat(a, b.sources)]
            if b.ref is not None and _is_empty(a):
                return [_copy_flat(b, a.sources)]
            expanded_a = self._expand_ref(a, depth)
            expanded_b = self._expand_ref(b, depth)
            return self._product(expanded_a, expanded_b, pointer, depth + 1)
        m = Flat(pointer=a.pointer or b.pointer)
        m.types = a.types if b.types is None else b.types if a.types is None else a.types & b.types
        m.enum = a.enum if b.enum is None else b.enum if a.enum is None else members_in(a.enum, b.enum)
        m.exclude = a.exclude + b.exclude
        self._merge_objects(m, a, b, pointer)
        self._merge_arrays(m, a, b, pointer)
        m.min_length = max(a.min_length, b.min_length)
        m.max_length = _min_opt(a.max_length, b.max_length)
        m.string_patterns = a.string_patterns + [p for p in b.string_patterns if p not in a.string_patterns]
        m.formats = a.formats + [f for f in b.formats if f not in a.formats]
        m.not_matching = a.not_matching + [c for c in b.not_matching if c not in a.not_matching]
        m.lower = _tighter(a.lower, b.lower, lower=True)
        m.upper = _tighter(a.upper, b.upper, lower=False)
        m.multiples = a.multiples + [q for q in b.multiples if q not in a.multiples]
        m.sources = a.sources + b.sources
        m.evaluated = a.evaluated | b.evaluated
        m.evaluated_patterns = a.evaluated_patterns | b.evaluated_patterns
        m.evaluates_all = a.evaluates_all or b.evaluates_all
        m.evaluated_prefix = max(a.evaluated_prefix, b.evaluated_prefix)
        m.evaluates_all_items = a.evaluates_all_items or b.evaluates_all_items
        m.evaluating_contains = a.evaluating_contains + tuple(c for c in b.evaluating_contains if c not in a.evaluating_contains)
        return [m]

    def _flatten_target(self, target: Any, base: str, pointer: str, depth: int, assumed: frozenset) -> list[Flat]:
        """A ``$ref``'s target flattened for the same instance. Flattening never goes down
        to an instance's members, so meeting the same target again inside its own expansion
        is a cycle of references on one value, which a validator loops on: refused at once,
        where following it to ``MAX_REF_DEPTH`` took exponentially many looks through the
        ``oneOf``s on the way."""
        key = (id(target), base)
        if key in self._open_targets:
            self._refuse_ref_cycle(pointer)
        self._open_targets.add(key)
        try:
            return self.flatten(target, base, pointer, depth, assumed=assumed)
        finally:
            self._open_targets.discard(key)

    def _refuse_ref_cycle(self, pointer: str) -> NoReturn:
        self.reporter.fatal("$ref", pointer, "references nest too deeply (a $ref cycle that never reaches a value?)")

    def flatten_sub_through_refs(self, sub: Sub) -> list[Flat]:
        """``flatten_sub`` with every ``$ref`` replaced by what it refers to, for a place
        that cannot refer (a key's language); a cycle of references raises as nesting does."""
        return self._without_refs(self.flatten_sub(sub), 0)

    def _without_refs(self, alternatives: list[Flat], depth: int) -> list[Flat]:
        while any(flat.ref is not None for flat in alternatives):
            depth += 1
            alternatives = [seen for flat in alternatives for seen in self._expand_ref(flat, depth)]
        return alternatives

    # -- unevaluatedProperties, unevaluatedItems --------------------------------------------
    @contextlib.contextmanager
    def _annotations_exact(self, schema: dict) -> Iterator[None]:
        closes = bool(UNEVALUATED & schema.keys()) and not self.legacy_ref_siblings
        self._exact_annotations += closes
        try:
            yield
        finally:
            self._exact_annotations -= closes

    def _unevaluated_closed(self, alternatives: list[Flat], schema: dict, base: str, pointer: str, depth: int) -> list[Flat]:
        """``alternatives`` under ``schema``'s ``unevaluatedProperties`` and
        ``unevaluatedItems`` (draft 2019-09 on): in each, a property or item that no schema
        holding there evaluates takes the keyword's schema, and every one is evaluated
        afterwards, for an enclosing one."""
        closes = [keyword for keyword in ("unevaluatedProperties", "unevaluatedItems") if keyword in schema]
        if not closes or self.legacy_ref_siblings:
            return alternatives
        alternatives = self._without_refs(alternatives, depth)
        for keyword in closes:
            member, here = schema[keyword], _child(pointer, keyword)
            unevaluated = None if _holds_always(member) else Sub((Part.of(member, base, here),))
            close = self._properties_closed if keyword == "unevaluatedProperties" else self._items_closed
            alternatives = [close(flat, unevaluated, here) for flat in alternatives]
        return alternatives

    def _properties_closed(self, flat: Flat, unevaluated: Sub | None, here: str) -> Flat:
        """An ``additionalProperties`` of the alternative (whose own names and patterns are
        the evaluated ones), and a condition on the names only negated schemas list."""
        if unevaluated is not None and not flat.evaluates_all:
            if set(flat.patterns) - flat.evaluated_patterns:
                self.reporter.unsupported("unevaluatedProperties", here, "a negated patternProperties beside unevaluatedProperties")
            else:
                flat = dataclasses.replace(
                    flat,
                    props={name: value if name in flat.evaluated else and_subs(value, unevaluated)
                           for name, value in flat.props.items()},
                    additional=and_subs(flat.additional, unevaluated),
                )
        return dataclasses.replace(flat, evaluates_all=True)

    def _items_closed(self, flat: Flat, unevaluated: Sub | None, here: str) -> Flat:
        """The items past the evaluated prefix (the longest ``prefixItems`` that holds) take
        the schema, unless ``items`` (or ``additionalItems``) evaluates them all."""
        if unevaluated is not None and not flat.evaluates_all_items:
            if flat.evaluating_contains:
                # An item a contains matches is evaluated: past the prefix, each item
                # matches one of them or takes the schema.
                unevaluated = _any_of((*flat.evaluating_contains, unevaluated), here)
            if unevaluated is None:
                self.reporter.unsupported("unevaluatedItems", here, "contains and unevaluatedItems resolving references in different documents")
            else:
                flat = dataclasses.replace(
                    flat,
                    prefix=[value if i < flat.evaluated_prefix else and_subs(value, unevaluated) for i, value in enumerate(flat.prefix)],
                    items=and_subs(flat.items, unevaluated),
                )
        return dataclasses.replace(flat, evaluates_all_items=True)

    def _any_of_by_what_holds(self, members: list, branches: list[list[Flat]], base: str, pointer: str, depth: int) -> list[Flat]:
        """An ``anyOf`` whose branches evaluate properties or items, as one alternative per set of
        branches that hold (the others negated): every branch that holds evaluates, not
        just the one an alternative was taken from."""
        if len(members) > MAX_BRANCHES_BY_WHAT_HOLDS:
            self.reporter.unsupported(
                "anyOf", pointer,
                f"an anyOf of more than {MAX_BRANCHES_BY_WHAT_HOLDS} branches that evaluate properties or items under unevaluated*",
            )
            return [flat for alternatives in branches for flat in alternatives]
        negations = [self._negation_or_relax(member, base, _child(pointer, i), "anyOf", depth) for i, member in enumerate(members)]
        union: list[Flat] = []
        for size in range(1, len(members) + 1):
            for holding in itertools.combinations(range(len(members)), size):
                alternatives = [Flat(pointer=pointer)]
                for i in range(len(members)):
                    side = branches[i] if i in holding else negations[i]
                    if side is not None:  # None: a negation lenient mode relaxed
                        alternatives = self._product(alternatives, side, pointer, depth)
                union.extend(alternatives)
        return union

    def _expand_ref(self, flat: Flat, depth: int, assumed: frozenset = frozenset()) -> list[Flat]:
        if flat.ref is None:
            return [flat]
        part = flat.ref
        expanded = self._flatten_target(part.schema, part.base, part.pointer, depth + 1, assumed)
        for item in expanded:
            item.sources = item.sources + flat.sources
        return [_without_annotations(item) for item in expanded] if flat.annotations_dropped else expanded

    def _merge_objects(self, m: Flat, a: Flat, b: Flat, pointer: str) -> None:
        # An unlisted key takes additionalProperties on a side where it matches none of
        # that side's patterns. With the same patterns on both sides it matches the same
        # ones on each, so the merge below (patterns and additionalProperties each
        # conjoined) is exact; otherwise one side's additionalProperties would be owed
        # to keys matching only the other side's patterns, which one object cannot say.
        if a.patterns.keys() != b.patterns.keys() and (
            (a.patterns and b.additional is not None) or (b.patterns and a.additional is not None)
        ):
            self.reporter.fatal("allOf", pointer, "cannot merge patternProperties with another schema's additionalProperties")
        props: dict = {}
        for name in list(a.props) + [n for n in b.props if n not in a.props]:
            props[name] = and_subs(value_schema(a, name), value_schema(b, name))
        m.props = props
        m.required = a.required + [n for n in b.required if n not in a.required]
        m.additional = and_subs(a.additional, b.additional)
        m.patterns = dict(a.patterns)
        for pattern, sub in b.patterns.items():
            m.patterns[pattern] = and_subs(m.patterns.get(pattern), sub)
        m.property_names = and_subs(a.property_names, b.property_names)
        m.some_member = a.some_member + [c for c in b.some_member if c not in a.some_member]
        m.min_props = max(a.min_props, b.min_props)
        m.max_props = _min_opt(a.max_props, b.max_props)

    def _merge_arrays(self, m: Flat, a: Flat, b: Flat, pointer: str) -> None:
        length = max(len(a.prefix), len(b.prefix))

        def at(flat: Flat, i: int) -> Sub | None:
            return flat.prefix[i] if i < len(flat.prefix) else flat.items

        m.prefix = [and_subs(at(a, i), at(b, i)) or Sub((Part.of(True, "", pointer),)) for i in range(length)]
        m.items = and_subs(a.items, b.items)
        m.also_contains = a.also_contains + [c for c in b.also_contains if c not in a.also_contains]
        if a.contains is not None and b.contains is not None and a.contains != b.contains:
            # A second contains is kept beside the first when it asks for one matching item.
            if (b.min_contains, b.max_contains) != (1, None):
                a, b = b, a
            if (b.min_contains, b.max_contains) != (1, None):
                self.reporter.fatal("contains", pointer, "two contains constraints with minContains or maxContains cannot be combined")
            if b.contains not in m.also_contains:
                m.also_contains.append(b.contains)
            b = dataclasses.replace(b, contains=None)
        m.contains = a.contains or b.contains
        m.min_contains = a.min_contains if a.contains is not None else b.min_contains
        m.max_contains = a.max_contains if a.contains is not None else b.max_contains
        m.min_items = max(a.min_items, b.min_items)
        m.max_items = _min_opt(a.max_items, b.max_items)
        m.unique = a.unique or b.unique

    # -- keyword parsing ------------------------------------------------------------------
    def _keywords(self, schema: dict, base: str, pointer: str) -> Flat:
        flat = Flat(pointer=pointer)

        def sub(value: Any, *keys: Any) -> Sub:
            return Sub((Part.of(value, base, _child(pointer, *keys)),))

        def count(keyword: str) -> int:
            value = schema[keyword]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or int(value) != value:
                self.reporter.fatal(keyword, _child(pointer, keyword), f"{keyword} must be a non-negative integer")
            return int(value)

        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            atoms: set = set()
            for name in names:
                if name not in _TYPE_NAMES:
                    self.reporter.fatal("type", _child(pointer, "type"), f"unknown type {name!r}")
                atoms |= _TYPE_NAMES[name]
            flat.types = frozenset(atoms)
        if "__types__" in schema:
            flat.types = frozenset(schema["__types__"]) if flat.types is None else flat.types & frozenset(schema["__types__"])
        if "enum" in schema:
            flat.enum = list(schema["enum"])
        if "const" in schema:
            flat.enum = [v for v in (flat.enum if flat.enum is not None else [schema["const"]]) if _equal(v, schema["const"])]
        flat.exclude = list(schema.get("__exclude__", ()))
        # objects
        for name, value in schema.get("properties", {}).items():
            flat.props[name] = sub(value, "properties", name)
        flat.required = list(dict.fromkeys(schema.get("required", ()))) if isinstance(schema.get("required"), list) else []
        if "additionalProperties" in schema:
            flat.additional = sub(schema["additionalProperties"], "additionalProperties")
        for pattern, value in schema.get("patternProperties", {}).items():
            flat.patterns[pattern] = sub(value, "patternProperties", pattern)
        flat.evaluated = frozenset(flat.props)
        flat.evaluated_patterns = frozenset(flat.patterns)
        flat.evaluates_all = "additionalProperties" in schema
        if "propertyNames" in schema:
            flat.property_names = sub(schema["propertyNames"], "propertyNames")
        if "__some_member__" in schema:
            wanted = schema["__some_member__"]
            flat.some_member = [SomeMember(
                None if wanted.get("outside") is None else frozenset(wanted["outside"]),
                None if wanted.get("names") is None else sub(wanted["names"], "__some_member__", "names"),
                None if wanted.get("value") is None else sub(wanted["value"], "__some_member__", "value"),
            )]
        if "minProperties" in schema:
            flat.min_props = count("minProperties")
        if "maxProperties" in schema:
            flat.max_props = count("maxProperties")
        # arrays (draft 7 tuples: items as a list, additionalItems for the rest)
        items = schema.get("items")
        if isinstance(items, list):
            flat.prefix = [sub(value, "items", i) for i, value in enumerate(items)]
            if "additionalItems" in schema:
                flat.items = sub(schema["additionalItems"], "additionalItems")
        else:
            flat.prefix = [sub(value, "prefixItems", i) for i, value in enumerate(schema.get("prefixItems", ()))]
            if items is not None:
                flat.items = sub(items, "items")
        flat.evaluated_prefix = len(flat.prefix)
        flat.evaluates_all_items = flat.items is not None
        if "contains" in schema:
            flat.contains = sub(schema["contains"], "contains")
            flat.evaluating_contains = (flat.contains,)
            if "minContains" in schema:
                flat.min_contains = count("minContains")
            if "maxContains" in schema:
                flat.max_contains = count("maxContains")
        if "minItems" in schema:
            flat.min_items = count("minItems")
        if "maxItems" in schema:
            flat.max_items = count("maxItems")
        flat.unique = schema.get("uniqueItems") is True
        # strings
        if "minLength" in schema:
            flat.min_length = count("minLength")
        if "maxLength" in schema:
            flat.max_length = count("maxLength")
        if "pattern" in schema:
            flat.string_patterns = [schema["pattern"]]
        if "format" in schema and isinstance(schema["format"], str):
            flat.formats = [schema["format"]]
        if "__not_matching__" in schema:
            flat.not_matching = [tuple(condition) for condition in schema["__not_matching__"]]
            # What enum values are checked against (jsonschema does not know the internal keyword).
            flat.sources.append(({"not": {"anyOf": [{kind: value} for kind, value in flat.not_matching]}}, base))
        # numbers (draft 4 spells exclusive bounds as booleans next to minimum/maximum)
        try:
            flat.lower = self._bound(schema, "minimum", "exclusiveMinimum", lower=True)
            flat.upper = self._bound(schema, "maximum", "exclusiveMaximum", lower=False)
            if "multipleOf" in schema:
                flat.multiples = [to_decimal(schema["multipleOf"])]
        except NumberConstraintError as error:
            self.reporter.fatal("minimum", pointer, str(error))
        return flat

    @staticmethod
    def _bound(schema: dict, inclusive: str, exclusive: str, lower: bool) -> tuple | None:
        bound = None
        flag = schema.get(exclusive)
        if inclusive in schema:
            bound = (to_decimal(schema[inclusive]), flag is True)
        if flag is not None and not isinstance(flag, bool):
            bound = _tighter(bound, (to_decimal(flag), True), lower)
        return bound

    # -- oneOf, not, if -----------------------------------------------------------------------
    def _one_of(self, branches: list, base: str, pointer: str, depth: int, assumed: frozenset) -> list[Flat]:
        flattened = [self.flatten(b, base, _child(pointer, i), depth, assumed=assumed) for i, b in enumerate(branches)]
        compared = [self._through_refs(alternatives, depth, assumed) for alternatives in flattened]
        # Each pair once: the negations below read the same answers.
        apart = {
            (i, j) for i in range(len(branches)) for j in range(i + 1, len(branches))
            if _disjoint(compared[i], compared[j], assumed)
        }
        if len(apart) == len(branches) * (len(branches) - 1) // 2:
            return [flat for alternatives in flattened for flat in alternatives]
        out: list[Flat] = []
        for i, branch in enumerate(branches):
            alternatives = flattened[i]
            for j, other in enumerate(branches):
                if i == j or (min(i, j), max(i, j)) in apart:
                    continue
                negated = self._negation_or_relax(other, base, _child(pointer, j), "oneOf", depth)
                if negated is None:
                    continue
                alternatives = self._product(alternatives, negated, pointer, depth)
            out.extend(alternatives)
        return out

    def _through_refs(self, alternatives: list[Flat], depth: int, assumed: frozenset) -> list[Flat]:
        """``alternatives`` with each ``$ref`` replaced by what it refers to (a few hops), for
        telling branches apart: a union of ``$ref``s is how most schemas write one. Where
        the target cannot be flattened the ``$ref`` stays, which ``_disjoint`` never calls
        disjoint; nothing is raised or recorded for such a look."""
        reporter, self.reporter = self.reporter, _Probe()
        try:
            for _ in range(_REF_HOPS_COMPARED):
                if all(flat.ref is None for flat in alternatives) or len(alternatives) > MAX_ALTERNATIVES:
                    break
                alternatives = [seen for flat in alternatives for seen in self._expand_ref(flat, depth, assumed)]
        except _ProbeFailed:
            pass
        finally:
            self.reporter = reporter
        return alternatives

    def _if_then_else(self, schema: dict, base: str, pointer: str, depth: int) -> list[Flat]:
        condition = self.flatten(schema["if"], base, _child(pointer, "if"), depth)
        then = self.flatten(schema.get("then", True), base, _child(pointer, "then"), depth)
        otherwise = self.flatten(schema.get("else", True), base, _child(pointer, "else"), depth)
        negated = self._negation_or_relax(schema["if"], base, _child(pointer, "if"), "if", depth)
        if negated is None:
            return self._product(condition, then, pointer, depth) + otherwise
        return self._product(condition, then, pointer, depth) + self._product(negated, otherwise, pointer, depth)

    def _negation_or_relax(self, schema: Any, base: str, pointer: str, keyword: str, depth: int) -> list[Flat] | None:
        try:
            negated = negate(schema, self.resolver, base, pointer, self.conditionals)
        except NegationError as error:
            self.reporter.unsupported(keyword, error.pointer, f"cannot express the negation: {error}")
            return None
        # A schema that fails gives no annotations, whatever its negation's parts would:
        # what holds inside the negation need not be told apart.
        exact, self._exact_annotations = self._exact_annotations, 0
        try:
            alternatives = self.flatten(negated, base, pointer, depth + 1, record=False)
        finally:
            self._exact_annotations = exact
        return self._recorded([_without_annotations(flat) for flat in alternatives], {"not": schema}, base)


def value_schema(flat: Flat, name: str) -> Sub | None:
    """What ``flat`` requires of the value of property ``name``."""
    result = flat.props.get(name)
    matched = False
    for pattern, sub in flat.patterns.items():
        if pattern_matches(pattern, name):
            result = and_subs(result, sub)
            matched = True
    if name not in flat.props and not matched:
        result = and_subs(result, flat.additional)
    return result


def pattern_matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def _empty_kinds(flat: Flat) -> set:
    """The types whose values ``flat`` cannot hold by its own counts and required names:
    objects that must have a property they may not have or more properties than they may,
    arrays or strings longer than they may be."""
    empty = set()
    if (flat.max_props is not None and max(flat.min_props, len(flat.required)) > flat.max_props) or any(
        sub is not None and sub.is_false() for sub in (value_schema(flat, name) for name in flat.required)
    ):
        empty.add("object")
    if flat.max_items is not None and flat.min_items > flat.max_items:
        empty.add("array")
    if flat.max_length is not None and flat.min_length > flat.max_length:
        empty.add("string")
    return empty


def as_schemas(subs) -> tuple[list, str] | None:
    """Each conjunction of ``subs`` as one schema (its only part, or an ``allOf`` of its
    parts), and the base they all resolve references against; None when their parts
    resolve references in different documents (one schema has one base)."""
    bases = {part.base for sub in subs for part in sub.parts}
    if len(bases) != 1:
        return None
    schemas = [sub.parts[0].schema if len(sub.parts) == 1 else {"allOf": [part.schema for part in sub.parts]} for sub in subs]
    return schemas, bases.pop()


def _any_of(subs: tuple, pointer: str) -> Sub | None:
    """The values meeting one of the conjunctions ``subs``, as one; None as ``as_schemas``."""
    found = as_schemas(subs)
    return None if found is None else Sub((Part.of({"anyOf": found[0]}, found[1], pointer),))


def _annotates(alternatives: list[Flat]) -> bool:
    """Whether some alternative evaluates properties or items (a ``$ref`` not followed yet may)."""
    return any(flat.ref is not None or _evaluates_some(flat) for flat in alternatives)


def _evaluates_some(flat: Flat) -> bool:
    return bool(
        flat.evaluated or flat.evaluated_patterns or flat.evaluates_all
        or flat.evaluated_prefix or flat.evaluates_all_items or flat.evaluating_contains
    )


def _is_empty(flat: Flat) -> bool:
    return flat == Flat(pointer=flat.pointer, sources=flat.sources)


def _copy_flat(flat: Flat, extra_sources: list) -> Flat:
    return Flat(ref=flat.ref, pointer=flat.pointer, sources=flat.sources + extra_sources,
                annotations_dropped=flat.annotations_dropped)


def _without_annotations(flat: Flat) -> Flat:
    """``flat`` evaluating no property (a ``$ref``: nor what it refers to)."""
    if flat.ref is not None:
        return flat if flat.annotations_dropped else dataclasses.replace(flat, annotations_dropped=True)
    if not _evaluates_some(flat):
        return flat
    return dataclasses.replace(
        flat, evaluated=frozenset(), evaluated_patterns=frozenset(), evaluates_all=False,
        evaluated_prefix=0, evaluates_all_items=False, evaluating_contains=(),
    )


def canonical(value: Any) -> str:
    def norm(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return ("number", str(to_decimal(v).normalize()))
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in sorted(v.items())}
        return repr(v)

    return json.dumps(norm(value), sort_keys=True)


def _equal(a: Any, b: Any) -> bool:
    return canonical(a) == canonical(b)


def member_of(value: Any, values: list) -> bool:
    """``value in values`` with JSON Schema equality (1 == 1.0, true != 1)."""
    return any(_equal(value, v) for v in values)


def members_in(values: list, allowed: list) -> list:
    """The ``values`` that are members of ``allowed`` (as ``member_of``, for long lists)."""
    keys = {canonical(v) for v in allowed}
    return [v for v in values if canonical(v) in keys]


_member = member_of


def type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if float(value).is_integer() else "nonint"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _required_names(schema: dict) -> frozenset:
    # Draft 3 writes "required": true inside a property's schema instead.
    required = schema.get("required")
    return frozenset(name for name in required if isinstance(name, str)) if isinstance(required, list) else frozenset()


def _signature(alternatives: list[Flat]) -> tuple[frozenset | None, list | None]:
    """(possible types, possible values or None); (None, None) for an unresolved ``$ref``."""
    types: set = set()
    values: list | None = []
    for flat in alternatives:
        if flat.ref is not None:
            return None, None
        flat_types = flat.types if flat.types is not None else TYPE_ATOMS
        if flat.enum is not None:
            flat_types = flat_types & {type_of(v) for v in flat.enum}
        types |= flat_types
        if values is not None:
            values = values + flat.enum if flat.enum is not None else None
    return frozenset(types), values


def _finite_values(sub: Sub) -> list | None:
    """Values the conjunction ``sub`` admits at most (None: not a finite set we know): a
    ``const`` or ``enum``, or a string whose ``pattern`` spells one literal (``^Abs$``, as
    discriminated unions often tag their branches)."""
    literal = None
    is_string = False
    for part in sub.parts:
        schema = part.schema
        if isinstance(schema, dict):
            if "const" in schema:
                return [schema["const"]]
            if "enum" in schema and isinstance(schema["enum"], list):
                return list(schema["enum"])
            if schema.get("type") in ("string", ["string"]):
                is_string = True
            if literal is None:
                literal = literal_of_pattern(schema.get("pattern"))
    return [literal] if is_string and literal is not None else None


#: What an ECMA-262 pattern outside a class gives a meaning to; escaped, each is itself.
_PATTERN_SYNTAX = frozenset("^$\\.*+?()[]{}|")


def literal_of_pattern(pattern: Any) -> str | None:
    """The one string an anchored pattern of plain characters matches (``^Abs$``, ``^a\\.b$``),
    else None."""
    if not isinstance(pattern, str) or len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
        return None
    body, text, i = pattern[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            # An escaped syntax character is itself; other escapes are classes or
            # assertions, and a final backslash escapes the closing dollar.
            if i + 1 == len(body) or body[i + 1] not in _PATTERN_SYNTAX | {"/", "-"}:
                return None
            text.append(body[i + 1])
            i += 2
        elif char in _PATTERN_SYNTAX:
            return None
        else:
            text.append(char)
            i += 1
    return "".join(text)


def _disjoint(a: list[Flat], b: list[Flat], assumed: frozenset = frozenset()) -> bool:
    """No instance meets both ``a`` and ``b`` (objects among them having the properties
    ``assumed``). False where that is not known."""
    if not a or not b:
        return True
    types_a, values_a = _signature(a)
    types_b, values_b = _signature(b)
    if types_a is None or types_b is None:
        return False
    if not types_a & types_b:
        return True
    if values_a is not None and values_b is not None:
        return not members_in(values_a, values_b)
    return (types_a <= {"object"} and _keyed_apart(a, b, assumed)) or (
        types_b <= {"object"} and _keyed_apart(b, a, assumed))


def _keyed_apart(a: list[Flat], b: list[Flat], assumed: frozenset) -> bool:
    """Every object of ``a`` has a property whose value no object of ``b`` may give it: one
    all of ``a`` require (or ``assumed``), with values from a known finite set (a
    discriminated union's tag) or any, where ``b`` forbids the property or allows it other
    values only."""
    common = None
    for flat in a:
        names = set(flat.required)
        common = names if common is None else common & names
    for name in sorted((common or set()) | assumed):
        values: list | None = []
        for flat in a:
            sub = value_schema(flat, name)
            found = _finite_values(sub) if sub is not None else None
            if found is None:
                values = None
                break
            values += found
        if all(_refuses(flat, name, values) for flat in b):
            return True
    return False


def _refuses(flat: Flat, name: str, values: list | None) -> bool:
    """``flat`` holds no object, forbids property ``name``, or (``values`` known) gives it
    none of ``values``."""
    if flat.types is not None and "object" not in flat.types:
        return True
    sub = value_schema(flat, name)
    if sub is None:
        return False
    if sub.is_false():
        return True
    allowed = _finite_values(sub) if values is not None else None
    return allowed is not None and not members_in(values, allowed)


#: The type each keyword of ``__not_matching__`` is about.
_NOT_MATCHING_TYPE = {"pattern": "string", "format": "string", "multipleOf": "number"}

#: The most oneOf branches a negation takes: "two at once" is one alternative per pair.
MAX_NEGATED_ONE_OF = 8


class NegationError(ValueError):
    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer


def _unequal(value: list | dict) -> dict:
    """The values other than the array or object ``value`` (equal as JSON Schema compares:
    items in order, members regardless of order, numbers by value)."""
    if isinstance(value, list):
        options: list = [{"__types__": sorted(TYPE_ATOMS - {"array"})}, {"type": "array", "minItems": len(value) + 1}]
        if value:
            options.append({"type": "array", "maxItems": len(value) - 1})
        for i, item in enumerate(value):
            options.append({"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [{"not": {"const": item}}]})
        return {"anyOf": options}
    options = [
        {"__types__": sorted(TYPE_ATOMS - {"object"})},
        {"type": "object", "__some_member__": {"outside": sorted(value), "names": None, "value": None}},
    ]
    for key, item in value.items():
        options.append({"type": "object", "properties": {key: False}})
        options.append({"type": "object", "required": [key], "properties": {key: {"not": {"const": item}}}})
    return {"anyOf": options}


def _holds_always(schema: Any) -> bool:
    """Whether ``schema`` admits every value (its negation admits none)."""
    return schema is True or (isinstance(schema, dict) and not _constraint_keys(schema))


def _negatable_format(name: Any) -> bool:
    """Whether a ``format`` can be negated: one surecall enforces, or an annotation (it
    constrains nothing, so its negation adds nothing); not one jsonschema checks that
    surecall cannot enforce."""
    if not isinstance(name, str) or name in FORMAT_PATTERNS:
        return True
    from .validation import checked_formats

    return name not in checked_formats()


def negation_of(member: Any, resolver) -> dict:
    """``{"not": member}``, the same dict for the same member schema: a member's negation
    is worked out when the member itself is translated, not at once with the enclosing
    one. The negation of a recursive schema (items that refer back to it) is as recursive
    as the schema, so spelled out at once it never ends; left to its member, it becomes a
    recursive rule as the schema does, the translator knowing the member again by the
    identity of this dict. ``resolver.negations`` keeps them (and the members alive)."""
    found = resolver.negations.get(id(member))
    if found is None:
        found = resolver.negations[id(member)] = (member, {"not": member})
    return found[1]


def negate(schema: Any, resolver, base: str, pointer: str, conditionals: bool = True) -> Any:
    """A schema (possibly using ``__types__``/``__exclude__``) matching exactly the values ``schema`` rejects."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        raise NegationError(pointer, "not a schema")
    if "$ref" in schema:
        target, target_base, target_pointer = resolver.resolve(schema["$ref"], resolver.base_of(schema, base), pointer)
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
        if target_base != base:
            raise NegationError(pointer, "a $ref into another document")
        if rest:
            return {"anyOf": [negate(target, resolver, base, target_pointer, conditionals), negate(rest, resolver, base, pointer, conditionals)]}
        return negate(target, resolver, base, target_pointer, conditionals)
    options: list[Any] = []
    keys = set(_constraint_keys(schema))
    handled: set = set()

    def use(*names: str) -> bool:
        present = [n for n in names if n in keys]
        handled.update(present)
        return bool(present)

    if use("type"):
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        atoms: set = set()
        for name in names:
            atoms |= _TYPE_NAMES.get(name, set())
        options.append({"__types__": sorted(TYPE_ATOMS - atoms)})
    if use("__types__"):
        options.append({"__types__": sorted(TYPE_ATOMS - set(schema["__types__"]))})
    if use("enum", "const"):
        values = list(schema.get("enum", []))
        if "const" in schema:
            values = [schema["const"]] if "enum" not in schema else [v for v in values if _equal(v, schema["const"])]
        scalars = [v for v in values if not isinstance(v, (dict, list))]
        compounds = [_unequal(v) for v in values if isinstance(v, (dict, list))]
        options.append({"allOf": [{"__exclude__": scalars}, *compounds]} if compounds else {"__exclude__": scalars})
    if use("__exclude__"):
        options.append({"enum": list(schema["__exclude__"])})
    for keyword, opposite, strict in (
        ("minimum", "exclusiveMaximum", False),
        ("maximum", "exclusiveMinimum", False),
    ):
        if use(keyword):
            exclusive_flag = schema.get("exclusiveMinimum" if keyword == "minimum" else "exclusiveMaximum")
            if exclusive_flag is True:
                inverse = {"maximum" if keyword == "minimum" else "minimum": schema[keyword]}
            else:
                inverse = {opposite: schema[keyword]}
            options.append({"type": "number", **inverse})
    for keyword, opposite in (("exclusiveMinimum", "maximum"), ("exclusiveMaximum", "minimum")):
        if use(keyword) and not isinstance(schema[keyword], bool):
            options.append({"type": "number", opposite: schema[keyword]})
    for keyword, kind, inverse in (
        ("minLength", "string", lambda n: {"maxLength": n - 1}),
        ("maxLength", "string", lambda n: {"minLength": n + 1}),
        ("minItems", "array", lambda n: {"maxItems": n - 1}),
        ("maxItems", "array", lambda n: {"minItems": n + 1}),
        ("minProperties", "object", lambda n: {"maxProperties": n - 1}),
        ("maxProperties", "object", lambda n: {"minProperties": n + 1}),
    ):
        if use(keyword):
            n = schema[keyword]
            # "at least 0" holds for every value of the kind: its negation adds nothing
            if not (keyword.startswith("min") and n == 0):
                options.append({"type": kind, **inverse(n)})
    if use("required"):
        options.extend({"type": "object", "properties": {name: False}} for name in schema["required"])
    if use("additionalProperties") and not _holds_always(schema["additionalProperties"]):
        # A key neither listed nor matching a pattern, whose value additionalProperties refuses
        # (the conditions are plain JSON Schema: jsonschema checks names and enum values with them).
        patterns = list(schema.get("patternProperties", {}))
        options.append({"type": "object", "__some_member__": {
            "outside": sorted(schema.get("properties", {})),
            "names": {"not": {"anyOf": [{"pattern": p} for p in patterns]}} if patterns else None,
            "value": None if schema["additionalProperties"] is False else {"not": schema["additionalProperties"]},
        }})
    if use("patternProperties"):
        for pattern, value in schema["patternProperties"].items():
            if not _holds_always(value):
                options.append({"type": "object", "__some_member__": {
                    "outside": None,
                    "names": {"pattern": pattern},
                    "value": {"not": value},
                }})
    if use("propertyNames") and not _holds_always(schema["propertyNames"]):
        options.append({"type": "object", "__some_member__": {
            "outside": None,
            "names": {"not": schema["propertyNames"]},
            "value": None,
        }})
    if use("dependentRequired", "dependentSchemas", "dependencies"):
        # the key is there, and a name it requires is missing or the schema it brings fails
        required_by = dict(schema.get("dependentRequired", {}))
        schemas_by = dict(schema.get("dependentSchemas", {}))
        for key, value in schema.get("dependencies", {}).items():
            (required_by if isinstance(value, list) else schemas_by)[key] = value
        for key, names in required_by.items():
            options.extend({"type": "object", "required": [key], "properties": {name: False}} for name in names)
        for key, dependent in schemas_by.items():
            if not _holds_always(dependent):
                options.append({"allOf": [{"type": "object", "required": [key]}, {"not": dependent}]})
    if use("properties"):
        for name, value in schema["properties"].items():
            # A property any value meets ({} lists it for documentation) fails no object.
            if not _holds_always(value):
                options.append({"type": "object", "required": [name], "properties": {name: negation_of(value, resolver)}})
    if use("items"):
        if "prefixItems" in keys or isinstance(schema["items"], list):
            raise NegationError(pointer, "negating items together with prefixItems")
        if not _holds_always(schema["items"]):
            options.append({"type": "array", "contains": negation_of(schema["items"], resolver)})
    if use("prefixItems") and "items" not in keys:
        # an item at one of the positions that its schema refuses
        for i, member in enumerate(schema["prefixItems"]):
            if not _holds_always(member):
                options.append({"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [negation_of(member, resolver)]})
    if use("contains"):
        if "minContains" in keys or "maxContains" in keys:
            raise NegationError(pointer, "negating minContains/maxContains")
        options.append({"type": "array", "items": negation_of(schema["contains"], resolver)})
    if use("uniqueItems") and schema["uniqueItems"] is True:
        raise NegationError(pointer, "negating uniqueItems")
    if use("pattern"):
        options.append({"type": "string", "__not_matching__": [("pattern", schema["pattern"])]})
    if "format" in keys and _negatable_format(schema["format"]):
        handled.add("format")
        if schema["format"] in FORMAT_PATTERNS:
            options.append({"type": "string", "__not_matching__": [("format", schema["format"])]})
    if use("multipleOf"):
        options.append({"type": "number", "__not_matching__": [("multipleOf", schema["multipleOf"])]})
    if use("__not_matching__"):
        options.append({"anyOf": [{"type": _NOT_MATCHING_TYPE[kind], kind: value} for kind, value in schema["__not_matching__"]]})
    if use("allOf"):
        options.extend(negate(member, resolver, base, _child(pointer, "allOf", i), conditionals) for i, member in enumerate(schema["allOf"]))
    if use("anyOf"):
        options.append({"allOf": [negate(member, resolver, base, _child(pointer, "anyOf", i), conditionals) for i, member in enumerate(schema["anyOf"])]})
    if use("not"):
        options.append(schema["not"])
    if use("oneOf"):
        # none of the branches, or two of them at once
        branches = schema["oneOf"]
        if len(branches) > MAX_NEGATED_ONE_OF:
            raise NegationError(pointer, f"negating a oneOf of more than {MAX_NEGATED_ONE_OF} branches")
        options.append({"allOf": [negate(branch, resolver, base, _child(pointer, "oneOf", i), conditionals) for i, branch in enumerate(branches)]})
        options.extend({"allOf": [branches[i], branches[j]]} for i, j in itertools.combinations(range(len(branches)), 2))
    if use("if", "then", "else") and conditionals and "if" in schema:
        # (if and not then) or (not if and not else); a missing branch holds for every value
        if "then" in schema:
            options.append({"allOf": [schema["if"], negate(schema["then"], resolver, base, _child(pointer, "then"), conditionals)]})
        if "else" in schema:
            options.append({"allOf": [
                negate(schema["if"], resolver, base, _child(pointer, "if"), conditionals),
                negate(schema["else"], resolver, base, _child(pointer, "else"), conditionals),
            ]})
    unhandled = keys - handled - {"exclusiveMinimum", "exclusiveMaximum"} - {"minContains", "maxContains"}
    if unhandled:
        keyword = sorted(unhandled)[0]
        raise NegationError(_child(pointer, keyword), f"negating {keyword!r}")
    if not options:
        return False
    return options[0] if len(options) == 1 else {"anyOf": options}
