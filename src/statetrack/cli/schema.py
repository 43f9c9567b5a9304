"""`statetrack schema`: the JSON Schema of an experiment spec (statetrack.catalog)."""

from __future__ import annotations

import json

from statetrack.cli.common import Command


def cmd_schema(args) -> int:
    from statetrack.catalog import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=1))
    return 0


SCHEMA = Command(
    "schema",
    "print the JSON Schema of an experiment spec, every registered model and task with its parameters "
    "(statetrack schema > statetrack.schema.json; an editor then completes and checks YAML specs)",
    cmd_schema,
)
