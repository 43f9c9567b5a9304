"""`statetrack experiments`: the shipped experiments with their planned runs, last measured wall time
and description."""

from __future__ import annotations

from pathlib import Path

from statetrack.cli.common import Arg, Command, print_json
from statetrack.errors import StatetrackError
from statetrack.schema import SCALES


def cmd_experiments(args) -> int:
    import shutil

    from statetrack.results.book import duration
    from statetrack.results.overview import checkout_docs, experiments_overview
    from statetrack.results.tables import text_table

    if args.book_dir is not None and not Path(args.book_dir).is_dir():
        what = "is not a folder" if Path(args.book_dir).exists() else "does not exist"
        raise StatetrackError(
            f"experiments: --book-dir {args.book_dir} {what}; expected the folder of the book, whose results/ "
            "holds the snapshots (e.g. docs)"
        )
    book_dir = args.book_dir if args.book_dir is not None else checkout_docs()
    rows = experiments_overview(book_dir, args.scale)
    if args.json:
        return print_json(rows)
    body = [
        [
            r["name"],
            str(r["planned_runs"]),
            "-" if r["wall_seconds"] is None else duration(r["wall_seconds"]),
            r["description"],
        ]
        for r in rows
    ]
    width = shutil.get_terminal_size().columns
    for line in text_table(["experiment", "runs", "last wall time", "description"], body).splitlines():
        print(line if len(line) <= width else line[: width - 1] + "…")
    where = (
        f"snapshots in {Path(book_dir) / 'results'}"
        if book_dir is not None
        else "none here: statetrack is not run from a checkout"
    )
    print(
        f"\nruns: planned at the {args.scale} scale. "
        f"last wall time: the committed measurement at that scale ({where}); "
        f"- where there is none. Full descriptions: --json"
    )
    return 0


EXPERIMENTS = Command(
    "experiments",
    "list the shipped experiments: planned runs, last measured wall time, description",
    cmd_experiments,
    (
        Arg("--scale", default="quick", choices=SCALES, help="the scale of the runs and wall times (default: quick)"),
        Arg(
            "--book-dir",
            default=None,
            metavar="DIR",
            help="where the snapshots of measured experiments are (DIR/results/; default: the docs folder of the "
            "checkout statetrack runs from, if it runs from one)",
        ),
        Arg(
            "--json",
            action="store_true",
            help="a JSON list, one object per experiment: name, description, scale, "
            "planned_runs, wall_seconds (null where none was measured)",
        ),
    ),
)
