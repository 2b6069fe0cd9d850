"""Schema translation correctness on JSONSchemaBench + MaskBench instances.

Each schema is translated with ``grammar_from_schema`` and classified the way MaskBench
does it:

* **passing**: it compiles and every test instance is classified right,
* **compile error**: ``UnsupportedSchemaError`` (or the grammar is too large to build, or
  the per-schema time limit ran out),
* **accepted-invalid**: the grammar accepts an instance labelled invalid,
* **rejected-valid**: the grammar rejects an instance labelled valid.

Instances are written as compact JSON (``json.dumps(separators=(",", ":"))``). A label is
taken from the dataset, except that instances where ``jsonschema`` (formats asserted, the
check surecall applies to its own output) disagrees with the label are left out and counted.

Usage::

    python -m bench.schema_coverage [--property-order schema|any] [--limit N] [--subset NAME ...]

Writes ``bench/results/schema_coverage_<order>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import time
from pathlib import Path

DATA = Path("/work/shared/datasets/jsonschemabench")
RESULTS = Path(__file__).resolve().parent / "results"
SUBSETS = [
    "Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra", "Glaiveai2K",
    "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost",
]
LLGUIDANCE_PUBLISHED = {"schemas": 11306, "passing": 8909, "compile_error": 2377, "accepted_invalid": 0, "rejected_valid": 20}


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def iter_cases(subsets: list[str]):
    """(subset, id, schema, tests) for every schema with MaskBench tests."""
    for subset in subsets:
        if subset == "extra":
            with open(DATA / "maskbench-tests" / "extra_schemas.jsonl") as handle:
                for line in handle:
                    row = json.loads(line)
                    yield f"extra/{row['source']}", row["id"], row["schema"], row["tests"]
            continue
        schemas = {}
        with open(DATA / f"{subset}.jsonl") as handle:
            for line in handle:
                row = json.loads(line)
                schemas[row["id"]] = row["schema"]
        with open(DATA / "maskbench-tests" / f"{subset}.jsonl") as handle:
            for line in handle:
                row = json.loads(line)
                if row["id"] in schemas and row["tests"]:
                    yield subset, row["id"], schemas[row["id"]], row["tests"]


def classify(schema, tests, *, property_order: str, time_limit: int) -> tuple[str, str, int]:
    """(category, detail, instances left out because jsonschema disagrees with the label)."""
    from surecall.schema import UnsupportedSchemaError, grammar_from_schema
    from surecall.validation import validator_for_schema

    # CPU time, not wall time: the limit must not depend on how busy the machine is
    signal.signal(signal.SIGVTALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, time_limit)
    try:
        try:
            grammar = grammar_from_schema(schema, property_order=property_order)
        except UnsupportedSchemaError as error:
            return "compile_error", f"{error.keyword}: {error.message}"[:200], 0
        except RecursionError:
            return "compile_error", "schema nests too deeply", 0
        try:
            validator = validator_for_schema(schema)
        except Exception:
            validator = None
        disagreements = 0
        outcome = ("passing", "")
        for test in tests:
            label = test["valid"]
            if validator is not None:
                try:
                    if validator.is_valid(test["data"]) != label:
                        disagreements += 1
                        continue
                except Exception:
                    pass
            text = json.dumps(test["data"], ensure_ascii=False, separators=(",", ":"))
            accepted = grammar.accepts(text)
            if accepted and not label:
                return "accepted_invalid", text[:200], disagreements
            if not accepted and label:
                outcome = ("rejected_valid", text[:200])
        return outcome[0], outcome[1], disagreements
    except _Timeout:
        return "compile_error", f"time limit ({time_limit} CPU s)", 0
    except Exception as error:  # a crash is reported as such, never hidden
        return "crash", f"{type(error).__name__}: {error}"[:200], 0
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--property-order", choices=["schema", "any"], default="schema")
    parser.add_argument("--subset", action="append", help="subset name (repeatable; 'extra' for extra_schemas)")
    parser.add_argument("--limit", type=int, default=None, help="at most N schemas per subset")
    parser.add_argument("--time-limit", type=float, default=5, help="CPU seconds per schema")
    parser.add_argument(
        "--recheck", type=Path, default=None,
        help="a previous results JSON: classify again only its compile errors and merge (for a quick update "
        "after widening support; schemas that compiled before take the same code paths)",
    )
    parser.add_argument("--output", type=Path, default=None, help="results path stem (default bench/results/schema_coverage_<order>)")
    parser.add_argument("--checkpoint", action="store_true", help="write <output>.partial.json every 100 schemas")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, help="merge results JSON files of disjoint subsets and exit")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.output)
    subsets = args.subset or SUBSETS + ["extra"]
    previous = json.loads(args.recheck.read_text()) if args.recheck else None
    recheck_ids = {(e["subset"], e["id"]) for e in previous["compile_errors"]} if previous else None

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: collections.Counter = collections.Counter()
    failures: list[dict] = []
    compile_errors: list[dict] = []
    disagreements = 0
    per_subset_seen: collections.Counter = collections.Counter()
    started = time.time()
    for subset, schema_id, schema, tests in iter_cases(subsets):
        group = subset.split("/")[0]
        if args.limit is not None and per_subset_seen[group] >= args.limit:
            continue
        if recheck_ids is not None and (subset, schema_id) not in recheck_ids:
            continue
        per_subset_seen[group] += 1
        try:
            category, detail, left_out = classify(schema, tests, property_order=args.property_order, time_limit=args.time_limit)
        except _Timeout:
            # The timer ran out just as classify was stopping it (inside its finally clause).
            category, detail, left_out = "compile_error", f"time limit ({args.time_limit} CPU s)", 0
        disagreements += left_out
        counts[subset][category] += 1
        if category == "compile_error":
            reasons[detail.split(":")[0] + ": " + detail.split(":", 1)[-1].strip()[:70]] += 1
            compile_errors.append({"subset": subset, "id": schema_id, "detail": detail})
        elif category != "passing":
            failures.append({"subset": subset, "id": schema_id, "category": category, "detail": detail})
        total_done = sum(sum(c.values()) for c in counts.values())
        if total_done % 250 == 0:
            print(f"{total_done} schemas, {time.time() - started:.0f} s", file=sys.stderr)
        if args.checkpoint and total_done % 100 == 0:
            partial = summarise(args.property_order, counts, reasons, failures, compile_errors, disagreements, previous, started, complete=False)
            stem = args.output or RESULTS / f"schema_coverage_{args.property_order}"
            stem.with_suffix(".partial.json").write_text(json.dumps(partial, indent=1))

    result = summarise(args.property_order, counts, reasons, failures, compile_errors, disagreements, previous, started, complete=True)
    write(result, args.output or RESULTS / f"schema_coverage_{args.property_order}")
    return 0


def summarise(property_order, counts, reasons, failures, compile_errors, disagreements, previous, started, complete) -> dict:
    categories = ["passing", "compile_error", "accepted_invalid", "rejected_valid", "crash"]
    counts = collections.defaultdict(collections.Counter, {k: collections.Counter(v) for k, v in counts.items()})
    if previous is not None:
        for subset, row in previous["per_subset"].items():
            counts[subset]["passing"] += row["passing"]
            counts[subset]["accepted_invalid"] += row["accepted_invalid"]
            counts[subset]["rejected_valid"] += row["rejected_valid"]
            counts[subset]["crash"] += row["crash"]
        failures = previous["failures"] + failures
        disagreements += previous["left_out_instances_jsonschema_disagrees"]
    total = collections.Counter()
    for counter in counts.values():
        total.update(counter)
    result = {
        "property_order": property_order,
        "whitespace": "compact",
        "schemas": sum(total.values()),
        "totals": {c: total[c] for c in categories},
        "per_subset": {s: {c: counts[s][c] for c in categories} for s in sorted(counts)},
        "left_out_instances_jsonschema_disagrees": disagreements,
        "compile_error_reasons": reasons.most_common(40),
        "failures": failures,
        "compile_errors": compile_errors,
        "llguidance_published": LLGUIDANCE_PUBLISHED,
        "seconds": round(time.time() - started, 1),
    }
    result["complete"] = complete
    return result


def write(result: dict, stem: Path) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(markdown_table(result))
    print(markdown_table(result))


def merge(paths: list[Path], stem: Path | None) -> int:
    """Combine runs over disjoint subsets (e.g. run in parallel) into one result."""
    parts = [json.loads(path.read_text()) for path in paths]
    orders = {part["property_order"] for part in parts}
    if len(orders) != 1:
        raise SystemExit(f"cannot merge runs with different property orders: {sorted(orders)}")
    stem = stem or RESULTS / f"schema_coverage_{orders.pop()}"
    result = dict(parts[0])
    result["per_subset"] = {}
    result["totals"] = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    for key in ("failures", "compile_errors"):
        result[key] = []
    result["left_out_instances_jsonschema_disagrees"] = 0
    result["seconds"] = 0
    for part in parts:
        result["per_subset"].update(part["per_subset"])
        result["totals"].update(part["totals"])
        reasons.update(dict((reason, n) for reason, n in part["compile_error_reasons"]))
        result["failures"] += part["failures"]
        result["compile_errors"] += part["compile_errors"]
        result["left_out_instances_jsonschema_disagrees"] += part["left_out_instances_jsonschema_disagrees"]
        result["seconds"] = max(result["seconds"], part["seconds"])
    result["totals"] = dict(result["totals"])
    result["schemas"] = sum(result["totals"].values())
    result["compile_error_reasons"] = reasons.most_common(40)
    result["complete"] = all(part.get("complete", True) for part in parts)
    write(result, stem)
    return 0


def markdown_table(result: dict) -> str:
    categories = ["passing", "compile_error", "accepted_invalid", "rejected_valid", "crash"]
    lines = [
        f"Schemas with MaskBench instances, property order `{result['property_order']}`, compact JSON "
        f"({result['schemas']} schemas, {result['seconds']} s).",
        "",
        "| subset | schemas | passing | compile error | accepted-invalid | rejected-valid | crash |",
        "|---|---|---|---|---|---|---|",
    ]
    for subset, row in result["per_subset"].items():
        lines.append(f"| {subset} | {sum(row.values())} | " + " | ".join(str(row[c]) for c in categories) + " |")
    totals = result["totals"]
    lines.append(f"| **total** | **{result['schemas']}** | " + " | ".join(f"**{totals[c]}**" for c in categories) + " |")
    published = result["llguidance_published"]
    lines.append(
        f"| llguidance (published, MaskBench) | {published['schemas']} | {published['passing']} | "
        f"{published['compile_error']} | {published['accepted_invalid']} | {published['rejected_valid']} | – |"
    )
    lines.append("")
    lines.append(f"Instances left out because jsonschema disagrees with their label: {result['left_out_instances_jsonschema_disagrees']}.")
    if not result.get("complete", True):
        lines.append("")
        lines.append(
            "Partial run: the schemas counted are the first ones of each subset in id order "
            "(the run was stopped before the end); the remaining schemas were not classified."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
