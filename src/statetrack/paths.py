"""Names that become folders, and the paths written under a root folder.

An experiment's name is a folder of the results folder (its report, plots and checkpoints) and of
the TensorBoard folder. Specs and stores are files people send each other and results folders are
shared, so a name is checked wherever it enters (`check_name`), and every path written under a
root is checked to resolve inside it (`under`), symbolic links followed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from statetrack.errors import StatetrackError

NAME_MAX = 100
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
ALLOWED_NAMES = f"1 to {NAME_MAX} ASCII letters, digits, '.', '_' or '-', not starting with '.'"


def check_name(name, what: str = "experiment name", hint: str = "") -> str:
    """`name` when it is safe as one folder name; else a one-line error saying what a name may hold."""
    if not isinstance(name, str) or len(name) > NAME_MAX or not NAME_PATTERN.fullmatch(name):
        raise StatetrackError(f"{what} {name!r} is not allowed: a name is {ALLOWED_NAMES}{hint}")
    return name


def check_writable(folder: str | Path, what: str) -> None:
    """That `folder` (which may not exist yet) can be created and written, checked without writing
    anything: its nearest existing ancestor is a folder this process may write. A one-line error
    naming `what` otherwise."""
    path = Path(folder).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise StatetrackError(f"cannot write {what} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StatetrackError(f"cannot write {what} {folder}: {existing} is not writable")


def under(root: str | Path, *parts: str) -> Path:
    """`root` joined with `parts`, refused unless it resolves strictly inside `root`."""
    path = Path(root).joinpath(*parts)
    base, resolved = Path(root).resolve(), path.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise StatetrackError(f"{path} resolves to {resolved}, outside the folder {root}; nothing is written there")
    return path
