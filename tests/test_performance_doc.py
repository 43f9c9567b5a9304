"""The performance pages' tables (docs/performance.md and the pages it links) are generated from the
committed benchmark JSON (benchmarks/results/; that the committed pages are current:
tests/test_docs.py), each with the command that measured it. Nothing is measured here."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "benchmarks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_lost_result_file_is_one_line_error(tables, tmp_path):
    from statetrack.errors import StatetrackError

    with pytest.raises(StatetrackError, match=r"ops.json is missing; measure it with the command its block"):
        tables.ops_block(tmp_path)


def pages(tables) -> dict[str, str]:
    return {name: (ROOT / "docs" / name).read_text() for name in tables.PAGES}


def test_every_result_file_is_shown_with_the_command_that_wrote_it(tables):
    shown = "".join(pages(tables).values())
    for path in sorted(tables.RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        assert {"benchmark", "command", "env", "machine", "args", "rows", "elapsed_s"} <= set(data), path.name
        assert {"cpu", "cores", "threads", "torch", "python"} <= set(data["machine"]), path.name
        assert f"> benchmarks/results/{path.name}" in shown, f"{path.name} is in no table of {', '.join(tables.PAGES)}"


def test_the_prose_quotes_no_commit_and_no_run_diary(tables):
    from statetrack.generated import BLOCK

    for name, text in pages(tables).items():
        prose = BLOCK.sub("", text)
        assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", prose), name  # a commit hash
        assert not re.search(r"\brun [1-9]\b|\bruns 1\b|afternoon", prose, re.I), name
