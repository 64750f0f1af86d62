"""The JSON Schemas every command's JSON is documented by (docs/schemas/), as a check: what a
command printed or a run wrote, validated against its schema."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def assert_valid(name: str, value) -> None:
    """``value`` holds to the schema called ``name`` in docs/schemas/ (every error named, not only the first)."""
    validator = jsonschema.Draft202012Validator(schema(name))
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(value)]
    assert not errors, f"{name}: " + "; ".join(errors[:10])
