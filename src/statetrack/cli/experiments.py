"""`statetrack experiments`: the shipped experiments with their planned runs, last measured wall time
and description."""

from __future__ import annotations

from statetrack.cli.common import Arg, Command, print_json
from statetrack.schema import SCALES


def cmd_experiments(args) -> int:
    import shutil

    from statetrack.results.book import duration
    from statetrack.results.overview import experiments_overview
    from statetrack.results.tables import text_table

    rows = experiments_overview(args.scale)
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
    print(
        f"\nruns: planned at the {args.scale} scale. "
        "last wall time: the committed measurement at that scale (its snapshot, in the package); "
        "- where there is none. Full descriptions: --json"
    )
    return 0


EXPERIMENTS = Command(
    "experiments",
    "list the shipped experiments: planned runs, last measured wall time, description",
    cmd_experiments,
    (
        Arg("--scale", default="quick", choices=SCALES, help="the scale of the runs and wall times (default: quick)"),
        Arg(
            "--json",
            action="store_true",
            help="a JSON list, one object per experiment: name, description, scale, "
            "planned_runs, wall_seconds (null where none was measured)",
        ),
    ),
)
