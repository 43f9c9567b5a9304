"""The declared dependencies are the ones the code imports: none missing, none unused."""

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
# distribution name -> the module it provides, where they differ
MODULE = {"pyyaml": "yaml", "fla-core": "fla", "mlflow-skinny": "mlflow"}


def _imported(folder: Path) -> set[str]:
    """Top-level modules imported anywhere under `folder` (plain, lazy and importorskip imports)."""
    found = set()
    for path in folder.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
        found.update(re.findall(r"importorskip\(\"(\w+)", text))
    return found


def _names(requirements: list[str]) -> list[str]:
    return [re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements]


def test_runtime_dependencies_are_imported_by_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    used = _imported(ROOT / "src" / "statetrack")
    for name in _names(project["dependencies"]):
        assert MODULE.get(name, name) in used, f"{name} is declared but src/statetrack never imports it"


def test_every_third_party_import_of_the_package_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {MODULE.get(n, n) for n in _names(project["dependencies"])}
    optional = {MODULE.get(n, n) for extra in project["optional-dependencies"].values() for n in _names(extra)}
    third_party = {m for m in _imported(ROOT / "src" / "statetrack")
                   if m not in sys.stdlib_module_names and m not in ("statetrack", "__future__")}
    # optional backends and loggers (ray, tensorboard, wandb, mlflow) are imported lazily behind a clear error
    assert third_party <= declared | optional, f"imported but not declared: {sorted(third_party - declared - optional)}"


def test_dev_dependencies_are_used_by_the_tests():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    used = _imported(ROOT / "tests")
    helpers = (ROOT / "tests" / "ops_helpers.py").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for name in _names(project["optional-dependencies"]["dev"]):
        if name == "pytest-xdist":  # a pytest plugin, used by `make test`'s options, never imported
            assert re.search(r"pytest .*-n auto", makefile), "pytest-xdist is declared but make test does not use it"
            continue
        module = MODULE.get(name, name)
        # fla-core is loaded by file path (its package imports triton), not by `import fla`
        assert module in used or f'"{module}/' in helpers or f"{module}/ops" in helpers, \
            f"dev dependency {name} is declared but no test uses it"


def test_the_package_version_is_the_one_pyproject_declares():
    import statetrack

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert statetrack.__version__ == project["version"]


def test_license_is_mit_in_pyproject_the_license_file_and_the_citation():
    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Copyright (c) " in text and "the statetrack authors" in text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in text
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= set(citation) and all("name" in a or "family-names" in a for a in citation["authors"])
    assert citation["version"] == project["version"] and citation["license"] == project["license"]


def test_the_docs_index_lists_every_page_once():
    docs = ROOT / "docs"
    index = (docs / "README.md").read_text()
    listed = re.findall(r"^- \[([\w.-]+(?:\.md|/))\]\(\1\): \S", index, flags=re.M)
    pages = {p.name for p in docs.glob("*.md")} - {"README.md"}
    folders = {f"{p.name}/" for p in docs.iterdir() if p.is_dir() and any(p.glob("*.md"))}  # the book's pages
    assert len(listed) == len(set(listed)) and set(listed) == pages | folders


def test_the_committed_snapshots_ship_with_the_package():
    """The book's and the state table's snapshots live in one folder of the package, which its
    package data covers, so an installed package reads them too."""
    import fnmatch

    from statetrack.paths import SNAPSHOTS, snapshot_folder

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = data["statetrack.experiments"]
    files = sorted(snapshot_folder().glob("*.json"))
    assert {"demo.quick.json", "state-table.quick.json"} <= {f.name for f in files}
    for path in files:
        inside = path.relative_to(snapshot_folder().parent).as_posix()
        assert any(fnmatch.fnmatch(inside, pattern) for pattern in shipped), inside
    assert snapshot_folder() == ROOT / "src" / "statetrack" / SNAPSHOTS
