"""Runs an experiment: trains and evaluates every run of the spec, writes the store and the report."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from statetrack import zoo
from statetrack.errors import StatetrackError
from statetrack.evaluate import evaluate_lengths
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


def execute_run(run: RunSpec, store: Store, results_dir: Path, device: str = "auto", progress: bool = True, git_rev: str = "unknown") -> str:
    """Train and evaluate one run; returns its final status ('done' or 'failed').

    The store marks the run `running` first and `done` only together with its evaluations; an
    exception or a non-finite loss marks it `failed` with the error, without stopping the caller.
    """
    store.start_run(run.id, run.experiment, run.model_name, run.task_name, run.seed, run.lr, run.config, git_rev)
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
        store.finish_run(run.id, evals, trainer.curve, trainer.step, model.num_parameters(), trainer.seconds, time.perf_counter() - start)
        return "done"
    except KeyboardInterrupt:
        raise
    except Exception as error:  # recorded, and the grid goes on
        store.fail_run(run.id, f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}")
        return "failed"


def default_workers(device: str = "auto") -> int:
    """One worker per CPU core on CPU (small models run best single-threaded side by side); one on CUDA."""
    if resolve_device(device).type == "cuda":
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


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
) -> tuple[dict, list[RunSpec]]:
    """Run every unfinished run of the experiment; returns (spec, runs).

    With `workers` > 1 the runs go to a local process pool (each worker single-threaded when the
    cores are shared out); every worker writes its own results to the store as it finishes.
    """
    if workers is not None and workers < 1:
        raise StatetrackError(f"workers must be >= 1, got {workers}")
    spec = load_spec(name_or_path, scale, overrides)
    runs = expand(spec)
    results_dir = Path(results_dir)
    store = Store(store_path or results_dir / "statetrack.db")
    git_rev = git_revision()
    todo = [r for r in runs if store.status(r.id) != "done"]
    workers = min(workers or default_workers(device), max(1, len(todo)))
    log(f"experiment {spec['name']} ({scale}): {len(runs)} runs, {len(runs) - len(todo)} already done"
        + (f", {workers} workers" if workers > 1 else ""))
    describe = lambda run: f"{run.model_name} on {run.task_name}, lr={run.lr:g}, seed={run.seed}"  # noqa: E731
    if workers == 1:
        for i, run in enumerate(todo, 1):
            log(f"[{i}/{len(todo)}] {describe(run)}")
            if execute_run(run, store, results_dir, device, progress, git_rev) != "done":
                log(f"  failed: {describe(run)} (the error is in the store and the report)")
        return spec, runs
    cores = default_workers("cpu")
    context = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(max(1, cores // workers),)) as pool:
        futures = {pool.submit(execute_run, run, store, results_dir, device, False, git_rev): run for run in todo}
        with tqdm(total=len(todo), desc="runs", disable=not progress) as bar:
            for future in as_completed(futures):
                run = futures[future]
                status = future.result()
                bar.write(f"{status:6s} {describe(run)}")
                bar.update(1)
    return spec, runs
