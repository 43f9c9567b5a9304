"""A store written by an earlier statetrack of this schema version still opens and reports the same.

tests/data/store_v1/statetrack.db was written by `statetrack run demo --name demo --workers 1
'seeds=[0]' train.steps=20` (three runs of 20 steps, vacuumed); expected.json holds what the store
read back then (experiments, the plan's run ids, the runs, the `results` rows) and results.txt what
`statetrack results demo` printed. Numbers are compared to within their printed precision, names,
ids and the table's layout exactly."""

import json
import math
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run_cli
from statetrack.store import APPLICATION_ID, SCHEMA_VERSION, Store

DATA = Path(__file__).parent / "data" / "store_v1"
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.fixture
def store_path(tmp_path) -> Path:
    """A copy of the committed store: opening it for writing must not touch the committed file."""
    path = tmp_path / "statetrack.db"
    shutil.copyfile(DATA / "statetrack.db", path)
    return path


def _same(actual, expected, path="") -> None:
    """Equal, floats to within rounding (rel 1e-9), everything else exactly; the message names the first difference."""
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        assert math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {actual!r} != {expected!r}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            _same(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {len(actual)} items != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _same(a, e, f"{path}[{i}]")
    else:
        assert type(actual) is type(expected) and actual == expected, f"{path}: {actual!r} != {expected!r}"


def _cells(text: str) -> list[list]:
    """A printed table as rows of cells (columns are 2+ spaces apart): numbers as floats, rules as '-'."""
    rows = []
    for line in text.strip().splitlines():
        cells = []
        for cell in re.split(r"\s{2,}", line.strip()):
            if re.fullmatch(r"-+", cell):
                cells.append("-")
            else:
                try:
                    cells.append(float(cell))
                except ValueError:
                    cells.append(cell)
        rows.append(cells)
    return rows


def test_the_fixture_is_a_store_of_this_version():
    db = sqlite3.connect(f"{(DATA / 'statetrack.db').resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        db.close()


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "write"])
def test_the_committed_store_opens_and_reads_back_the_same(store_path, read_only):
    store = Store(store_path, read_only=read_only)
    assert store.experiments() == EXPECTED["experiments"]
    assert [r["id"] for r in store.plan("demo").runs] == EXPECTED["plan_runs"]
    _same([{k: r[k] for k in EXPECTED["runs"][0]} for r in store.runs("demo")], EXPECTED["runs"])
    _same(store.results("demo"), EXPECTED["results"])
    assert {r["run_id"] for r in EXPECTED["results"]} == set(EXPECTED["plan_runs"])  # the expectation covers every run


def test_statetrack_results_prints_the_same(store_path, capsys):
    code, out, err = run_cli(capsys, "results", "demo", "--store", str(store_path), "--json")
    assert code == 0, err
    _same(json.loads(out), EXPECTED["results"])
    code, out, err = run_cli(capsys, "results", "demo", "--store", str(store_path))
    assert code == 0, err
    printed, recorded = _cells(out), _cells((DATA / "results.txt").read_text())
    assert len(printed) == len(recorded), out
    for got, want in zip(printed, recorded):
        assert len(got) == len(want), (got, want)
        for a, e in zip(got, want):
            if isinstance(e, float):  # printed to 3 decimals: equal to within one unit of the last
                assert isinstance(a, float) and abs(a - e) <= 1e-3 + 1e-9, (got, want)
            else:
                assert a == e, (got, want)
