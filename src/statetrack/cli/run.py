"""`statetrack run EXPERIMENT`: train and evaluate every run of an experiment, then report; `--dry-run`
prints the plan (the table command's dry run too)."""

from __future__ import annotations

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


def cmd_run(args) -> int:
    from statetrack.experiments.runner import check_options
    from statetrack.experiments.spec import resolve
    from statetrack.results.report import index_verdicts
    from statetrack.results.selection import describe_selection
    from statetrack.results.tables import table_rows, text_table

    options = run_options(args)
    check_options(options)  # a backend option that cannot work fails before the spec's modules are imported
    experiment = resolve(args.experiment, args.scale, args.overrides, args.name, command_imports(args))
    if args.dry_run:
        return dry_run(args, experiment)
    scored, out = run_and_report(args, experiment, options)
    print()
    print(text_table(*table_rows(scored.summary, "headline")))
    print(f"({describe_selection(scored.selection)})")
    verdicts = index_verdicts(scored)
    if verdicts != "-":
        assert scored.paper is not None  # claims come from the paper section
        print(f"\ndid it reproduce? {verdicts} (the claims of {scored.paper['source']}, in the report)")
    print(f"\nreport: {out / 'report.html'}  (and report.md)")
    if args.overrides and args.name is None:
        print(
            f"experiment {experiment.name}: named after the overrides (--name NAME chooses the name); "
            f"the results of {args.experiment} itself are left as they were"
        )
    # status 1 for errors only: a run that diverged is done (the outcome of its setting, scored as chance)
    return 1 if any(r["status"] == "failed" for r in scored.missing) else 0


def dry_run(args, experiment, resolved: bool = True) -> int:
    """`run --dry-run` (and `reproduce --dry-run`, per experiment, without the spec): the resolved
    spec (with `resolved`) and every planned run with its training cost and its status in the store
    (when there is one), and nothing trained or written."""
    import yaml

    from statetrack.experiments.runner import training_cost
    from statetrack.results.tables import text_table

    spec, runs = experiment.spec, experiment.runs
    status = {}
    if store_path(args).is_file():
        status = {r["id"]: r["status"] for r in open_store(args, read_only=True).runs(experiment.name)}
    if resolved:
        print(
            f"# experiment {experiment.name} at the {args.scale} scale, resolved "
            "(overrides applied, defaults filled in)"
        )
        first = {key: spec[key] for key in ("name", "scale") if key in spec}
        print(yaml.safe_dump({**first, **spec}, sort_keys=False, width=120).rstrip())
    header = ["run", "model", "task", "lr", "seed", "steps", "train lengths", "eval lengths", "GFLOP", "status"]
    costs = [training_cost(run) for run in runs]
    body = [_planned_row(run, cost, status.get(run.id, "to run")) for run, cost in zip(runs, costs)]
    todo = [c for run, c in zip(runs, costs) if status.get(run.id) != "done"]
    print(
        f"\n# {len(runs)} planned runs, {len(todo)} to train; "
        "training arithmetic (forward + backward, every step's batch): "
        f"{sum(todo) / 1e12:,.1f} TFLOP to train, {sum(costs) / 1e12:,.1f} TFLOP in all"
    )
    print(text_table(header, body))
    if resolved:
        print("\n(dry run: nothing trained, nothing written)")
    return 0


def _planned_row(run, cost: float, status: str) -> list[str]:
    """One planned run's row of the dry run's table."""
    from statetrack.experiments.spec import train_lengths_text

    entry = run.plan_entry()
    lengths = entry["lengths"]
    shown = ", ".join(map(str, lengths)) if len(lengths) <= 6 else f"{lengths[0]}..{lengths[-1]} ({len(lengths)})"
    return [
        run.id,
        run.model_name,
        run.task_name,
        f"{run.lr:g}",
        str(run.seed),
        str(entry["steps"]),
        train_lengths_text(run.train),
        shown,
        f"{cost / 1e9:,.0f}",
        status,
    ]


RUN = Command(
    "run",
    "train and evaluate every run of an experiment, then report",
    cmd_run,
    (
        STORE,
        Arg(
            "experiment",
            metavar="EXPERIMENT|FILE.yaml",
            help="a shipped experiment (see `statetrack experiments`) or a spec file",
        ),
        RUN_OPTIONS,
        Arg(
            "--name",
            default=None,
            metavar="NAME",
            help="the experiment's name in the store and the results folder (default: the spec's; with overrides, "
            "the spec's and the overrides', e.g. demo_seeds-0_train.steps-200)",
        ),
        Arg(
            "--dry-run",
            action="store_true",
            help="print the resolved spec and the planned runs with their training cost and status; "
            "train and write nothing",
        ),
        Arg(
            "overrides",
            nargs="*",
            default=[],
            metavar="key=value",
            help="override spec entries, e.g. train.steps=200 'seeds=[0]'",
        ),
    ),
)
