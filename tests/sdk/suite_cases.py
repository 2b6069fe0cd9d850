"""Loading the JSON-Schema-Test-Suite for the compliance tests (shared by tests and bench)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUITE_ROOT = Path("/work/shared/datasets/json-schema-test-suite/tests")
DRAFTS = {"draft2020-12": "https://json-schema.org/draft/2020-12/schema", "draft7": "http://json-schema.org/draft-07/schema#"}


@dataclass
class SuiteGroup:
    file: str
    description: str
    schema: Any
    tests: list


def suite_files(draft: str) -> list[Path]:
    folder = SUITE_ROOT / draft
    return sorted(folder.rglob("*.json")) if folder.exists() else []


def load_groups(path: Path, draft: str) -> list[SuiteGroup]:
    groups = []
    for group in json.loads(path.read_text()):
        schema = group["schema"]
        if isinstance(schema, dict) and "$schema" not in schema:
            schema = {"$schema": DRAFTS[draft], **schema}
        groups.append(SuiteGroup(str(path.relative_to(SUITE_ROOT)), group["description"], schema, group["tests"]))
    return groups


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
