"""`statetrack book`: the book (docs/reproductions.md, docs/claims.md, the README's result blocks)
written from the committed snapshots, or checked against them."""

from __future__ import annotations

import sys
from pathlib import Path

from statetrack.cli.common import BOOK, Arg, Command
from statetrack.errors import StatetrackError


def cmd_book(args) -> int:
    """Write the book from the committed snapshots; --check: exit 1 when a page differs from its generation."""
    from statetrack.results.book import read_snapshots, write_book

    if not read_snapshots(args.book_dir):
        raise StatetrackError(
            f"no snapshots under {Path(args.book_dir) / 'results'} to write the book from; "
            "`statetrack reproduce` measures them (or pass --book-dir DIR of a checkout's docs)"
        )
    differ = write_book(args.book_dir, args.readme, check=args.check)
    for path in differ:
        print(f"{'differs from its generation' if args.check else 'wrote'}: {path}")
    if args.check and differ:
        print("run `statetrack book` to regenerate", file=sys.stderr)
        return 1
    return 0


BOOK_COMMAND = Command(
    "book",
    "write docs/reproductions.md, docs/claims.md and the README's result blocks from the snapshots",
    cmd_book,
    (BOOK, Arg("--check", action="store_true", help="write nothing; exit 1 when a page differs from its generation")),
)
