"""Names that become folders, and the paths written under a root folder.

An experiment's name is a folder of the results folder (its report, plots and checkpoints) and of
the TensorBoard folder. Specs and stores are files people send each other and results folders are
shared, so a name is checked wherever it enters (`check_name`), and every path written under a
root is checked to resolve inside it (`under`), symbolic links followed, and every file is opened
through `open_for_write`, which creates it without following a link planted at its name and refuses
anything but a regular file there (a FIFO, a device), so that no write can leave the folder.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager, suppress
from importlib import resources
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


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_output(path: str | Path, what: str) -> None:
    """That the file `path` can be written, checked before anything is trained or written: absent or
    a regular file this process may write (not a folder, a FIFO, a device or a link), in a folder
    that exists or can be created (`check_writable`). A one-line error naming `what` otherwise."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:  # a file where one of its folders goes: said by check_writable below
        mode = None
    if mode is not None:
        if stat.S_ISLNK(mode):  # in open_for_write's words
            raise StatetrackError(f"{path} is a symbolic link; statetrack writes no file through a link")
        if not stat.S_ISREG(mode):
            raise StatetrackError(f"cannot write {what} {path}: it is {_kind(mode)}, not a regular file")
        if not os.access(path, os.W_OK):
            raise StatetrackError(f"cannot write {what} {path}: the file is read-only")
    check_writable(path.parent, f"{what} {path} in the folder")


def check_outputs(paths, what: str) -> None:
    """`check_output` of every path: all of a command's outputs are checked before the first is written."""
    for path in paths:
        check_output(path, what)


# The files a report writes in RESULTS_DIR/EXPERIMENT (results/report.py), and the endings of its
# plots and tables whose names follow the data (one per metric family, per traced task).
REPORT_FILES = (
    "report.md",
    "report.html",
    "headline.tex",
    "paper_vs_measured.tex",
    "accuracy_vs_length.png",
    "accuracy_vs_dataset_size.png",
    "training_curves.png",
    "position_accuracy.png",
)
REPORT_ENDINGS = (".md", ".html", ".tex", ".png", ".svg", ".pdf")


def report_outputs(results_dir: str | Path, experiment: str) -> list[Path]:
    """Every file an experiment's report may write: REPORT_FILES and whatever of its folder ends like
    a report file (the plots named after the data), for `check_outputs`."""
    folder = under(results_dir, experiment)
    existing = sorted(p for p in folder.iterdir() if p.name.endswith(REPORT_ENDINGS)) if folder.is_dir() else []
    return list(dict.fromkeys([*(folder / name for name in REPORT_FILES), *existing]))


def under(root: str | Path, *parts: str) -> Path:
    """`root` joined with `parts`, refused unless it resolves strictly inside `root`."""
    path = Path(root).joinpath(*parts)
    base, resolved = Path(root).resolve(), path.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise StatetrackError(f"{path} resolves to {resolved}, outside the folder {root}; nothing is written there")
    return path


@contextmanager
def open_for_write(path: str | Path, binary: bool = False, newline: str | None = None):
    """`path` opened for writing (truncated), as a context manager, refusing in one line a symbolic
    link at its name (`O_NOFOLLOW`: the check and the open are one step, so a link planted in
    between is refused too) and anything that is not a regular file: a FIFO (opened without
    blocking, so no reader is waited for) or a device. A failed write (a full disk) removes the
    partial file and is an OSError naming `path`. Writers call it on paths `under` placed inside
    their folder."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise StatetrackError(f"{path} is a symbolic link; statetrack writes no file through a link") from None
        if error.errno == errno.ENXIO:
            raise StatetrackError(f"{path} is a FIFO, not a regular file; nothing is written to it") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a file"
            )
            raise StatetrackError(f"{path} is {kind}, not a regular file; nothing is written to it")
        os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8", newline=newline)
    except BaseException:
        os.close(fd)
        raise
    try:
        with file:
            yield file
    except OSError as error:  # the part written is no file of ours: removed, not left truncated
        with suppress(OSError):
            os.unlink(path)
        if error.filename is None and error.errno is not None:  # write() and close() name no file
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through `open_for_write`."""
    with open_for_write(path) as f:
        f.write(text)
    return Path(path)


@contextmanager
def replace_atomically(path: str | Path, binary: bool = False):
    """A file opened for writing (`open_for_write`) beside `path`, as a context manager, renamed onto
    `path` in one step when the block ends without an error: a reader sees the old file or the whole
    new one, never a part, whatever stops the writer (Ctrl-C, a kill, a full disk). An error removes
    the partial file and leaves `path` as it was. A link at `path` is replaced, not written through."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open_for_write(partial, binary=binary) as f:
            yield f
        os.replace(partial, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(partial)
        raise


def write_text_atomically(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through `replace_atomically`."""
    with replace_atomically(path) as f:
        f.write(text)
    return Path(path)


def store_file(results_dir: str | Path) -> Path:
    """The results store of a results folder: RESULTS_DIR/statetrack.db."""
    return Path(results_dir) / "statetrack.db"


SNAPSHOTS = "experiments/snapshots"  # the committed snapshots' one home, relative to the package


def snapshot_folder() -> Path:
    """Where the committed snapshots of measured experiments live, inside the package so that an
    installed package reads them too: every shipped experiment's (the book's) and the state
    table's, read by the book, the table and the runner's revision check alike."""
    return Path(str(resources.files("statetrack"))) / SNAPSHOTS


def snapshot_file(experiment: str, scale: str = "quick") -> Path:
    """The committed snapshot of `experiment` at `scale`: SNAPSHOTS/<experiment>.<scale>.json."""
    return snapshot_folder() / f"{experiment}.{scale}.json"
