"""`statetrack book`: the book (a page per experiment, docs/claims.md, the README's result blocks)
written from the committed snapshots, or checked against them: the book's part of `statetrack docs`."""

from __future__ import annotations

from statetrack.cli.common import BOOK, Arg, Command
from statetrack.cli.docs import report_written
from statetrack.errors import StatetrackError


def cmd_book(args) -> int:
    """Write the book from the committed snapshots; --check: exit 1 when a page differs from its generation."""
    from statetrack.paths import snapshot_folder
    from statetrack.results.book import read_snapshots, write_book

    if not read_snapshots():
        raise StatetrackError(
            f"no snapshots in {snapshot_folder()} to write the book from; `statetrack reproduce` measures them"
        )
    return report_written(write_book(args.book_dir, args.readme, check=args.check), args.check)


BOOK_COMMAND = Command(
    "book",
    "write the book's pages (docs/experiments/, docs/claims.md) and the README's result blocks from the snapshots",
    cmd_book,
    (BOOK, Arg("--check", action="store_true", help="write nothing; exit 1 when a page differs from its generation")),
)
