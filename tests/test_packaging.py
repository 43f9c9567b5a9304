"""The declared dependencies are the ones the code imports: none missing, none unused."""

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
# distribution name -> the module it provides, where they differ
MODULE = {"pyyaml": "yaml", "fla-core": "fla"}


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
    # optional backends (ray, tensorboard) are imported lazily behind a clear error
    assert third_party <= declared | optional, f"imported but not declared: {sorted(third_party - declared - optional)}"


def test_dev_dependencies_are_used_by_the_tests():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    used = _imported(ROOT / "tests")
    helpers = (ROOT / "tests" / "ops_helpers.py").read_text()
    for name in _names(project["optional-dependencies"]["dev"]):
        module = MODULE.get(name, name)
        # fla-core is loaded by file path (its package imports triton), not by `import fla`
        assert module in used or f'"{module}/' in helpers or f"{module}/ops" in helpers, \
            f"dev dependency {name} is declared but no test uses it"


def test_the_package_version_is_the_one_pyproject_declares():
    import statetrack

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert statetrack.__version__ == project["version"]
