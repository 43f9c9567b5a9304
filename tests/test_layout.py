"""The package's layers point one way: no module imports from a package above it.

The data path reads bottom to top: the base (errors, limits, paths, ...) < ops (recurrences, each
beside its reference) < layers (mixer modules) < tasks < models < the spec schema < training and
the store < experiments (the write side) < results (the read side) < analysis, the catalogue and
the command line. A module may import from its own package and from any package below it.
"""

import ast
from pathlib import Path

import statetrack

PACKAGE = Path(statetrack.__file__).parent

RANK = {
    "errors": 0,
    "limits": 1, "paths": 1, "yamlio": 1, "diagnostics": 1, "plugins": 1, "allocator": 1, "labels": 1,
    "checks": 1, "sqlite_header": 1,
    "ops": 2,
    "layers": 3,
    "tasks": 4,
    "models": 5, "theory": 5,
    "schema": 6,
    "training": 7, "store": 7,
    "options": 7.5,
    "experiments": 8,
    "results": 9,
    "analysis": 10, "catalog": 10,
    "completion": 11,
    "cli": 12, "__init__": 12, "__main__": 12,
}


def unit(module: str) -> str:
    """The top-level part of the package a dotted module name belongs to ("statetrack.results.book" -> "results")."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "statetrack":
            names = [f"statetrack.{a.name}" for a in node.names] if node.module == "statetrack" else [node.module]
            found += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "statetrack"]
    return found


def test_every_package_is_ranked():
    units = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.glob("*") if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert units <= set(RANK), f"rank the new part of the package: {sorted(units - set(RANK))}"


def test_no_import_runs_up():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        me = parts[0] if parts != ("__init__",) else "__init__"
        for line, module in imported(ast.parse(path.read_text())):
            target = unit(module)
            if target in RANK and target != me and RANK[target] >= RANK[me]:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def too_long(folder: Path, most: int) -> list[str]:
    """Every function (method, nested function) under `folder` longer than `most` lines, decorators aside."""
    found = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > most:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_the_command_line_has_short_handlers():
    """Each command's module reads top to bottom: no function over 60 lines (split along a real seam)."""
    assert not too_long(PACKAGE / "cli", 60), "functions over 60 lines:\n" + "\n".join(too_long(PACKAGE / "cli", 60))
