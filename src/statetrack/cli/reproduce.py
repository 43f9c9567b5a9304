"""`statetrack reproduce [EXPERIMENT ...]`: every shipped experiment (or those named) into one store,
then the book."""

from __future__ import annotations

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
    """Run the shipped experiments (or those named) into one store, then write each one's report and
    snapshot and the book (statetrack.results.book). Resumable like `run`: finished runs are skipped."""
    import time

    from statetrack.experiments.backends import default_workers
    from statetrack.experiments.runner import check_options
    from statetrack.experiments.spec import resolve, shipped_specs
    from statetrack.results.book import record_part, write_book

    known = shipped_specs()
    unknown_names = [n for n in args.experiments if n not in known]
    if unknown_names:
        raise StatetrackError(
            f"reproduce: unknown experiment {unknown_names[0]!r}; expected shipped experiments: {', '.join(known)}"
        )
    names = list(dict.fromkeys(args.experiments)) or list(known)
    workers = args.workers or (default_workers(args.device) if args.backend == "local" else None)
    options = run_options(args)
    check_options(options)
    failed = 0
    for number, name in enumerate(names, 1):
        print(f"== [{number}/{len(names)}] {name} ({args.scale} scale)")
        start = time.time()
        experiment = resolve(name, args.scale, [], name=name, imports=command_imports(args))

        def record(name=name, start=start):  # an interrupted part's time counts too: its finished runs are stored
            if store_path(args).exists():
                record_part(open_store(args), name, start, workers)

        scored, _ = run_and_report(args, experiment, options, after=record)
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
        BOOK,
    ),
)
