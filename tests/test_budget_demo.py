"""The finite-budget guarantee on the embedded model, on a handful of the benchmark's cases.

Budgets sit at the minimum completion length (and a little above): budget-aware masking
must finish every output valid within the budget, while plain masking can only fail by
running out of tokens.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

_BENCH = Path(__file__).resolve().parent.parent / "bench" / "budget_demo.py"
_spec = importlib.util.spec_from_file_location("budget_demo_under_test", _BENCH)
budget_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(budget_demo)


@pytest.fixture(scope="module")
def demo_rows():
    from surecall.adapters.transformers.loading import load_model

    all_cases = budget_demo.cases()
    people = [c for c in all_cases if c["schema"] == "person"][:2]
    products = [c for c in all_cases if c["schema"] == "product"][:2]
    rows, _ = budget_demo.run(load_model(), people + products, slacks=(0, 4))
    return rows


def test_there_are_at_least_fifty_benchmark_prompts():
    assert len(budget_demo.cases()) >= 50


def test_budget_aware_masking_finishes_every_output_valid_within_budget(demo_rows):
    for row in demo_rows:
        outcome = row["budget_aware"]
        assert outcome["valid"], row
        assert outcome["finish_reason"] == "stop"
        assert outcome["tokens"] <= row["budget"]


def test_plain_masking_fails_only_by_truncation_and_does_at_the_minimum_budget(demo_rows):
    for row in demo_rows:
        outcome = row["plain"]
        assert outcome["tokens"] <= row["budget"]
        if not outcome["valid"]:
            # the mask keeps every prefix valid, so an invalid output is a cut-off one
            assert outcome["finish_reason"] == "length" and outcome["tokens"] == row["budget"], row
    at_minimum = [row for row in demo_rows if row["slack"] == 0]
    assert sum(not row["plain"]["valid"] for row in at_minimum) >= 1
    table = budget_demo.summarise(demo_rows)
    assert [line["slack"] for line in table] == [0, 4]
    assert all(line["budget_aware"]["valid"] == line["outputs"] for line in table)
