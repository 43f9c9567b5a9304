"""Trained runs back in Python: `statetrack.load_run(run_id)` and `statetrack.load_runs(experiment, ...)`.

A finished run's row in the store holds its configuration (model, task, training and evaluation
settings), and its checkpoint under RESULTS_DIR/EXPERIMENT/checkpoints/ its weights: loading builds
the model from the configuration, loads the weights and puts it in eval mode. `find_run` and
`load_run_model` are what the analyses (`statetrack analyze`) read a run with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from statetrack.errors import StatetrackError
from statetrack.experiments.worker import checkpoint_path
from statetrack.models import zoo
from statetrack.paths import check_name, store_file
from statetrack.store import Store
from statetrack.tasks import Task, make_task
from statetrack.training.train import UnreadableCheckpoint, read_checkpoint


@dataclass(frozen=True, repr=False)
class TrainedRun:
    """A finished run: its trained `model` (eval mode, weights from its checkpoint) and `task`, and
    what the store says about it."""

    id: str
    experiment: str
    model_name: str  # the model's name in the experiment's tables, e.g. "DeltaNet [-1,1]"
    task_name: str  # e.g. "word_problem(group=A5)"
    seed: int
    lr: float
    config: dict  # {experiment, model, task, train, eval}: what the run's id is the hash of
    model: torch.nn.Module
    task: Task
    diverged_at: int | None  # the step its training loss became non-finite (its weights are then not finite), else None

    def __repr__(self) -> str:
        return (
            f"TrainedRun({self.id}: {self.model_name} on {self.task_name}, seed {self.seed}, lr {self.lr:g}, "
            f"experiment {self.experiment})"
        )


def _open(store: Store | str | Path | None, results_dir: str | Path) -> Store:
    if isinstance(store, Store):
        return store
    path = Path(store) if store is not None else store_file(results_dir)
    if not path.exists():  # in Python's words: the CLI's own message names its options
        raise StatetrackError(
            f"no results store at {path} (it is written by `statetrack run`; pass store=FILE or "
            f"results_dir=DIR of an earlier run)"
        )
    return Store(path, read_only=True)


def run_row(store: Store, run_id: str) -> dict:
    """The store row (with config) of the run whose id is `run_id` or starts with it."""
    experiments = store.experiments()
    matches = (
        [r for experiment in experiments for r in store.runs(experiment) if r["id"].startswith(run_id)]
        if run_id
        else []
    )
    damaged = sorted(i for i in store.skipped_runs if run_id and i.startswith(run_id))
    if not matches and damaged:
        raise StatetrackError(f"run {damaged[0]} in {store.path} has a damaged row in the store; it cannot be read")
    if not matches:
        raise StatetrackError(
            f"no run id in {store.path} is or starts with {run_id!r}; experiments with results: "
            f"{', '.join(experiments) or 'none'}"
        )
    if len(matches) > 1:
        raise StatetrackError(f"run id prefix {run_id!r} is ambiguous: {', '.join(sorted(r['id'] for r in matches))}")
    return matches[0]


def find_run(store: Store, run: str, model: str | None = None, seed: int | None = None) -> dict:
    """The store row (with config) of a finished run: `run` is a run id or a unique prefix of one, or
    an experiment name together with `model` (its display name, e.g. "DeltaNet [-1,1]") and
    optionally `seed` (default: the lowest seed)."""
    experiments = store.experiments()
    if run not in experiments:
        if not any(r["id"].startswith(run) for experiment in experiments for r in store.runs(experiment)) and not any(
            i.startswith(run) for i in store.skipped_runs
        ):
            raise StatetrackError(
                f"{run!r} is neither a run id in {store.path} nor an experiment with results "
                f"({', '.join(experiments) or 'none'})"
            )
        return run_row(store, run)
    rows = [r for r in store.runs(run) if r["status"] == "done"]
    listing = "; ".join(f"{r['id']} = {r['model']} on {r['task']}, seed {r['seed']}, lr {r['lr']:g}" for r in rows)
    if model is None:
        raise StatetrackError(
            f"experiment {run!r} has {len(rows)} finished runs; name one by id or with --model: {listing or 'none'}"
        )
    chosen = [r for r in rows if r["model"] == model and (seed is None or r["seed"] == seed)]
    if not chosen:
        models = sorted({r["model"] for r in rows})
        raise StatetrackError(
            f"experiment {run!r} has no finished run of model {model!r} (seed {seed}); "
            f"models: {', '.join(models) or 'none'}"
        )
    return min(chosen, key=lambda r: (r["seed"], r["lr"], r["task"]))


def load_run_model(row: dict, results_dir: str | Path, device: str | torch.device = "cpu"):
    """(model in eval mode, task) of a run, from its checkpoint under results_dir/EXPERIMENT/checkpoints."""
    config = row["config"]
    if not isinstance(config.get("model"), dict):  # the store checks the task (`Store.runs`); the model is read here
        raise StatetrackError(f"run {row['id']}: its stored configuration has no model; it cannot be loaded")
    path = checkpoint_path(results_dir, row["experiment"], row["id"])
    if not path.is_file():
        raise StatetrackError(
            f"run {row['id']} has no checkpoint at {path} (status: {row['status']}); "
            f"pass the results folder it ran with (--results-dir, or results_dir= in Python)"
        )
    task = make_task(**config["task"])
    model = zoo.build_model(config["model"], task.vocab_size, task.num_classes)
    try:
        model.load_state_dict(read_checkpoint(path, "cpu", model)["model"])
    except UnreadableCheckpoint as error:
        raise UnreadableCheckpoint(f"run {row['id']}: {error}") from None
    return model.to(device).eval(), task


def _trained(row: dict, results_dir: str | Path, device) -> TrainedRun:
    model, task = load_run_model(row, results_dir, device)
    return TrainedRun(
        row["id"],
        row["experiment"],
        row["model"],
        row["task"],
        row["seed"],
        row["lr"],
        row["config"],
        model,
        task,
        row["diverged_at"],
    )


def load_run(
    run_id: str,
    store: Store | str | Path | None = None,
    results_dir: str | Path = "results",
    device: str | torch.device = "cpu",
) -> TrainedRun:
    """The finished run `run_id` (an id, as in `statetrack results --json` and the report's runs
    table, or a unique prefix of one), its model on `device`. `store`: the results file (default
    RESULTS_DIR/statetrack.db) or an open Store; `results_dir`: where its checkpoint is."""
    db = _open(store, results_dir)
    row = run_row(db, run_id)
    if row["status"] != "done":
        raise StatetrackError(
            f"run {row['id']} ({row['model']} on {row['task']}, seed {row['seed']}) is {row['status']}, "
            f"not finished; only a finished run is loaded"
        )
    return _trained(row, results_dir, device)


def load_runs(
    experiment: str,
    model: str | None = None,
    task: str | None = None,
    seed: int | None = None,
    lr: float | None = None,
    store: Store | str | Path | None = None,
    results_dir: str | Path = "results",
    device: str | torch.device = "cpu",
) -> list[TrainedRun]:
    """The finished runs of `experiment` that its report shows (those of its latest plan), ordered by
    model, task, lr and seed; `model` (a display name, e.g. "DeltaNet [-1,1]"), `task` (as in the
    tables, e.g. "word_problem(group=A5)"), `seed` and `lr` keep only the runs with that value. A
    value that no finished run has is an error naming those that do."""
    check_name(experiment)
    db = _open(store, results_dir)
    if experiment not in db.experiments():
        raise StatetrackError(
            f"no results for experiment {experiment!r} in {db.path}; experiments with results: "
            f"{', '.join(db.experiments()) or 'none'}"
        )
    plan = db.plan(experiment)
    planned = None if plan is None else plan.ids
    rows = [r for r in db.runs(experiment) if r["status"] == "done" and (planned is None or r["id"] in planned)]
    for key, value in (("model", model), ("task", task), ("seed", seed), ("lr", lr)):
        if value is None:
            continue
        known = sorted({r[key] for r in rows})
        if value not in known:
            raise StatetrackError(
                f"experiment {experiment!r} has no finished run with {key} {value!r}; "
                f"{key}s with finished runs: {', '.join(map(str, known)) or 'none'}"
            )
        rows = [r for r in rows if r[key] == value]
    return [_trained(row, results_dir, device) for row in rows]
