"""docs/performance.md's tables are generated from the committed benchmark JSON (benchmarks/results/;
that the committed page is current: tests/test_docs.py), each with the command that measured it.
Nothing is measured here."""

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


def test_every_result_file_is_shown_with_the_command_that_wrote_it(tables):
    page = tables.PAGE.read_text()
    for path in sorted(tables.RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        assert {"benchmark", "command", "env", "machine", "args", "rows", "elapsed_s"} <= set(data), path.name
        assert {"cpu", "cores", "threads", "torch", "python"} <= set(data["machine"]), path.name
        assert f"> benchmarks/results/{path.name}" in page, f"{path.name} is in no table of {tables.PAGE.name}"


def test_the_prose_quotes_no_commit_and_no_run_diary(tables):
    from statetrack.generated import BLOCK

    prose = BLOCK.sub("", tables.PAGE.read_text())
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", prose)  # a commit hash
    assert not re.search(r"\brun [1-9]\b|\bruns 1\b|afternoon", prose, re.I)
