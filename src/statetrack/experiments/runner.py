"""Runs an experiment: trains and evaluates every unfinished run of the spec and writes the store.

The driver (this module) expands the spec, records the plan (the expected runs) in the store, and
hands the runs that are not `done` to a backend (experiments/backends.py): in this process one by
one, on a local process pool, or as Ray tasks. Workers return outcomes; the driver writes them.

Resume: a re-run of the same command skips `done` runs and runs the rest. Runs that `failed` are
retried by default (the failure may have been transient: a lost node, memory, a bug fixed since);
`retry_failed=False` (`--skip-failed`) leaves them as they are. A run killed mid-training restarts
from its last checkpoint.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
import traceback
from pathlib import Path

import torch

from statetrack import zoo
from statetrack.allocator import keep_freed_memory
from statetrack.errors import StatetrackError
from statetrack.evaluate import evaluate_lengths
from statetrack.experiments.backends import BACKENDS, available_cores, failed_outcome, make_backend
from statetrack.experiments.spec import RunSpec, expand, load_spec
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.train import Trainer, TrainConfig, resolve_device
from tqdm.auto import tqdm


def git_revision() -> str:
    """The source tree's git revision (with '+dirty' for uncommitted changes), or 'unknown'."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def checkpoint_path(results_dir: Path, run: RunSpec) -> Path:
    return Path(results_dir) / run.experiment / "checkpoints" / f"{run.id}.pt"


def train_and_evaluate(run: RunSpec, results_dir: str | Path, device: str = "auto", progress: bool = True,
                       threads: int | None = None) -> dict:
    """Train and evaluate one run, touching no store; returns its outcome.

    Outcome: {status: 'done', evals, curve, steps, num_parameters, train_seconds, eval_seconds, host}
    or {status: 'failed', error, host} for an exception or a non-finite loss (the grid goes on).
    `threads`: torch threads in this process (workers use 1, which also makes CPU runs repeatable).
    """
    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()  # large tensors reuse heap memory instead of faulting in fresh pages
    try:
        torch.manual_seed(run.seed)  # parameter initialisation
        task = make_task(**run.task)
        model = zoo.build_model(run.model, task.vocab_size, task.num_classes)
        config = TrainConfig.from_dict({**run.train, "device": device})
        trainer = Trainer(model, task, config, checkpoint_path(results_dir, run), progress=progress).fit()
        start = time.perf_counter()
        e = run.eval
        evals = evaluate_lengths(
            model, task, e["lengths"], samples=e["samples"], batch_size=e["batch_size"], seed=e["seed"],
            chunk_size=e["chunk_size"] if zoo.get_entry(run.model["name"]).recurrent else None,
            device=trainer.device, progress=progress,
        )
        return {"status": "done", "evals": evals, "curve": trainer.curve, "steps": trainer.step,
                "num_parameters": model.num_parameters(), "train_seconds": trainer.seconds,
                "eval_seconds": time.perf_counter() - start, "host": socket.gethostname()}
    except KeyboardInterrupt:
        raise
    except Exception as error:  # recorded, and the grid goes on
        return {**failed_outcome(f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}"), "host": socket.gethostname()}


def record(store: Store, run: RunSpec, outcome: dict) -> str:
    """Write a worker's outcome to the store (the run must have been started); returns its status."""
    if outcome["status"] == "done":
        store.finish_run(run.id, outcome["evals"], outcome["curve"], outcome["steps"], outcome["num_parameters"],
                         outcome["train_seconds"], outcome["eval_seconds"], host=outcome.get("host"))
    else:
        store.fail_run(run.id, outcome["error"], host=outcome.get("host"))
    return outcome["status"]


def execute_run(run: RunSpec, store: Store, results_dir: Path, device: str = "auto", progress: bool = True, git_rev: str = "unknown") -> str:
    """Train and evaluate one run in this process and record it; returns its final status ('done' or 'failed').

    The store marks the run `running` first and `done` only together with its evaluations; an
    exception or a non-finite loss marks it `failed` with the error, without stopping the caller.
    """
    store.start_run(run.id, run.experiment, run.model_name, run.task_name, run.seed, run.lr, run.config, git_rev)
    return record(store, run, train_and_evaluate(run, results_dir, device, progress))


def default_workers(device: str = "auto") -> int:
    """One worker per CPU core on CPU (small models run best single-threaded side by side); one on CUDA."""
    if resolve_device(device).type == "cuda":
        return 1
    return available_cores()


# ---- TensorBoard ---------------------------------------------------------------------------------
def tensorboard_writer_class():
    """torch's SummaryWriter, or a clear error when the `tensorboard` package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise StatetrackError("--tensorboard needs the tensorboard package: pip install 'statetrack[tensorboard]'") from None
    return SummaryWriter


def tensorboard_dir(root: str | Path, run: RunSpec) -> Path:
    label = f"{run.model_name}_{run.task_name}_lr{run.lr:g}_seed{run.seed}_{run.id[:8]}"
    return Path(root) / run.experiment / re.sub(r"[^A-Za-z0-9.=,+-]+", "_", label).strip("_")


def log_tensorboard(root: str | Path, run: RunSpec, store: Store) -> Path:
    """Write a finished run's training curve (train/loss, train/accuracy per step) and its evaluation
    (eval/accuracy, eval/scaled_accuracy with the length as step) from the store as TensorBoard events.
    Written by the driver when the run finishes, so it works the same for every backend."""
    folder = tensorboard_dir(root, run)
    writer = tensorboard_writer_class()(log_dir=str(folder))
    try:
        for point in store.curves(run.id):
            writer.add_scalar("train/loss", point["loss"], point["step"])
            writer.add_scalar("train/accuracy", point["accuracy"], point["step"])
        for row in store.evals(run.id):
            writer.add_scalar("eval/accuracy", row["accuracy"], row["length"])
            writer.add_scalar("eval/scaled_accuracy", row["scaled_accuracy"], row["length"])
    finally:
        writer.close()
    return folder


# ---- the driver ----------------------------------------------------------------------------------
def describe(run: RunSpec) -> str:
    return f"{run.model_name} on {run.task_name}, lr={run.lr:g}, seed={run.seed}"


def run_experiment(
    name_or_path: str,
    scale: str = "quick",
    overrides: list[str] = (),
    store_path: str | Path | None = None,
    results_dir: str | Path = "results",
    device: str = "auto",
    progress: bool = True,
    workers: int | None = None,
    log=print,
    backend: str = "local",
    address: str | None = None,
    gpus_per_run: float | None = None,
    tensorboard: str | Path | None = None,
    retry_failed: bool = True,
) -> tuple[dict, list[RunSpec]]:
    """Run every unfinished run of the experiment; returns (spec, runs).

    backend 'local': `workers` runs at a time on a process pool (default: one per core; 1 runs
    them in this process, with progress bars). backend 'ray': one Ray task per run on the cluster
    at `address`, or on a local Ray instance with `workers` CPUs.
    """
    if workers is not None and workers < 1:
        raise StatetrackError(f"workers must be >= 1, got {workers}")
    if backend not in BACKENDS:
        raise StatetrackError(f"unknown backend {backend!r}; expected one of: {', '.join(BACKENDS)}")
    if address and backend != "ray":
        raise StatetrackError("--address joins a Ray cluster; use it with --backend ray")
    if tensorboard:
        tensorboard_writer_class()  # fail now, not after the first run
    spec = load_spec(name_or_path, scale, overrides)
    runs = expand(spec)
    results_dir = Path(results_dir)
    store = Store(store_path or results_dir / "statetrack.db")
    store.set_plan(spec["name"], spec, [{"id": r.id, "model": r.model_name, "task": r.task_name, "lr": r.lr, "seed": r.seed} for r in runs])
    git_rev = git_revision()
    status = {r.id: store.status(r.id) for r in runs}
    finished = {"done"} if retry_failed else {"done", "failed"}
    todo = [r for r in runs if status[r.id] not in finished]
    failed_before = sum(1 for r in runs if status[r.id] == "failed")
    summary = (f"experiment {spec['name']} ({scale}): {len(runs)} runs, {sum(s == 'done' for s in status.values())} already done"
               + (f", {failed_before} failed before ({'retried' if retry_failed else 'skipped'})" if failed_before else ""))

    def finished_run(run: RunSpec, outcome_status: str, write=log) -> None:
        if outcome_status != "done":
            write(f"  failed: {describe(run)} (the error is in the store and the report)")
        elif tensorboard:
            log_tensorboard(tensorboard, run, store)

    if backend == "local":
        workers = min(workers or default_workers(device), max(1, len(todo)))
        if workers == 1 or not todo:
            log(summary)
            for i, run in enumerate(todo, 1):
                log(f"[{i}/{len(todo)}] {describe(run)}")
                finished_run(run, execute_run(run, store, results_dir, device, progress, git_rev))
            return spec, runs
    if not todo:
        log(summary)
        return spec, runs
    pool = make_backend(backend, workers, results_dir, device, address, gpus_per_run)
    log(f"{summary}; {pool.describe()}")
    pending, in_flight = list(todo), {}
    cancel = True
    try:
        with tqdm(total=len(todo), desc="runs", disable=not progress) as bar:
            while pending or in_flight:
                while pending and len(in_flight) < pool.slots:
                    run = pending.pop(0)
                    store.start_run(run.id, run.experiment, run.model_name, run.task_name, run.seed, run.lr, run.config, git_rev)
                    in_flight[pool.submit(run)] = run
                for handle in pool.wait(list(in_flight)):
                    run = in_flight.pop(handle)
                    outcome_status = record(store, run, pool.outcome(handle))
                    bar.write(f"{outcome_status:6s} {describe(run)}")
                    finished_run(run, outcome_status, write=lambda *_: None)
                    bar.update(1)
        cancel = False
    finally:
        pool.close(cancel=cancel)
    return spec, runs
