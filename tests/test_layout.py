"""The package's layers point one way: no module imports from a package above it.

The data path reads bottom to top: the base (errors, the version, limits, paths, ...) < ops
(recurrences, each beside its reference) < layers (mixer modules) < tasks < models and checks < the
spec schema < training and the store < experiments (the write side) < results (the read side) <
analysis, the catalogue and the command line. A module may import from its own package and from
any package below it; every import of the package names a ranked part of it (a name taken from the
package root is an edge this test could not rank). `import statetrack` loads none of the heavy
parts, and no function in src/ is over 100 lines (60 in the command line).
"""

import ast
import subprocess
import sys
from pathlib import Path

import statetrack

PACKAGE = Path(statetrack.__file__).parent

RANK = {
    "errors": 0, "version": 0,
    "limits": 1, "paths": 1, "yamlio": 1, "diagnostics": 1, "plugins": 1, "allocator": 1, "labels": 1,
    "sqlite_header": 1,
    "generated": 1.5,
    "ops": 2,
    "layers": 3,
    "tasks": 4,
    "models": 5, "theory": 5, "checks": 5,
    "schema": 6,
    "training": 7, "store": 7,
    "options": 7.5,
    "experiments": 8,
    "results": 9,
    "analysis": 10, "catalog": 10,
    "docs": 10.5,
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
            if target not in RANK or (target != me and RANK[target] >= RANK[me]):
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert not upward, "imports that run up the layers (or name no ranked part):\n" + "\n".join(upward)


def test_an_unranked_import_is_an_edge_too():
    """`from statetrack import NAME` of a name the root defines names no ranked part: it counts."""
    found = imported(ast.parse("from statetrack import __version__, limits\nimport statetrack.ops.scan"))
    assert [unit(module) for _, module in found] == ["__version__", "limits", "ops"]
    assert "__version__" not in RANK


def test_importing_the_package_stays_light():
    """`import statetrack` (what a user's script or a worker pays first) loads neither the analyses
    nor matplotlib, Ray or torch; the public names still load on first use."""
    probe = (
        "import sys, statetrack\n"
        "heavy = [m for m in ('statetrack.analysis', 'matplotlib', 'ray', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert callable(statetrack.register_model) and callable(statetrack.load_runs)\n"
        "assert statetrack.StatetrackError and statetrack.__version__\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=PACKAGE.parents[1])
    assert done.returncode == 0, done.stderr


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


def test_functions_are_short():
    """A function reads on a screen or two: none over 100 lines in src/, none over 60 in the command
    line, whose modules read top to bottom (split along a real seam)."""
    assert not too_long(PACKAGE, 100), "functions over 100 lines:\n" + "\n".join(too_long(PACKAGE, 100))
    assert not too_long(PACKAGE / "cli", 60), "functions over 60 lines:\n" + "\n".join(too_long(PACKAGE / "cli", 60))
