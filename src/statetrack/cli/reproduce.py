"""`statetrack reproduce [EXPERIMENT ...]`: every shipped experiment (or those named; with
`--headlines`, the works' headline cells at the paper scale) into one store, then the book."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from statetrack.cli.common import (
    BOOK,
    RUN_OPTIONS,
    STORE,
    Arg,
    Command,
    command_imports,
    open_store,
    run_and_report,
    run_options,
    store_path,
)
from statetrack.errors import StatetrackError


def cmd_reproduce(args) -> int:
    """Run the shipped experiments (or those named; with --headlines, their headline cells) into one
    store, then write each one's report and snapshot and the book (statetrack.results.book).
    Resumable like `run`: finished runs are skipped."""
    import time

    from statetrack.experiments.backends import default_workers
    from statetrack.experiments.runner import check_options
    from statetrack.results.book import record_part, write_book

    options = run_options(args)
    check_options(options)
    planned = planned_experiments(args)
    if args.dry_run:
        from statetrack.cli.run import dry_run

        last = list({name: (title, experiment) for name, title, experiment in planned}.values())  # a cell's last round
        for number, (title, experiment) in enumerate(last, 1):
            print(f"== [{number}/{len(last)}] {title}")
            dry_run(args, experiment(), resolved=False)
            print()
        print("(dry run: nothing trained, nothing written)")
        return 0
    workers = args.workers or (default_workers(args.device) if args.backend == "local" else None)
    failed = 0
    for number, (_, title, experiment) in enumerate(planned, 1):
        if args.headlines and options.deadline is not None and time.time() >= options.deadline:
            print(f"past the deadline (--stop-after) before {title}: the same command resumes from there")
            break
        print(f"== [{number}/{len(planned)}] {title}")
        start = time.time()
        resolved = experiment()

        def record(
            name=resolved.name, start=start
        ):  # an interrupted part's time counts too: its finished runs are stored
            if store_path(args).exists():
                record_part(open_store(args), name, start, workers)

        scored, _ = run_and_report(args, resolved, options, after=record)
        failed += sum(1 for r in scored.missing if r["status"] == "failed")
    changed = write_book(args.book_dir, args.readme)
    for path in changed:
        print(f"wrote {path}")
    print(f"book: {Path(args.book_dir) / 'experiments'} (every claim: {Path(args.book_dir) / 'claims.md'})")
    if failed:
        print(
            f"{failed} runs failed with an error (in the store and the reports); re-run the same command to retry them"
        )
    return 1 if failed else 0


def planned_experiments(args) -> list[tuple[str, str, Callable]]:
    """(its name, a title, a function that resolves the experiment) of each experiment `reproduce` trains, in
    order: every shipped one (or those named) at --scale; with --headlines, the headline cells
    (statetrack.experiments.headlines), their seeds in rounds, each cell whose paper-scale snapshot
    holds more than the cell left as it is."""
    import json

    from statetrack.experiments.headlines import cell_overrides, cell_rounds, headlines, held_seeds
    from statetrack.experiments.spec import resolve, shipped_specs
    from statetrack.paths import snapshot_file

    imports = command_imports(args)
    known = shipped_specs()
    unknown_names = [n for n in args.experiments if n not in known]
    if unknown_names:
        raise StatetrackError(
            f"reproduce: unknown experiment {unknown_names[0]!r}; expected shipped experiments: {', '.join(known)}"
        )
    names = list(dict.fromkeys(args.experiments))
    if not args.headlines:
        return [
            (
                name,
                f"{name} ({args.scale} scale)",
                lambda name=name: resolve(name, args.scale, [], name=name, imports=imports),
            )
            for name in names or known
        ]
    if args.scale != "paper":
        raise StatetrackError(
            f"reproduce --headlines: the headline cells are of the paper scale; give --scale paper, not {args.scale!r}"
        )
    cells, held = headlines(names), {}
    for name, headline in list(cells.items()):
        path = snapshot_file(name, "paper")
        if path.exists():
            planned = held_seeds(name, headline, json.loads(path.read_text())["plan"])
            if planned is None:
                print(f"{name}: its paper-scale snapshot holds more than its headline cell; left as it is")
                del cells[name]
                continue
            held[name] = planned
    out = []
    for name, seeds in cell_rounds(cells, held):
        headline = cells[name]
        fit = " (the largest scale that fits)" if headline["largest_fit"] else ""
        title = f"{name}: headline cell {headline['model']}{fit}, seeds {', '.join(map(str, seeds))}"
        overrides = cell_overrides(name, headline, seeds)
        out.append((name, title, lambda name=name, o=overrides: resolve(name, "paper", o, name=name, imports=imports)))
    return out


REPRODUCE = Command(
    "reproduce",
    "run every shipped experiment (or those named) into one store, then write the book",
    cmd_reproduce,
    (
        STORE,
        Arg(
            "experiments",
            nargs="*",
            default=[],
            metavar="EXPERIMENT",
            help="shipped experiments (default: all of them)",
        ),
        RUN_OPTIONS,
        Arg(
            "--headlines",
            action="store_true",
            help="with --scale paper: the headline cell of each work (each experiment's `paper.headline`: one model "
            "on one task, every seed, the seeds in rounds over the cells), or of the experiments named",
        ),
        Arg(
            "--dry-run",
            action="store_true",
            help="print each experiment's planned runs with their training cost and status; train and write nothing",
        ),
        BOOK,
    ),
)
