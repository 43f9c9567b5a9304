"""Command-line interface: `statetrack run | reproduce | book | tasks | models | experiments | report
| results | analyze | construct | schema | completion`.

Bad input (unknown names, bad values, malformed specs) prints one line naming what is valid and
exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statetrack import __version__, limits
from statetrack.allocator import keep_freed_memory
from statetrack.errors import StatetrackError
from statetrack.options import RunOptions
from statetrack.paths import check_name, check_outputs, check_writable, report_outputs, store_file
from statetrack.plugins import load_imports
from statetrack.schema import SCALES
from statetrack.store import StoreDamaged

_int = limits.argparse_int


def _params(pairs: list[str]) -> dict:
    """`m=5 group=S5` -> {'m': 5, 'group': 'S5'} (values parsed as YAML scalars/lists)."""
    from statetrack.experiments.spec import parse_override

    out = {}
    for pair in pairs:
        path, value = parse_override(pair)
        out[".".join(path)] = value
    return out


def _imports(args) -> list[str]:
    """The --import modules given before and after the command name, in order."""
    return (getattr(args, "top_imports", None) or []) + (getattr(args, "imports", None) or [])


def _store(args, read_only: bool = True):
    """The results store of --store / --results-dir; read-only (it must exist, and nothing is written)
    unless the command trains."""
    from statetrack.store import Store

    return Store(_store_path(args), read_only=read_only)


# ---- commands ------------------------------------------------------------------------------------
def _run_options(args):
    return RunOptions.from_arguments(args)


def _store_path(args) -> Path:
    return Path(args.store) if args.store else store_file(args.results_dir)


def run_and_report(args, experiment, options, after=None):
    """What `run` and `reproduce` do per experiment: train what the store lacks of it, call `after`
    (when given) however that ended, score the stored runs once under the plan it stored and write the report; returns
    (the `Scored`, the report's folder)."""
    from statetrack.experiments.runner import run_experiment
    from statetrack.results.report import write_report
    from statetrack.results.scoring import score_store

    try:
        plan = run_experiment(experiment, args.results_dir, options, store_path=args.store)
    finally:
        if after is not None:
            after()
    scored = score_store(_store(args), experiment.name, plan=plan, run_data=True)
    return scored, write_report(scored, args.results_dir)


def cmd_run(args) -> int:
    from statetrack.experiments.runner import check_options
    from statetrack.experiments.spec import resolve
    from statetrack.results.report import index_verdicts
    from statetrack.results.selection import describe_selection
    from statetrack.results.tables import table_rows, text_table

    options = _run_options(args)
    check_options(options)  # a backend option that cannot work fails before the spec's modules are imported
    experiment = resolve(args.experiment, args.scale, args.overrides, args.name, _imports(args))
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


def dry_run(args, experiment) -> int:
    """`run --dry-run`: the resolved spec and every planned run with its training cost and its status
    in the store (when there is one), and nothing trained or written."""
    import yaml

    from statetrack.experiments.runner import training_cost
    from statetrack.experiments.spec import train_lengths_text
    from statetrack.results.tables import text_table

    spec, runs = experiment.spec, experiment.runs
    status = {}
    if _store_path(args).is_file():
        status = {r["id"]: r["status"] for r in _store(args, read_only=True).runs(experiment.name)}
    print(f"# experiment {experiment.name} at the {args.scale} scale, resolved (overrides applied, defaults filled in)")
    first = {key: spec[key] for key in ("name", "scale") if key in spec}
    print(yaml.safe_dump({**first, **spec}, sort_keys=False, width=120).rstrip())
    header = ["run", "model", "task", "lr", "seed", "steps", "train lengths", "eval lengths", "GFLOP", "status"]
    body, costs = [], [training_cost(run) for run in runs]
    for run, cost in zip(runs, costs):
        entry = run.plan_entry()
        lengths = entry["lengths"]
        shown = ", ".join(map(str, lengths)) if len(lengths) <= 6 else f"{lengths[0]}..{lengths[-1]} ({len(lengths)})"
        body.append(
            [
                run.id,
                run.model_name,
                run.task_name,
                f"{run.lr:g}",
                str(run.seed),
                str(entry["steps"]),
                train_lengths_text(run.train),
                shown,
                f"{cost / 1e9:,.0f}",
                status.get(run.id, "to run"),
            ]
        )
    todo = [c for run, c in zip(runs, costs) if status.get(run.id) != "done"]
    print(
        f"\n# {len(runs)} planned runs, {len(todo)} to train; "
        "training arithmetic (forward + backward, every step's batch): "
        f"{sum(todo) / 1e12:,.1f} TFLOP to train, {sum(costs) / 1e12:,.1f} TFLOP in all"
    )
    print(text_table(header, body))
    print("\n(dry run: nothing trained, nothing written)")
    return 0


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
    options = _run_options(args)
    check_options(options)
    failed = 0
    for number, name in enumerate(names, 1):
        print(f"== [{number}/{len(names)}] {name} ({args.scale} scale)")
        start = time.time()
        experiment = resolve(name, args.scale, [], name=name, imports=_imports(args))

        def record(name=name, start=start):  # an interrupted part's time counts too: its finished runs are stored
            if _store_path(args).exists():
                record_part(_store(args), name, args.book_dir, start, workers)

        scored, _ = run_and_report(args, experiment, options, after=record)
        failed += sum(1 for r in scored.missing if r["status"] == "failed")
    changed = write_book(args.book_dir, args.readme)
    for path in changed:
        print(f"wrote {path}")
    print(f"book: {Path(args.book_dir) / 'reproductions.md'} (every claim: {Path(args.book_dir) / 'claims.md'})")
    if failed:
        print(
            f"{failed} runs failed with an error (in the store and the reports); re-run the same command to retry them"
        )
    return 1 if failed else 0


def cmd_table(args) -> int:
    """`statetrack table`: the committed state-tracking table; `--models`: a user's rows trained under
    the table's protocol (pilot, then three seeds) and rendered beside the zoo's; `--zoo`: the whole
    table measured again (its snapshots rewritten); `--write` / `--check`: docs/state-table.md and its
    picture from the committed snapshots."""
    import time

    from statetrack.experiments.runner import check_options
    from statetrack.results import statetable as st
    from statetrack.results.book import record_part
    from statetrack.results.scoring import score_store

    if args.scale != "quick":
        raise StatetrackError(f"table: the table has one scale, quick (its spec sets the budget), not {args.scale}")
    if args.write or args.check:
        differ = st.write_page(check=args.check)
        for path in differ:
            print(f"{'differs' if args.check else 'wrote'}: {path}")
        if args.check and differ:
            print("regenerate with `statetrack table --write` from the repository root")
            return 1
        return 0
    if args.full_budget:
        experiment = st.full_budget_experiment()
        if args.dry_run:
            return dry_run(args, experiment)
        started = time.time()
        try:
            scored, _ = run_and_report(args, experiment, _run_options(args))
        finally:
            record_part(
                _store(args), experiment.name, None, started, args.workers, path=st.snapshot_file(st.FULL_BUDGET)
            )
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
    if not args.models and not args.zoo:
        cells, titles = st.committed_cells()
        print(st.table_text(cells, titles))
        print(st.LEGEND)
        return 0
    if args.zoo and args.models:
        raise StatetrackError("table: --zoo measures the zoo's table, --models trains your rows beside it: give one")
    options = _run_options(args)
    check_options(options)
    imports = _imports(args)
    models = st.parse_models(args.models) if args.models else None
    if args.zoo and args.overrides:
        raise StatetrackError("table --zoo measures the table as its spec sets it: no overrides")
    pilot = st.pilot_experiment(models, imports, args.overrides)
    if args.dry_run:
        print("# step 1 of 2: the pilot (seed 0 at each rate); step 2 trains three seeds at the rate(s) it picks")
        return dry_run(args, pilot)
    started = time.time()

    def record(experiment, path, started):
        if args.zoo and _store_path(args).exists():
            record_part(_store(args), experiment, None, started, args.workers, path=path)

    try:
        run_and_report(args, pilot, options)
    finally:
        record(pilot.name, st.snapshot_file(st.PILOT_NAME), started)
    pilot_scored = score_store(_store(args), pilot.name)
    name = st.TABLE if args.zoo else st.user_table_name(models or [], args.overrides)
    table = st.table_experiment(pilot_scored, pilot, name, imports, args.overrides)
    started = time.time()
    try:
        scored, _ = run_and_report(args, table, options)
    finally:
        record(table.name, st.snapshot_file(), started)
    mine = st.cells(scored)
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
    return 1 if any(r["status"] == "failed" for r in scored.missing) else 0


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


def cmd_tasks(args) -> int:
    from statetrack.tasks import TASKS, make_task, task_parameters

    if args.action in (None, "list"):
        if args.json or getattr(args, "list_json", False):
            return _print_json(
                [
                    {"name": name, "summary": cls.summary, "parameters": task_parameters(name)}
                    for name, cls in sorted(TASKS.items())
                ]
            )
        width = max(map(len, TASKS)) + 2
        for name, cls in sorted(TASKS.items()):
            params = ", ".join(f"{k}={v!r}" for k, v in task_parameters(name).items()) or "-"
            print(f"{name:{width}s}{cls.summary}\n{'':{width}s}parameters: {params}")
        return 0
    for option in ("count", "samples"):
        if getattr(args, option, 1) < 1:
            raise StatetrackError(f"--{option} must be >= 1, got {getattr(args, option)}")
    if args.action == "show":
        import torch

        task = make_task(args.name, **_params(args.params))
        lengths = list(dict.fromkeys(args.lengths or [max(task.min_length, 8)]))
        for length in lengths:
            task.check_length(length)
        limits.check_tokens(args.count, max(lengths), "tasks show")
        print(f"{task!r}: vocab {task.vocab_size} tokens, {task.num_classes} classes, chance {task.chance:.4f}")
        for length in lengths:
            batch = task.sample(args.count, length, torch.Generator().manual_seed(args.seed))
            if len(lengths) > 1:
                print(f"length {length}:")
            for i in range(args.count):
                print(task.describe(batch, i))
        return 0
    if args.action == "export":
        from statetrack.tasks.export import export_task

        task = make_task(args.name, **_params(args.params))
        paths = export_task(task, args.lengths, args.samples, args.out, fmt=args.format, seed=args.seed)
        for p in paths:
            print(p)
        return 0
    raise AssertionError(args.action)


def cmd_models(args) -> int:
    from statetrack.models import zoo

    if args.budget is not None or args.width is not None:
        if args.json:
            raise StatetrackError("models: --json lists the models; it does not go with --params or --width")
        return _model_sizes(args)
    if args.settings or args.num_layers is not None:
        raise StatetrackError(
            "models: --set and --num-layers go with --params BUDGET or --width N "
            "(e.g. statetrack models --params 3e6 --num-layers 2)"
        )
    names = [zoo.resolve(name)["name"] for name in args.names] or list(zoo.MODELS)  # presets: their model
    if args.json:
        return _print_json(
            [
                {
                    "name": name,
                    "display_name": zoo.display_name(name),
                    "summary": entry.summary,
                    "recurrent": entry.recurrent,
                    "parameters": zoo.mixer_parameters(name),
                    "stack_defaults": {**zoo.MODEL_DEFAULTS, **entry.stack_defaults},
                    "presets": {k: v for k, v in zoo.PRESETS.items() if v["name"] == name},
                }
                for name, entry in zoo.MODELS.items()
                if name in names
            ]
        )
    width = max(map(len, zoo.MODELS)) + 2
    for name, entry in zoo.MODELS.items():
        if name not in names:
            continue
        params = ", ".join(f"{k}={v!r}" for k, v in zoo.mixer_parameters(name).items()) or "-"
        print(f"{name:{width}s}{entry.summary}\n{'':{width}s}parameters: {params}")
        if entry.stack_defaults:
            own = ", ".join(f"{k}={v!r}" for k, v in entry.stack_defaults.items())
            print(f"{'':{width}s}stack defaults of its own (its published form): {own}")
    if args.names:
        return 0
    print(
        f"\ncommon parameters: {', '.join(f'{k}={v!r}' for k, v in zoo.MODEL_DEFAULTS.items())} "
        f"(a model's stack defaults of its own, listed with it, replace these)"
    )
    print("presets: " + ", ".join(f"{k} = {v}" for k, v in zoo.PRESETS.items()))
    return 0


def _model_sizes(args) -> int:
    """`models --params B` / `--width N`: per-layer parameter counts, one row per model (statetrack.models.sizing)."""
    from statetrack.models import sizing, zoo
    from statetrack.results.tables import text_table

    budget = None if args.budget is None else sizing.parse_budget(args.budget, "--params")
    if args.width is not None and args.width < 1:
        raise StatetrackError(f"--width must be >= 1, got {args.width}")
    if args.num_layers is not None and args.num_layers < 1:
        raise StatetrackError(f"--num-layers must be >= 1, got {args.num_layers}")
    if budget is not None:  # a model of that size must fit in memory to be trained
        layers = args.num_layers or 1
        limits.check_parameters(budget * layers, f"models: --params {args.budget} per layer x {layers} layer(s)")
    table = sizing.sizes_table(
        args.names or list(zoo.MODELS), _params(args.settings or []), budget, args.width, args.num_layers
    )
    print(table.title)
    print(text_table(table.header, table.body))
    for note in table.notes:
        print(note)
    if table.failed:  # the table shows the others; the settings that fail a model are the command's error
        raise StatetrackError("; ".join(table.failed))
    return 0


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
        return _print_json(rows)
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


def _print_json(rows: list[dict]) -> int:
    print(json.dumps(rows, indent=1, default=repr))
    return 0


def cmd_schema(args) -> int:
    from statetrack.catalog import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=1))
    return 0


def cmd_completion(args) -> int:
    from statetrack.completion import completion_script

    print(completion_script(build_parser(), args.shell), end="")
    return 0


def _description(experiment: str) -> str:
    from statetrack.experiments.spec import read_spec

    try:
        return read_spec(experiment).get("description", "")
    except StatetrackError:
        return ""


def _known_experiment(store, experiment: str) -> None:
    if experiment not in store.experiments():
        known = store.experiments()
        raise StatetrackError(
            f"no results for experiment {experiment!r} in {store.path}; "
            f"experiments with results: {', '.join(known) or 'none'}"
        )


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
    store = _store(args)
    names = store.experiments() if args.all else [args.experiment]
    for name in names:  # every file the reports and the index write, before the first is written
        check_outputs(report_outputs(args.results_dir, name), "report file")
    if args.all:
        check_outputs([Path(args.results_dir) / "index.md", Path(args.results_dir) / "index.html"], "index file")
    scored = {}  # each experiment scored once, with its spec's `paper:` and `selection:` as they are now
    for name in names:
        _known_experiment(store, name)
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


def cmd_export(args) -> int:
    import os

    from statetrack.paths import under
    from statetrack.training.loggers import export_runs

    check_name(args.experiment)
    if args.kind == "mlflow":
        target = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not target:
            raise StatetrackError("export mlflow needs a tracking URI: --tracking-uri URI or MLFLOW_TRACKING_URI")
    elif args.kind == "wandb":
        target = args.project
    else:
        target = args.out or str(
            under(args.results_dir, args.experiment, "csv")
            if args.kind == "csv"
            else Path(args.results_dir) / "tensorboard"
        )
        check_writable(target, "--out folder")
    count, where = export_runs(_store(args, read_only=True), args.experiment, args.kind, target)
    print(f"exported {count} runs of {args.experiment} to {args.kind}: {where}")
    return 0


def cmd_results(args) -> int:
    from statetrack.results.report import results_text
    from statetrack.results.scoring import score_store

    check_name(args.experiment)
    store = _store(args)
    _known_experiment(store, args.experiment)
    if args.json:
        plan = store.plan(args.experiment)
        print(json.dumps(store.results(args.experiment, plan.ids if plan else None), indent=1))
        return 0
    print(results_text(score_store(store, args.experiment, run_data=True)))
    return 0


def cmd_analyze(args) -> int:
    if args.analysis not in ("belief", "shortcut"):
        check_name(args.run, "RUN (a run id or an experiment name)")
    if args.analysis == "shortcut":
        from statetrack.analysis.shortcuts import format_floor, shortcut_floor

        params = _params(args.params)
        unknown_keys = sorted(set(params) - {"states", "machine_seed"})
        if unknown_keys:
            raise StatetrackError(f"unknown fsm parameter {unknown_keys[0]!r}; expected states or machine_seed")
        floor = shortcut_floor(window=args.window, **params)
        print(format_floor(params.get("states", 6), params.get("machine_seed", 0), floor))
        return 0
    for option in ("samples", "length"):
        if getattr(args, option, None) is not None and getattr(args, option) < 1:
            raise StatetrackError(f"--{option} must be an integer >= 1, got {getattr(args, option)}")
    if getattr(args, "samples", None) and getattr(args, "length", None):
        limits.check_tokens(args.samples, args.length, f"analyze {args.analysis}")
    if args.analysis == "belief":
        from statetrack.analysis.belief import analyze_belief

        text, path = analyze_belief(
            args.task,
            _params(args.params),
            length=args.length,
            samples=args.samples,
            seed=args.seed,
            out=args.out,
            results_dir=args.results_dir,
        )
    elif args.analysis == "rotations":
        from statetrack.analysis.rotations import analyze_rotations

        text, path = analyze_rotations(
            _store(args),
            args.run,
            args.results_dir,
            out=args.out,
            model=args.model,
            run_seed=args.run_seed,
            top=args.top,
        )
    elif args.analysis == "signs":
        from statetrack.analysis.signs import analyze_signs

        print(analyze_signs(_store(args), args.run, args.results_dir, model=args.model, run_seed=args.run_seed))
        return 0
    elif args.analysis == "heads":
        from statetrack.analysis.heads import analyze_heads

        text, paths = analyze_heads(
            _store(args),
            args.run,
            args.results_dir,
            samples=args.samples,
            length=args.length,
            seed=args.seed,
            out=args.out,
            model=args.model,
            run_seed=args.run_seed,
            sweep=args.sweep,
        )
        print(text)
        for path in paths:
            print(f"plot: {path}")
        return 0
    else:
        from statetrack.analysis.spectrum import analyze_run

        text, path = analyze_run(
            _store(args),
            args.run,
            args.results_dir,
            samples=args.samples,
            length=args.length,
            seed=args.seed,
            out=args.out,
            model=args.model,
            run_seed=args.run_seed,
        )
    print(text)
    if path is not None:
        print(f"plot: {path}")
    return 0


def cmd_construct(args) -> int:
    from statetrack.analysis.constructions import STRUCTURES, TASKS, construct, evaluate_construction
    from statetrack.errors import unknown
    from statetrack.models import zoo
    from statetrack.results.tables import text_table
    from statetrack.tasks import make_task

    if args.task not in TASKS:
        raise unknown("task for an exact construction", args.task, TASKS)
    if args.structure not in STRUCTURES:
        raise unknown("structure", args.structure, STRUCTURES)
    for name in ("samples", "batch_size", "chunk_size"):
        if getattr(args, name) < 1:
            raise StatetrackError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    task = make_task(args.task, **_params(args.params))
    for length in args.lengths:
        task.check_length(length)
    limits.check_tokens(min(args.samples, args.batch_size), max(args.lengths), "construct")
    limits.check_construction(task, args.structure)
    built = construct(task, args.structure, normalize_every=args.normalize_every)
    spec = built.spec
    size = f"d_model {spec['d_model']}, hidden {spec['hidden']}" + (
        f", rank {spec['rank']}" if spec["structure"] == "cp" else ""
    )
    print(
        f"{zoo.display_name(spec)} ({size}, {built.model.num_parameters():,} weights) simulating {task!r} exactly; "
        f"smallest logit margin {built.margin:.3f}"
    )
    rows = evaluate_construction(
        built.model,
        task,
        args.lengths,
        samples=args.samples,
        batch_size=args.batch_size,
        seed=args.seed,
        chunk_size=args.chunk_size,
    )
    body = [[str(r["length"]), str(r["samples"]), f"{r['accuracy']:.4f}", f"{r['scaled_accuracy']:.4f}"] for r in rows]
    print(text_table(["length", "samples", "accuracy", "scaled accuracy"], body))
    return 0


# ---- parser --------------------------------------------------------------------------------------
IMPORT_HELP = (
    "import a module or .py file that registers models or tasks before anything else "
    "(repeatable; `run` also imports it in every worker)"
)


class UsageError(StatetrackError):
    """A command line argparse cannot read (unknown option, bad choice, missing argument)."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (the command, the problem, where to find help) instead of
    the usage block; subcommands' parsers are of this class too."""

    def error(self, message: str):
        command = self.prog.partition(" ")[2]  # "run", "tasks show", or "" for the top level
        raise UsageError(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)")


@dataclass(frozen=True, init=False)
class Arg:
    """One argument of a command: the flags (or the positional's name) and the keywords that
    `ArgumentParser.add_argument` takes."""

    flags: tuple[str, ...]
    options: dict[str, Any]

    def __init__(self, *flags: str, **options: Any) -> None:
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "options", options)


@dataclass(frozen=True)
class Group:
    """Options declared once and taken by every command that lists the group among its arguments;
    `add` puts on the options another module declares, after `args`."""

    name: str
    args: tuple[Arg, ...] = ()
    add: Callable[[argparse.ArgumentParser], None] | None = None


@dataclass(frozen=True)
class OneOf:
    """Options of which a command line gives one at most (an argparse mutually exclusive group)."""

    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Command:
    """A command, or one action of a command: its name, its help line, its handler (None where the
    command above it handles it), its arguments in the order its help lists them, and its actions,
    chosen by the word stored in `dest` (required unless `optional_action`); `common`: arguments
    every one of its actions takes, before their own."""

    name: str
    help: str
    func: Callable[..., int] | None = None
    args: tuple[Arg | Group | OneOf, ...] = ()
    actions: tuple[Command, ...] = ()
    dest: str = "action"
    optional_action: bool = False
    common: tuple[Group, ...] = ()


# every command takes --import too; its own dest, so a subcommand's default cannot hide the top-level one
IMPORT = Group("import", (Arg("--import", dest="imports", action="append", metavar="MODULE", help=IMPORT_HELP),))
STORE = Group(
    "store",
    (
        Arg("--results-dir", default="results", help="folder for reports and checkpoints (default: results)"),
        Arg("--store", default=None, help="SQLite results file (default: RESULTS_DIR/statetrack.db)"),
    ),
)
# how runs are carried out, shared by `run` and `reproduce`: the scale, and each field of `RunOptions` as its flag
RUN_OPTIONS = Group(
    "run options",
    (Arg("--scale", default="quick", choices=SCALES, help="quick: CPU minutes; paper: the papers' sizes"),),
    add=RunOptions.add_arguments,
)
BOOK = Group(
    "book",
    (
        Arg(
            "--book-dir",
            default="docs",
            metavar="DIR",
            help="where the book is (DIR/reproductions.md, DIR/claims.md) and its snapshots (DIR/results/) "
            "(default: docs)",
        ),
        Arg(
            "--readme",
            default="README.md",
            metavar="FILE",
            help="the README whose generated blocks are rewritten, where it exists (default: README.md)",
        ),
    ),
)

TASKS_JSON_HELP = "a JSON list, one object per task: name, summary, parameters (with their defaults)"
TASK_NAME = Arg("name", metavar="NAME", help="a task (see `statetrack tasks`)")
INPUTS = Arg("--samples", type=_int(), default=64, help="input sequences (default: 64)")
INPUT_LENGTH = Arg(
    "--length",
    type=_int(high=limits.MAX_LENGTH),
    default=None,
    help="input length (default: the run's longest training length)",
)


def _parameters(help: str) -> Arg:
    """The key=value parameters after a task's (or a machine's) name."""
    return Arg("params", nargs="*", default=[], metavar="param=value", help=help)


def _one_run(example: str) -> tuple[Arg, ...]:
    """The arguments naming one trained run: RUN, or an experiment with --model and --run-seed."""
    return (
        Arg("run", metavar="RUN", help="a run id (or unique prefix), or an EXPERIMENT name with --model"),
        Arg("--model", default=None, help=f'display name of the model when RUN is an experiment, e.g. "{example}"'),
        Arg(
            "--run-seed", type=_int(0), default=None, help="seed of the run when RUN is an experiment (default: lowest)"
        ),
    )


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
            help="train these models under the table's protocol (a learning-rate pilot on the training lengths, then "
            "three seeds) and show their rows beside the committed ones: a registered name or preset, or a YAML "
            "mapping such as '{name: deltanet, eig_range: \"[-1,1]\"}' (register your own with --import FILE.py)",
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
BOOK_COMMAND = Command(
    "book",
    "write docs/reproductions.md, docs/claims.md and the README's result blocks from the snapshots",
    cmd_book,
    (BOOK, Arg("--check", action="store_true", help="write nothing; exit 1 when a page differs from its generation")),
)
TASKS = Command(
    "tasks",
    "list tasks, show examples, export datasets",
    cmd_tasks,
    (Arg("--json", action="store_true", help=TASKS_JSON_HELP),),
    actions=(
        # its --json has its own dest, so the action's default cannot hide `tasks --json`
        Command(
            "list",
            "list tasks with their parameters",
            args=(Arg("--json", dest="list_json", action="store_true", help=TASKS_JSON_HELP),),
        ),
        Command(
            "show",
            "print readable examples of a task",
            args=(
                TASK_NAME,
                _parameters("task parameters, e.g. group=S5"),
                Arg(
                    "--lengths",
                    type=_int(high=limits.MAX_LENGTH),
                    nargs="+",
                    default=None,
                    metavar="L",
                    help="task lengths, --count examples at each (default: 8, or the task's minimum length if longer)",
                ),
                Arg("--count", type=_int(), default=3, help="examples per length (default: 3)"),
                Arg("--seed", type=_int(0), default=0, help="seed of the examples (default: 0)"),
            ),
        ),
        Command(
            "export",
            "write datasets to disk (CSV or JSONL)",
            args=(
                TASK_NAME,
                _parameters("task parameters, e.g. group=A5"),
                Arg(
                    "--lengths",
                    type=_int(high=limits.MAX_LENGTH),
                    nargs="+",
                    required=True,
                    metavar="L",
                    help="task lengths, one file per length",
                ),
                Arg("--samples", type=_int(), required=True, metavar="N", help="examples per length"),
                Arg(
                    "--out",
                    required=True,
                    metavar="DIR",
                    help="folder to write into, created if missing: one file per length and NAME.meta.json "
                    "(what decodes them: vocabulary, answer classes, parameters, files; a group's elements and "
                    "Cayley table)",
                ),
                Arg(
                    "--format",
                    choices=["csv", "jsonl"],
                    default="csv",
                    help="csv: columns input,target,mask (word problems: GROUP=L.csv with seed,input,target, "
                    "as Merrill et al. 2024); jsonl: one object per example (default: csv)",
                ),
                Arg(
                    "--seed",
                    type=_int(0),
                    default=0,
                    help="seed of the examples; each length has its own generator, seeded from (seed, length), "
                    "so a file does not change when lengths are added (default: 0)",
                ),
            ),
        ),
    ),
    optional_action=True,
)
MODELS = Command(
    "models",
    "list models, their parameters and presets; --params/--width: parameters per layer",
    cmd_models,
    (
        Arg(
            "names",
            nargs="*",
            default=[],
            metavar="MODEL",
            help="only these models or presets (default: every registered model)",
        ),
        OneOf(
            (
                Arg(
                    "--params",
                    dest="budget",
                    default=None,
                    metavar="BUDGET",
                    help="choose each model's d_model for this many trainable parameters per layer (e.g. 3e6), "
                    "and print it",
                ),
                Arg(
                    "--width",
                    type=_int(high=limits.MAX_WIDTH),
                    default=None,
                    metavar="N",
                    help="print each model's parameters per layer at d_model N",
                ),
            )
        ),
        Arg(
            "--num-layers",
            type=_int(high=limits.MAX_LAYERS),
            default=None,
            metavar="N",
            help="with --params or --width: also count all N layers",
        ),
        Arg(
            "--set",
            dest="settings",
            nargs="+",
            action="extend",
            default=None,
            metavar="key=value",
            help="with --params or --width: model settings, applied to each model that has the key "
            "(e.g. mlp=false num_heads=4)",
        ),
        Arg(
            "--json",
            action="store_true",
            help="a JSON list, one object per model: name, display_name, summary, recurrent, "
            "parameters (with their defaults), stack_defaults (d_model, num_layers, "
            "mlp for this model), presets",
        ),
    ),
)
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
SCHEMA = Command(
    "schema",
    "print the JSON Schema of an experiment spec, every registered model and task with its parameters "
    "(statetrack schema > statetrack.schema.json; an editor then completes and checks YAML specs)",
    cmd_schema,
)
COMPLETION = Command(
    "completion",
    "print the shell's completion script: commands, options, and the names of experiments, tasks "
    "and models (bash: statetrack completion bash > ~/.local/share/bash-completion/completions/statetrack)",
    cmd_completion,
    (Arg("shell", choices=["bash", "zsh", "tcsh"], help="the shell the script is for"),),
)
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
RESULTS = Command(
    "results",
    "print an experiment's results",
    cmd_results,
    (
        STORE,
        Arg("experiment", metavar="EXPERIMENT"),
        Arg("--json", action="store_true", help="a JSON list, one object per (run, evaluation length)"),
    ),
)
EXPORT = Command(
    "export",
    "an experiment's finished runs (curves and evaluations) as CSV, TensorBoard events, W&B runs or MLflow runs",
    cmd_export,
    (
        STORE,
        Arg(
            "kind",
            choices=["csv", "tensorboard", "wandb", "mlflow"],
            metavar="KIND",
            help="csv, tensorboard, wandb or mlflow",
        ),
        Arg("experiment", metavar="EXPERIMENT"),
        Arg(
            "--out",
            default=None,
            metavar="DIR",
            help="csv, tensorboard: the folder (default: RESULTS_DIR/EXPERIMENT/csv, RESULTS_DIR/tensorboard)",
        ),
        Arg(
            "--project",
            default="statetrack",
            help="wandb: the project (default: statetrack; WANDB_MODE=offline works offline)",
        ),
        Arg(
            "--tracking-uri",
            default=None,
            metavar="URI",
            help="mlflow: the tracking URI (default: $MLFLOW_TRACKING_URI), "
            "runs in an MLflow experiment of the experiment's name",
        ),
    ),
)
ANALYZE = Command(
    "analyze",
    "analyses of trained runs (spectrum, rotations, signs, heads), of a task's belief recurrence (belief) "
    "and of the random machine's shortcut floor (shortcut)",
    dest="analysis",
    actions=(
        Command(
            "spectrum",
            "eigenvalues of a run's learned state transitions, printed and plotted",
            cmd_analyze,
            (
                STORE,
                *_one_run("DeltaNet [-1,1]"),
                INPUTS,
                INPUT_LENGTH,
                Arg("--seed", type=_int(0), default=0, help="seed of the inputs"),
                Arg(
                    "--out",
                    default=None,
                    metavar="DIR",
                    help="folder for the plot spectrum_RUNID.png (default: RESULTS_DIR/EXPERIMENT)",
                ),
            ),
        ),
        Command(
            "rotations",
            "a rotation bilinear run's angles per 2-D plane on Z_m, ranked by readout weight, printed and plotted",
            cmd_analyze,
            (
                STORE,
                *_one_run("Bilinear rotation"),
                Arg("--top", type=_int(), default=20, help="planes printed (default: 20; the plot shows every plane)"),
                Arg(
                    "--out",
                    default=None,
                    metavar="DIR",
                    help="folder for the plot rotations_RUNID.png (default: RESULTS_DIR/EXPERIMENT)",
                ),
            ),
        ),
        Command(
            "signs",
            "a real-diagonal bilinear parity run's dominant coordinate and whether its sign tracks parity at long "
            "lengths (every such run of an EXPERIMENT without --model)",
            cmd_analyze,
            (STORE, *_one_run("Bilinear diagonal frozen norm")),
        ),
        Command(
            "heads",
            "a delta-rule run's heads: beta per head, keys' PCA, "
            "and the accuracy lost when one head's beta range is halved, ranked and plotted",
            cmd_analyze,
            (
                STORE,
                *_one_run("DeltaNet [-1,1]"),
                INPUTS,
                INPUT_LENGTH,
                Arg(
                    "--seed",
                    type=_int(0),
                    default=0,
                    help="seed of the inputs (the evaluation set of that seed at --length)",
                ),
                Arg(
                    "--sweep",
                    type=_int(),
                    default=4,
                    help="steps of the gradual beta scaling from x1 to x0.5 in the intervention plot (default: 4)",
                ),
                Arg(
                    "--out",
                    default=None,
                    metavar="DIR",
                    help="folder for the plots heads_RUNID_beta.png, heads_RUNID_keys.png and "
                    "heads_RUNID_intervention.png (default: RESULTS_DIR/EXPERIMENT)",
                ),
            ),
        ),
        Command(
            "belief",
            "a PFSA-SR task's unnormalised belief recurrence: "
            "predicted vs observed float32/float64 underflow, printed and plotted",
            cmd_analyze,
            (
                Arg("task", metavar="TASK", help="a task with a belief recurrence: pfsa"),
                _parameters("task parameters, e.g. n=4 noise=0.5 reveal_prob=0.3"),
                Arg(
                    "--length",
                    type=_int(high=limits.MAX_LENGTH),
                    default=4000,
                    help="tokens per sequence (default: 4000, past the float64 underflow at the defaults)",
                ),
                Arg("--samples", type=_int(), default=64, help="sequences (default: 64)"),
                Arg("--seed", type=_int(0), default=0, help="seed of the sequences"),
                Arg("--results-dir", default="results", help="folder for the plot (default: results)"),
                Arg(
                    "--out",
                    default=None,
                    metavar="DIR",
                    help="folder for the plot belief_TASK_PARAMS.png (default: RESULTS_DIR/belief)",
                ),
            ),
        ),
        Command(
            "shortcut",
            "the random state machine's last-k-symbols floor: the accuracy of guessing the final "
            "state from the last k symbols alone, exact",
            cmd_analyze,
            (
                _parameters("fsm parameters, e.g. states=6 machine_seed=0"),
                Arg(
                    "--window",
                    type=_int(),
                    default=4,
                    help="the longest window k (default: 4, a causal convolution of 4 tokens)",
                ),
            ),
        ),
    ),
)
CONSTRUCT = Command(
    "construct",
    "exact bilinear weights for an automaton task, and their accuracy per length",
    cmd_construct,
    (
        Arg("task", metavar="TASK", help="fsm, modadd, parity or word_problem"),
        _parameters("task parameters, e.g. states=6 machine_seed=1, m=20, group=A5"),
        Arg(
            "--structure",
            default="full",
            help="full, cp, block (any automaton), rotation (commuting tokens: Z_m, abelian groups) "
            "or diagonal (parity)",
        ),
        Arg(
            "--lengths",
            type=_int(high=limits.MAX_LENGTH),
            nargs="+",
            default=[10, 100, 1000, 10000],
            help="evaluation lengths (default: 10 100 1000 10000)",
        ),
        Arg("--samples", type=_int(), default=16, help="inputs per length (default: 16)"),
        Arg("--batch-size", type=_int(), default=16, help="inputs per batch (default: 16)"),
        Arg(
            "--chunk-size",
            type=_int(high=limits.MAX_LENGTH),
            default=1024,
            help="tokens fed per call, carrying the state (default: 1024)",
        ),
        Arg(
            "--normalize-every",
            type=_int(1),
            default=1,
            help="the mixer's evaluation-time renormalisation period (default: 1)",
        ),
        Arg("--seed", type=_int(0), default=0, help="seed of the evaluation inputs"),
    ),
)
# the command line: the program (its help is the parser's description), its commands and their actions
STATETRACK = Command(
    "statetrack",
    "State tracking and length generalization in sequence models.",
    args=(
        Arg("--version", action="version", version=f"statetrack {__version__}"),
        Arg("--import", dest="top_imports", action="append", metavar="MODULE", help=IMPORT_HELP),
    ),
    actions=(
        RUN,
        REPRODUCE,
        BOOK_COMMAND,
        TABLE_COMMAND,
        TASKS,
        MODELS,
        EXPERIMENTS,
        SCHEMA,
        COMPLETION,
        REPORT,
        RESULTS,
        EXPORT,
        ANALYZE,
        CONSTRUCT,
    ),
    dest="command",
    common=(IMPORT,),
)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, built from the table `STATETRACK`."""
    return _build(Parser(prog=STATETRACK.name, description=STATETRACK.help), STATETRACK)


def _build(
    parser: argparse.ArgumentParser, command: Command, common: tuple[Group, ...] = ()
) -> argparse.ArgumentParser:
    """`parser` with `command`'s arguments (after `common`, those its parent gives every action), its
    handler, and a parser of each of its actions, built the same way."""
    for item in (*common, *command.args):
        container = parser.add_mutually_exclusive_group() if isinstance(item, OneOf) else parser
        for arg in (item,) if isinstance(item, Arg) else item.args:
            container.add_argument(*arg.flags, **arg.options)
        if isinstance(item, Group) and item.add is not None:
            item.add(parser)
    if command.func is not None:
        parser.set_defaults(func=command.func)
    if command.actions:
        sub = parser.add_subparsers(
            dest=command.dest, required=not command.optional_action, metavar=command.dest.upper()
        )
        for action in command.actions:
            _build(sub.add_parser(action.name, help=action.help), action, command.common)
    return parser


def _one_line(text: str) -> str:
    """An error message as the one line it must be: line breaks and other control characters (a path
    may hold them) written as escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


_show_warning = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """statetrack's own warnings (damaged store rows) as one line; others as Python shows them."""
    if issubclass(category, StoreDamaged):
        print(f"statetrack: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    # a shell cannot pass one, but a caller in Python can, and the OS refuses it in any path
    nul = next((a for a in (sys.argv[1:] if argv is None else argv) if "\x00" in str(a)), None)
    if nul is not None:
        print(
            f"statetrack: error: argument {nul!r} holds a NUL character, which no name, path or value may",
            file=sys.stderr,
        )
        return 2
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        # key=value pairs may come after options (`run demo --scale paper seeds=[0]`): argparse leaves
        # them over, and they belong to the command's own key=value list.
        listed = next((key for key in ("overrides", "params") if hasattr(args, key)), None)
        if extra and (listed is None or any(item.startswith("-") or "=" not in item for item in extra)):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if extra and listed is not None:  # a new list: the table's default one stays empty for the next parse
            setattr(args, listed, [*getattr(args, listed), *extra])
    except UsageError as error:
        print(f"statetrack: error: {error}", file=sys.stderr)
        return 2
    keep_freed_memory()  # large tensors reuse heap memory (statetrack.allocator)
    warnings.showwarning = _one_line_warning
    try:
        load_imports(_imports(args), origin="--import")
        return args.func(args)
    except StatetrackError as error:
        print(f"statetrack: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error (before OSError, its base class)
        sys.stderr.close()
        return 0
    except OSError as error:  # a folder or file the command cannot create, read or write
        where = f": {error.filename}" if error.filename else ""
        print(f"statetrack: error: {_one_line(f'{error.strerror or error}{where}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        print(
            "statetrack: interrupted; finished runs are in the store, re-run the same command to resume",
            file=sys.stderr,
        )
        return 143 if type(interrupt).__name__ == "Terminated" else 130  # SIGTERM, SIGINT


if __name__ == "__main__":
    sys.exit(main())
