"""The schemas the benchmarks run on, each with valid (and, where known, invalid) instances.

Two sources: the built-in realistic tool / structured-output schemas in
``bench/schemas/*.json``, and the JSONSchemaBench subsets that have MaskBench
instances (``../shared/datasets/jsonschemabench/``), sampled with a fixed seed.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
BUILTIN_DIR = BENCH_DIR / "schemas"
DATASET_DIR = Path(
    os.environ.get("SURECALL_JSB_DIR", BENCH_DIR.parent.parent / "shared" / "datasets" / "jsonschemabench")
)
JSB_SUBSETS = (
    "Github_trivial",
    "Github_easy",
    "Github_medium",
    "Github_hard",
    "Github_ultra",
    "Glaiveai2K",
    "JsonSchemaStore",
    "Kubernetes",
    "Snowplow",
    "WashingtonPost",
)


@dataclass
class Case:
    id: str
    source: str
    schema: dict
    valid: list = field(default_factory=list)
    invalid: list = field(default_factory=list)

    @property
    def schema_text(self) -> str:
        return json.dumps(self.schema, ensure_ascii=False)


def compact(instance) -> str:
    """The serialisation every engine is stepped through: compact separators, raw Unicode."""
    return json.dumps(instance, separators=(",", ":"), ensure_ascii=False)


def builtin_cases(names: list[str] | None = None) -> list[Case]:
    cases = []
    for path in sorted(BUILTIN_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if names is not None and data["name"] not in names:
            continue
        cases.append(Case(data["name"], "builtin", data["schema"], data["valid"], data.get("invalid", [])))
    return cases


def _read_jsonl(path: Path):
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def dataset_available() -> bool:
    return (DATASET_DIR / "maskbench-tests").is_dir()


def jsb_cases(per_subset: int, seed: int, subsets: tuple[str, ...] = JSB_SUBSETS) -> list[Case]:
    """``per_subset`` schemas with a valid MaskBench instance from each subset (fixed seed)."""
    if per_subset <= 0 or not dataset_available():
        return []
    cases = []
    for subset in subsets:
        tests_path = DATASET_DIR / "maskbench-tests" / f"{subset}.jsonl"
        if not tests_path.exists():
            continue
        tests = {row["id"]: row["tests"] for row in _read_jsonl(tests_path)}
        with_valid = sorted(i for i, rows in tests.items() if any(t["valid"] for t in rows))
        chosen = set(random.Random(f"{seed}:{subset}").sample(with_valid, min(per_subset, len(with_valid))))
        for row in _read_jsonl(DATASET_DIR / f"{subset}.jsonl"):
            if row["id"] not in chosen:
                continue
            rows = tests[row["id"]]
            cases.append(
                Case(
                    f"{subset}/{row['id']}",
                    subset,
                    row["schema"],
                    [t["data"] for t in rows if t["valid"]],
                    [t["data"] for t in rows if not t["valid"]],
                )
            )
    return cases
