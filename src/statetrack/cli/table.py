"""`statetrack table`: the state-tracking table, committed or measured (statetrack.results.statetable)."""

from __future__ import annotations

import time
from pathlib import Path

from statetrack.cli.common import (
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
from statetrack.cli.docs import report_written
from statetrack.cli.run import dry_run
from statetrack.errors import StatetrackError


def cmd_table(args) -> int:
    """`statetrack table`: the committed state-tracking table; `--models`: a user's rows trained under
    the table's protocol (pilot, three seeds, a larger budget where undecided) and rendered beside the
    zoo's; `--zoo`: the whole table measured again (its snapshots rewritten); `--write` / `--check`:
    docs/state-table.md and its picture from the committed snapshots."""
    from statetrack.results import statetable as st

    if args.scale != "quick":
        raise StatetrackError(f"table: the table has one scale, quick (its spec sets the budget), not {args.scale}")
    if args.write or args.check:
        return _write_page(args)
    if args.full_budget:
        return _full_budget(args)
    if not args.models and not args.zoo:
        cells, titles = st.committed_cells()
        print(st.table_text(cells, titles))
        print(st.LEGEND)
        return 0
    return _measure(args)


def _write_page(args) -> int:
    """`table --write` / `--check`: docs/state-table.md and its picture from the committed snapshots."""
    from statetrack.results import statetable as st

    return report_written(st.write_page(check=args.check), args.check)


def _full_budget(args) -> int:
    """`table --full-budget`: every committed cell where a run stopped early, trained again at its full
    budget, and the cells whose reading changes."""
    from statetrack.results import statetable as st
    from statetrack.results.book import record_part

    experiment = st.full_budget_experiment()
    if args.dry_run:
        return dry_run(args, experiment)
    started = time.time()
    try:
        scored, _ = run_and_report(args, experiment, run_options(args))
    finally:
        record_part(open_store(args), experiment.name, started, args.workers, path=st.snapshot_file(st.FULL_BUDGET))
    committed = st.cells(st.scored_snapshot(st.load_snapshot(st.snapshot_file())))
    titles = st.titles_of(scored)
    again = st.cells(scored)
    changed = st.changed_cells(committed, again)
    print(
        f"\n{len(again)} cells where a run stopped early, trained again at the full budget: "
        f"{len(changed)} read otherwise"
    )
    for before, after in changed:
        print(f"  {st.cell_key(before, titles)}: stopped {before.text}, full budget {after.text}")
    return 0


def _measure(args) -> int:
    """`table --models` / `--zoo`: the pilot, the table's seeds at the rate(s) it picks, then the
    undecided cells at the larger budget, rendered beside the committed rows (`--zoo`: the committed
    table rewritten)."""
    from statetrack.experiments.runner import check_options
    from statetrack.results import statetable as st
    from statetrack.results.book import record_part
    from statetrack.results.scoring import score_store

    if args.zoo and args.models:
        raise StatetrackError("table: --zoo measures the zoo's table, --models trains your rows beside it: give one")
    options = run_options(args)
    check_options(options)
    imports = command_imports(args)
    models = st.parse_models(args.models) if args.models else None
    if args.zoo and args.overrides:
        raise StatetrackError("table --zoo measures the table as its spec sets it: no overrides")
    pilot = st.pilot_experiment(models, imports, args.overrides)
    if args.dry_run:
        print(
            "# step 1 of 3: the pilot (seed 0 at each rate); step 2 trains three seeds at the rate(s) it picks; "
            f"step 3 trains every cell step 2 leaves undecided again with {st.GROWTH}x the steps"
        )
        return dry_run(args, pilot)
    started = time.time()

    def record(experiment, path, started):
        if args.zoo and store_path(args).exists():
            record_part(open_store(args), experiment, started, args.workers, path=path)

    try:
        run_and_report(args, pilot, options)
    finally:
        record(pilot.name, st.snapshot_file(st.PILOT_NAME), started)
    pilot_scored = score_store(open_store(args), pilot.name)
    if _stopped(pilot_scored, "the pilot (step 1 of 3)"):
        return 0
    name = st.TABLE if args.zoo else st.user_table_name(models or [], args.overrides)
    table = st.table_experiment(pilot_scored, pilot, name, imports, args.overrides)
    started = time.time()
    try:
        scored, _ = run_and_report(args, table, options)
    finally:
        record(table.name, st.snapshot_file(), started)
    if _stopped(scored, "the table's seeds (step 2 of 3)"):
        return 0
    mine, failed = _larger_budget(args, scored, table, options, record)
    if failed is None:
        return 0
    return _show_measured(args, scored, mine, failed)


def _stopped(scored, step: str) -> bool:
    """Whether a step left runs untrained (a --stop-after deadline, an interrupt): the next step
    reads this one's results, so it waits for them; the same command resumes. A failed run is final
    and does not hold the next step back."""
    left = [r for r in scored.missing if r["status"] != "failed"]
    if left:
        print(f"\n{step} stopped with {len(left)} runs to train: the same command resumes it, then goes on")
    return bool(left)


def _larger_budget(args, scored, table, options, record) -> tuple[list, list | None]:
    """Step 3: every cell of the measured table that is undecided trained again with GROWTH times
    the steps, whatever theory predicts; returns (the cells, each trained again read at the larger
    budget, the failed runs of both steps; None where the step stopped before its end)."""
    from statetrack.results import statetable as st

    mine = st.cells(scored)
    failed = [r for r in scored.missing if r["status"] == "failed"]
    larger = st.larger_budget_experiment(scored, st.larger_budget_name(table.name), table.imports)
    if larger is None:
        return mine, failed
    started = time.time()
    try:
        grown, _ = run_and_report(args, larger, options)
    finally:
        record(larger.name, st.snapshot_file(st.LARGER_BUDGET), started)
    if _stopped(grown, "the larger budget (step 3 of 3)"):
        return mine, None
    failed += [r for r in grown.missing if r["status"] == "failed"]
    return st.read_larger_budget(mine, st.cells(grown)), failed


def _show_measured(args, scored, mine: list, failed: list) -> int:
    """The measured rows beside the committed ones (`--zoo`: the measured table, its page rewritten),
    written under RESULTS_DIR/table and printed."""
    from statetrack.results import statetable as st

    titles: dict[str, str]
    if args.zoo:
        for path in st.write_page():
            print(f"wrote {path}")
        cells, titles = mine, {}
    else:
        cells, titles = st.committed_cells() if st.snapshot_file().exists() else ([], {})
        cells = cells + st.told_apart(mine, {(c.model, c.layers) for c in cells})
    titles = {**titles, **st.titles_of(scored)}  # a user's own tasks too
    out = st.write_user_table(cells, titles, Path(args.results_dir) / "table")
    print()
    print(st.table_text(cells, titles))
    print(st.LEGEND)
    print(f"\ntable: {out / 'state-table.md'} (and state-table.png)")
    return 1 if failed else 0


TABLE_COMMAND = Command(
    "table",
    "the state-tracking table: every model on Z2, Z3, Z5, S3, A5 and a random automaton, theory beside each "
    "cell; --models: your model's row beside the zoo's",
    cmd_table,
    (
        STORE,
        Arg(
            "--models",
            nargs="+",
            default=None,
            metavar="MODEL",
            help="train these models under the table's protocol (a learning-rate pilot on the training lengths, three "
            "seeds, then a larger budget for every undecided cell) and show their rows beside the committed ones: a "
            "registered name or preset, or a YAML mapping such as '{name: deltanet, eig_range: \"[-1,1]\"}' "
            "(register your own with --import FILE.py)",
        ),
        Arg("--zoo", action="store_true", help="measure the whole committed table again and rewrite its snapshots"),
        Arg(
            "--full-budget",
            action="store_true",
            help="train every committed cell where a run stopped early again at its full budget (no early stop) "
            "and print the cells whose reading changes",
        ),
        Arg("--write", action="store_true", help="write docs/state-table.md and its picture from the snapshots"),
        Arg("--check", action="store_true", help="write nothing; exit 1 when the page or its picture differs"),
        Arg("--dry-run", action="store_true", help="print the pilot's planned runs; train and write nothing"),
        RUN_OPTIONS,
        Arg(
            "overrides",
            nargs="*",
            default=[],
            metavar="key=value",
            help="with --models: change the table's settings, e.g. train.steps=200 to try the command (the rows "
            "are then not under the table's protocol); give them before --models, which takes every word after it",
        ),
    ),
)
