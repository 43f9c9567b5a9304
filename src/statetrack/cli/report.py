"""`statetrack report EXPERIMENT | --all`: an experiment's report (Markdown and HTML, tables, plots,
verdicts) from the store, or every one's and the index."""

from __future__ import annotations

from pathlib import Path

from statetrack.cli.common import STORE, Arg, Command, known_experiment, open_store
from statetrack.errors import StatetrackError
from statetrack.paths import check_name, check_outputs, report_outputs


def cmd_report(args) -> int:
    from statetrack.experiments.spec import spec_now
    from statetrack.results.plots import check_formats
    from statetrack.results.report import write_index, write_report
    from statetrack.results.scoring import score_store

    if not args.all and not args.experiment:
        raise StatetrackError("report needs an EXPERIMENT name or --all")
    if args.all and args.experiment:
        raise StatetrackError(f"report takes an EXPERIMENT name or --all, not both (got {args.experiment!r} and --all)")
    if args.experiment is not None:
        check_name(args.experiment)
    formats = check_formats(args.format)
    store = open_store(args)
    names = store.experiments() if args.all else [args.experiment]
    for name in names:  # every file the reports and the index write, before the first is written
        check_outputs(report_outputs(args.results_dir, name), "report file")
    if args.all:
        check_outputs([Path(args.results_dir) / "index.md", Path(args.results_dir) / "index.html"], "index file")
    scored = {}  # each experiment scored once, with its spec's `paper:` and `selection:` as they are now
    for name in names:
        known_experiment(store, name)
        plan = store.plan(name)
        if args.all and plan is None:
            continue  # a damaged plan (the store's warning names it) or none: a row of the index says so
        now = spec_now(name, plan.scale if plan else None) or {}
        scored[name] = score_store(
            store, name, plan=plan, paper=now.get("paper"), selection=now.get("selection"), run_data=True
        )
        print(write_report(scored[name], args.results_dir, formats) / "report.html")
    if args.all:
        print(write_index(store, args.results_dir, scored))
    return 0


REPORT = Command(
    "report",
    "write results/EXPERIMENT/report.{md,html}: tables, plots, the paper's figures and claim verdicts",
    cmd_report,
    (
        STORE,
        Arg("experiment", nargs="?", metavar="EXPERIMENT"),
        Arg(
            "--all",
            action="store_true",
            help="every experiment in the store, and results/index.html linking them with their verdicts",
        ),
        Arg(
            "--format",
            default="png",
            metavar="FORMATS",
            help="the plots' formats, comma-separated: png, svg, pdf (default: png; the HTML report embeds the PNG)",
        ),
    ),
)
