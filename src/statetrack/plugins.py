"""User code: modules that register models and tasks, imported by the driver and by every worker.

A spec's `imports: [my_package.my_models, ./my_models.py]` and the CLI's `--import` name them:
module names are imported as usual (they must be importable where the workers run), file paths
(ending in `.py`, relative to the spec file or to the working directory for `--import`) are
loaded as modules of their own. Importing one runs its `@statetrack.register_model(...)` and
`@statetrack.register_task(...)` decorators, so its names work in specs and on the command line.
Workers are separate processes (spawned pool workers, Ray workers) that never see a registration
made in the driver, so the runner hands them the same list to import before they build anything.
Importing runs the module's code with the user's permissions: a spec is code, to be run only from
someone trusted. A module that raises or exits (sys.exit) while imported is a one-line error.

`imported_by` names the import a module came from, so that an error about a mixer it registered names
the plugin (`statetrack.models.zoo` checks a user's mixer before anything is written or trained).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from statetrack.errors import StatetrackError

_loaded_files: dict[str, object] = {}  # resolved path -> module: a file is executed once per process
_origins: dict[str, str] = {}  # module name -> the import (a .py file, a module name) that loaded it


def is_file_import(item: str) -> bool:
    return item.endswith(".py") or "/" in item or "\\" in item


def resolve_imports(items, base: str | Path | None = None, origin: str = "imports") -> list[str]:
    """Check the list and make file paths absolute (relative ones against `base`, else the working
    directory); module names stay as they are."""
    if items is None:
        return []
    if isinstance(items, str) or not isinstance(items, (list, tuple)):
        raise StatetrackError(f"{origin} must be a list of module names or .py files, got {items!r}")
    resolved = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise StatetrackError(f"{origin}: expected a module name or a .py file path, got {item!r}")
        if is_file_import(item):
            path = Path(item).expanduser()
            if not path.is_absolute():
                path = Path(base or ".") / path
            resolved.append(str(path.resolve()))
        else:
            resolved.append(item)
    return resolved


def _failure(error: BaseException) -> str:
    """What went wrong importing a module: its exception, or the exit it asked for."""
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r})"
    return f"{type(error).__name__}: {error}"


def _where(error: BaseException, path: str | None) -> str:
    """' (line N)' of the innermost frame in the user's file, when there is one."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if path is None or f.filename == path]
    return f" (line {frames[-1].lineno})" if frames and path else ""


def imported_by(module: str) -> str:
    """The import (a .py file path or a module name) that loaded `module`; `module` itself where none did."""
    return _origins.get(module, module)


def import_one(item: str, origin: str = "imports"):
    """Import a module name or a .py file (absolute path); any failure is a one-line StatetrackError."""
    module = _import(item, origin)
    _origins.setdefault(module.__name__, item)
    return module


def _import(item: str, origin: str):
    if is_file_import(item):
        if item in _loaded_files:
            return _loaded_files[item]
        path = Path(item)
        if path.is_dir():
            raise StatetrackError(
                f"{origin}: {item!r} is a folder, not a .py file; name a file in it (e.g. {path / '__init__.py'}), "
                "or its package by name with its parent folder on PYTHONPATH"
            )
        if path.exists() and not path.is_file():
            raise StatetrackError(f"{origin}: {item!r} is not a regular file; expected a .py file")
        if not path.is_file():
            raise StatetrackError(f"{origin}: file {item!r} does not exist")
        name = f"statetrack_user_{path.stem}_{hashlib.sha1(item.encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:  # a suffix no importer reads, e.g. plugins/models.txt
            raise StatetrackError(f"{origin}: file {item!r} is not a Python file; expected a .py file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # pickling and dataclasses look classes up by module name
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as error:
            del sys.modules[name]
            raise StatetrackError(
                f"{origin}: importing {item} failed{_where(error, str(path))}: {_failure(error)}"
            ) from None
        _loaded_files[item] = module
        return module
    try:
        return importlib.import_module(item)
    except ModuleNotFoundError as error:
        if error.name and item.startswith(error.name):
            raise StatetrackError(f"{origin}: no module named {item!r} (is it installed, or on PYTHONPATH?)") from None
        raise StatetrackError(f"{origin}: importing {item!r} failed: {type(error).__name__}: {error}") from None
    except (Exception, SystemExit) as error:
        raise StatetrackError(f"{origin}: importing {item!r} failed: {_failure(error)}") from None


def load_imports(items, base: str | Path | None = None, origin: str = "imports") -> list[str]:
    """Resolve and import every item; returns the resolved list (what workers are given)."""
    resolved = resolve_imports(items, base, origin)
    for item in resolved:
        import_one(item, origin)
    return resolved
