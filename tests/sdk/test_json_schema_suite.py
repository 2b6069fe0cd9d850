"""JSON-Schema-Test-Suite compliance of the schema translator (draft 2020-12 and draft 7).

For every test group whose schema compiles (``property_order="any"``, compact JSON), each
instance must be accepted by the grammar exactly when it is valid. The label used is the
suite's, except where ``jsonschema`` with formats asserted (the check surecall applies to
its own output) disagrees with it: those instances are skipped, since surecall follows
that validator (formats are asserted even where the suite treats them as annotations).
"""

from __future__ import annotations

import pytest

from surecall.schema import UnsupportedSchemaError, grammar_from_schema
from surecall.validation import validator_for_schema

from .suite_cases import DRAFTS, compact, load_groups, suite_files

# Cases a regular language cannot decide, rejected on purpose (never accepted wrongly):
# IDNA A-labels ("xn--...") are valid only if their punycode decodes to allowed text.
# And a spelling: integers are written in digits, so 1e+308 (an integer's value) is refused.
KNOWN_REJECTED_VALID = {
    ("optional/format/hostname.json", "validation of A-label (punycode) host names"),
    ("optional/float-overflow.json", "all integers are multiples of 0.5, if overflow is handled"),
}

COMPILE_COVERAGE_FLOOR = 0.8  # measured: 650 of 782 test groups compile

FILES = [(draft, path) for draft in DRAFTS for path in suite_files(draft)]


def _run_file(draft, path):
    compiled = total = 0
    failures = []
    for group in load_groups(path, draft):
        total += 1
        try:
            grammar = grammar_from_schema(group.schema, property_order="any")
        except UnsupportedSchemaError:
            continue
        compiled += 1
        validator = validator_for_schema(group.schema)
        known = (group.file.split("/", 1)[1], group.description) in KNOWN_REJECTED_VALID
        for test in group.tests:
            if _validator_disagrees(validator, test):
                continue
            accepted = grammar.accepts(compact(test["data"]))
            if accepted and not test["valid"]:
                failures.append(f"ACCEPTED-INVALID {group.description} / {test['description']}: {compact(test['data'])[:100]}")
            elif not accepted and test["valid"] and not known:
                failures.append(f"REJECTED-VALID {group.description} / {test['description']}: {compact(test['data'])[:100]}")
    return compiled, total, failures


def _validator_disagrees(validator, test) -> bool:
    try:
        return validator.is_valid(test["data"]) != test["valid"]
    except Exception:  # a pattern Python's re cannot compile: the suite's label stands
        return False


_coverage: dict = {}


@pytest.mark.skipif(not FILES, reason="JSON-Schema-Test-Suite not available")
@pytest.mark.parametrize("draft,path", FILES, ids=[f"{d}/{p.name}" if "optional" not in str(p) else f"{d}/optional/{p.relative_to(p.parents[1]) if 'format' in str(p) else p.name}" for d, p in FILES])
def test_suite_file(draft, path):
    compiled, total, failures = _run_file(draft, path)
    _coverage[(draft, str(path))] = (compiled, total)
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not FILES, reason="JSON-Schema-Test-Suite not available")
def test_compile_coverage_floor():
    for draft, path in FILES:
        if (draft, str(path)) not in _coverage:
            compiled, total, _ = _run_file(draft, path)
            _coverage[(draft, str(path))] = (compiled, total)
    compiled = sum(c for c, _ in _coverage.values())
    total = sum(t for _, t in _coverage.values())
    assert total > 700
    assert compiled / total >= COMPILE_COVERAGE_FLOOR, f"{compiled}/{total} test groups compile"
