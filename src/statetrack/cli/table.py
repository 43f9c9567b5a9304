"""`statetrack table`: the state-tracking table, committed or measured (statetrack.results.statetable).

What a measurement writes stays in the results folder until it is whole: `--zoo` and `--full-budget`
record their snapshots under RESULTS_DIR/table/ as they go (an interrupted run resumes from there),
and only a measurement whose every run is done replaces the committed snapshots beside the table's
spec, each file in one step. The page (docs/state-table.md and its picture) is written only in the
statetrack checkout whose package runs. Options that contradict each other, and every output path,
are checked before anything trains.
"""

from __future__ import annotations

import time

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
from statetrack.paths import check_outputs, report_outputs, under

USER_FILES = ("state-table.md", "state-table.png", "cells.json")  # RESULTS_DIR/table/, `write_user_table`


def cmd_table(args) -> int:
    """`statetrack table`: the committed state-tracking table; `--models`: a user's rows trained under
    the table's protocol (pilot, three seeds, a larger budget where undecided) and rendered beside the
    zoo's; `--zoo`: the whole table measured again (its snapshots replaced once complete); `--write` /
    `--check`: docs/state-table.md and its picture from the committed snapshots."""
    from statetrack.results import statetable as st

    if args.scale != "quick":
        raise StatetrackError(f"table: the table has one scale, quick (its spec sets the budget), not {args.scale}")
    _refuse_conflicts(args)
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


def _refuse_conflicts(args) -> None:
    """Options that contradict each other, or that the command would ignore, refused in one line."""
    from statetrack.experiments.spec import parse_override

    writes = [flag for flag, on in (("--write", args.write), ("--check", args.check)) if on]
    measures = [
        flag for flag, on in (("--models", args.models), ("--zoo", args.zoo), ("--full-budget", args.full_budget)) if on
    ]
    if len(writes) > 1:
        raise StatetrackError("table: --write writes the page, --check compares it and writes nothing: give one")
    if writes and (measures or args.overrides or args.dry_run):
        other = (measures or (["--dry-run"] if args.dry_run else [args.overrides[0]]))[0]
        raise StatetrackError(
            f"table {writes[0]} draws the page from the committed snapshots and trains nothing; drop {other}"
        )
    if len(measures) > 1:
        raise StatetrackError(
            f"table: {measures[0]} and {measures[1]} measure different things ({_MEASURES[measures[0]]}; "
            f"{_MEASURES[measures[1]]}): give one"
        )
    if args.overrides and measures and not args.models:
        raise StatetrackError(
            f"table {measures[0]} measures the table as its spec sets it: {args.overrides[0]} would change it; drop it"
        )
    if args.overrides and not args.models:
        raise StatetrackError(
            f"table: {args.overrides[0]} changes the settings of the rows --models trains; the committed table is "
            "shown as it was measured (give it before --models, which takes every word after it)"
        )
    for override in args.overrides:
        key = parse_override(override)[0][0]
        if key in ("lrs", "models"):
            raise StatetrackError(f"table: {override} is not yours to set here; {_CHOSEN[key]}")


_MEASURES = {
    "--models": "your rows beside the committed ones",
    "--zoo": "the whole committed table again",
    "--full-budget": "the committed cells where a run stopped early again, with no stop",
}
_CHOSEN = {
    "lrs": "the pilot tries its rates and the table trains the best (the protocol), so drop it",
    "models": "give the models with --models",
}


def _write_page(args) -> int:
    """`table --write` / `--check`: docs/state-table.md and its picture from the committed snapshots,
    in the statetrack checkout whose package runs (`statetable.page_root`), none through a link out of it."""
    from statetrack.results import statetable as st

    root = st.page_root()
    if args.write:
        check_outputs([under(root, *st.PAGE.parts), under(root, *st.PICTURE.parts)], "page")
    return report_written(st.write_page(check=args.check, root=root), args.check)


def _check_outputs(args, experiments: list[str], snapshots: list[str]) -> None:
    """Every file the command writes, checked before anything trains: the reports of `experiments`,
    RESULTS_DIR/table/ (the user's table and the measured `snapshots`, no link out of the results
    folder), and where `snapshots` are installed (the committed ones beside the table's spec)."""
    from statetrack.results import statetable as st

    for name in experiments:
        check_outputs(report_outputs(args.results_dir, name), "report file")
    check_outputs([under(args.results_dir, "table", name) for name in USER_FILES], "table file")
    check_outputs([st.measured_snapshot_file(args.results_dir, name) for name in snapshots], "snapshot")
    check_outputs([st.snapshot_file(name) for name in snapshots], "committed snapshot")


def _full_budget(args) -> int:
    """`table --full-budget`: every committed cell where a run stopped early, trained again at its full
    budget, and the cells whose reading changes; its snapshot replaces the committed one once whole."""
    from statetrack.results import statetable as st
    from statetrack.results.book import record_part

    experiment = st.full_budget_experiment()
    if args.dry_run:
        return dry_run(args, experiment)
    _check_outputs(args, [experiment.name], [st.FULL_BUDGET])
    started = time.time()
    try:
        scored, _ = run_and_report(args, experiment, run_options(args))
    finally:
        _record(args, experiment.name, record_part, started)
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
    return _install(args, [st.FULL_BUDGET])


def _record(args, experiment: str, record_part, started: float) -> None:
    """The measured snapshot of `experiment` in the results folder, with one more part (its wall time).
    The first part in a results folder starts from the committed snapshot's, so that a measurement
    resumed from a slice of it counts the earlier sessions' time (`book.write_snapshot` keeps the
    parts of the runs its plan still has, and drops those of a measurement it replaces)."""
    from statetrack.paths import replace_atomically
    from statetrack.results import statetable as st

    if not store_path(args).exists():
        return
    path, committed = st.measured_snapshot_file(args.results_dir, experiment), st.snapshot_file(experiment)
    if not path.exists() and committed.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with replace_atomically(path, binary=True) as f:
            f.write(committed.read_bytes())
    record_part(open_store(args), experiment, started, args.workers, path=path)


def _install(args, names: list[str], page: bool = False, drop: tuple[str, ...] = ()) -> int:
    """The measured snapshots `names` installed as the committed ones when every run of them is done
    (the committed `drop`, read with the table they replace, removed; then, with `page`, the page
    rewritten where the command runs in the checkout); else they are left in the results folder,
    with a line saying what is missing. Status 1 when not installed."""
    from statetrack.results import statetable as st

    left = {name: st.not_done(st.load_snapshot(st.measured_snapshot_file(args.results_dir, name))) for name in names}
    left = {name: n for name, n in left.items() if n}
    if left:
        name, n = next(iter(left.items()))
        print(
            f"\nthe committed snapshots are left as they were: {n} runs of {name} are not done (failed or not "
            f"trained; {st.measured_snapshot_file(args.results_dir, name)} has what is); run the same command again"
        )
        return 1
    for path in st.install_snapshots(args.results_dir, names, drop):
        print(f"installed: {path}")
    if page:
        try:
            root = st.page_root()
        except StatetrackError as error:
            print(f"the page is not rewritten: {error}")
            return 0
        for path in st.write_page(root=root):
            print(f"wrote {path}")
    return 0


def _measure(args) -> int:
    """`table --models` / `--zoo`: the pilot, the table's seeds at the rate(s) it picks, then the
    undecided cells at the larger budget, rendered beside the committed rows (`--zoo`: the committed
    table replaced once every run of it is done)."""
    from statetrack.experiments.runner import check_options
    from statetrack.experiments.spec import load_spec
    from statetrack.results import statetable as st
    from statetrack.results.book import record_part
    from statetrack.results.scoring import score_store

    options = run_options(args)
    check_options(options)
    imports = command_imports(args)
    models = st.parse_models(args.models) if args.models else None
    pilot = st.pilot_experiment(models, imports, args.overrides)
    load_spec(str(st.spec_file()), "quick", list(args.overrides))  # step 2's own settings (its seeds, say)
    if args.dry_run:
        print(
            "# step 1 of 3: the pilot (seed 0 at each rate); step 2 trains three seeds at the rate(s) it picks; "
            f"step 3 trains every cell step 2 leaves undecided again with {st.GROWTH}x the steps"
        )
        return dry_run(args, pilot)
    name = st.TABLE if args.zoo else st.user_table_name(models or [], args.overrides)
    snapshots = [st.PILOT_NAME, st.TABLE, st.LARGER_BUDGET] if args.zoo else []
    _check_outputs(args, [pilot.name, name, st.larger_budget_name(name)], snapshots)

    def record(experiment: str, started: float) -> None:
        if args.zoo:
            _record(args, experiment, record_part, started)

    started = time.time()
    try:
        run_and_report(args, pilot, options)
    finally:
        record(pilot.name, started)
    store = open_store(args)
    pilot_scored = score_store(store, pilot.name)
    if _stopped(pilot_scored, "the pilot (step 1 of 3)"):
        return 0
    _refuse_a_failed_pilot(pilot_scored)
    table = st.table_experiment(pilot_scored, pilot, name, imports, args.overrides, curves=store.curves)
    reused = st.reuse_pilot_runs(open_store(args, read_only=False), pilot, table)
    if reused:
        print(f"the table's seeds (step 2 of 3): {reused} runs are the pilot's (seed 0 at a cell's chosen rate)")
    started = time.time()
    try:
        scored, _ = run_and_report(args, table, options)
    finally:
        record(table.name, started)
    if _stopped(scored, "the table's seeds (step 2 of 3)"):
        return 0
    mine, failed, larger = _larger_budget(args, scored, table, options, record)
    if failed is None:
        return 0
    status = _show_measured(args, scored, mine, failed)
    if args.zoo:
        installed = [pilot.name, table.name, *([larger] if larger else [])]
        stale = tuple(n for n in (st.FULL_BUDGET, st.LARGER_BUDGET) if n not in installed)  # the replaced table's
        status = max(status, _install(args, installed, page=True, drop=stale))
    return status


def _stopped(scored, step: str) -> bool:
    """Whether a step left runs untrained (a --stop-after deadline, an interrupt): the next step
    reads this one's results, so it waits for them; the same command resumes. A failed run is final
    and does not hold the next step back."""
    left = [r for r in scored.missing if r["status"] != "failed"]
    if left:
        print(f"\n{step} stopped with {len(left)} runs to train: the same command resumes it, then goes on")
    return bool(left)


def _refuse_a_failed_pilot(pilot) -> None:
    """A model whose every pilot run failed has no rate to train at: one line naming the model and
    the first failure."""
    failed: dict[str, list[dict]] = {}
    for r in pilot.missing:
        if r["status"] == "failed":
            failed.setdefault(r["model"], []).append(r)
    for model, runs in failed.items():
        if len(runs) == sum(1 for p in pilot.plan.runs if p["model"] == model):
            error = (runs[0].get("error") or "no error recorded").strip().splitlines()[-1]
            raise StatetrackError(
                f"table: every pilot run of {model} failed ({len(runs)} runs), so no learning rate can be chosen; "
                f"the first: {error}"
            )


def _larger_budget(args, scored, table, options, record) -> tuple[list, list | None, str | None]:
    """Step 3: every cell of the measured table that is undecided trained again with GROWTH times
    the steps, whatever theory predicts; returns (the cells, each trained again read at the larger
    budget, the failed runs of both steps (None where the step stopped before its end), the larger
    budget's experiment or None where every cell was decided)."""
    from statetrack.results import statetable as st

    mine = st.cells(scored)
    failed = [r for r in scored.missing if r["status"] == "failed"]
    larger = st.larger_budget_experiment(scored, st.larger_budget_name(table.name), table.imports)
    if larger is None:
        return mine, failed, None
    started = time.time()
    try:
        grown, _ = run_and_report(args, larger, options)
    finally:
        record(larger.name, started)
    if _stopped(grown, "the larger budget (step 3 of 3)"):
        return mine, None, larger.name
    failed += [r for r in grown.missing if r["status"] == "failed"]
    return st.read_larger_budget(mine, st.cells(grown)), failed, larger.name


def _show_measured(args, scored, mine: list, failed: list) -> int:
    """The measured rows beside the committed ones (`--zoo`: the measured table alone), written under
    RESULTS_DIR/table and printed."""
    from statetrack.results import statetable as st

    titles: dict[str, str]
    if args.zoo:
        cells, titles = mine, {}
    else:
        cells, titles = st.committed_cells() if st.snapshot_file().exists() else ([], {})
        cells = cells + st.told_apart(mine, {(c.model, c.layers) for c in cells})
    titles = {**titles, **st.titles_of(scored)}  # a user's own tasks too
    out = st.write_user_table(cells, titles, under(args.results_dir, "table"))
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
        Arg(
            "--zoo",
            action="store_true",
            help="measure the whole committed table again (its snapshots kept under RESULTS_DIR/table/ as it goes, "
            "and installed beside the table's spec once every run is done)",
        ),
        Arg(
            "--full-budget",
            action="store_true",
            help="train every committed cell where a run stopped early again at its full budget (no early stop) "
            "and print the cells whose reading changes (its snapshot installed once every run is done)",
        ),
        Arg(
            "--write",
            action="store_true",
            help="write docs/state-table.md and its picture from the committed snapshots (in the statetrack "
            "checkout whose package runs)",
        ),
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
