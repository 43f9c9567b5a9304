"""`statetrack docs`: every generated doc written from the committed data, or checked against it
(statetrack.docs: the book's pages and claims, the catalogues, the state table's page and picture,
the performance tables and the README's blocks). `book` and `table --write/--check` write or check
their own part through the same code and report it the same way (`report_written`)."""

from __future__ import annotations

import sys
from pathlib import Path

from statetrack.cli.common import Arg, Command, OneOf
from statetrack.errors import StatetrackError


def report_written(differ: list[Path], check: bool) -> int:
    """Print each file written or, with `check`, each that differs from its generation; 1 when one differs."""
    for path in differ:
        print(f"{'differs from its generation' if check else 'wrote'}: {path}")
    if check and differ:
        print("regenerate with `statetrack docs --write` from the repository root", file=sys.stderr)
        return 1
    return 0


def cmd_docs(args) -> int:
    from statetrack.docs import write_docs

    if not (args.write or args.check):
        raise StatetrackError("docs: give --write (write every generated doc) or --check (exit 1 where one differs)")
    return report_written(write_docs(".", check=args.check), args.check)


DOCS = Command(
    "docs",
    "write every generated doc from the committed data (the book's pages and claims, the models and tasks "
    "catalogues, the state table's page and picture, the performance tables, the README's blocks); run it "
    "from the repository root",
    cmd_docs,
    (
        OneOf(
            (
                Arg("--write", action="store_true", help="write every generated doc that differs from its generation"),
                Arg("--check", action="store_true", help="write nothing; exit 1 when a generated doc differs"),
            )
        ),
    ),
)
