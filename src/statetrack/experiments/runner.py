"""Runs an experiment: trains and evaluates every unfinished run of the spec and writes the store.

The driver (this module) expands and checks the spec, records the plan (the expected runs) in the
store, and hands the runs that are not `done` to a backend (experiments/backends.py: in this process
one by one, a local process pool, or Ray tasks) in one scheduling loop. Workers
(experiments/worker.py) return outcomes; the driver alone writes them.

Resume: a re-run of the same command skips `done` runs and runs the rest. Runs that `failed` are
retried by default (the failure may have been transient: a lost node, memory, a bug fixed since);
`retry_failed=False` (`--skip-failed`) leaves them as they are. A run whose training loss became
non-finite is no failure but the outcome of its setting (a learning rate too high, say): it is
stored `done`, with the step it diverged at and its evaluations at chance, and never retried. A run
killed mid-training restarts from its last checkpoint.

Several drivers (on one machine or many, sharing the store) divide an experiment between them: a
driver claims each run in the store before training it, with a lease it keeps renewing, and the
others pass over it; a run whose driver was killed is taken over once its lease lapses. SIGTERM
stops a driver like Ctrl-C: its pool's workers are stopped and its claims released.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from statetrack.errors import StatetrackError
from statetrack.experiments.backends import check_backend, experiment_device, make_backend
from statetrack.experiments.spec import Experiment, RunSpec
from statetrack.experiments.worker import checkpoint_path
from statetrack.models.sizing import pass_flops
from statetrack.paths import check_output, check_outputs, check_writable, report_outputs, store_file
from statetrack.store import LEASE_SECONDS, Store
from statetrack.training.loggers import check_log_to, tensorboard_dir


def git_revision(here: Path | None = None) -> str:
    """The git revision of the package's source (with '+dirty' for uncommitted changes to the
    package, shipped specs included, under `here`: the statetrack folder), or 'unknown'. Only the
    package counts: what `reproduce` writes beside it (the snapshots, the book, the README's blocks)
    changes no result, so an experiment measured after another one's snapshot was written still
    names a clean revision."""
    here = here or Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ---- the driver ----------------------------------------------------------------------------------
POLL_SECONDS = 1.0  # how often a driver looks in the store for the runs other drivers hold


class Heartbeat:
    """Renews this driver's leases on the runs it trains, every `lease` / 4 seconds, from a
    background thread (a run trained in this process blocks the driver's loop for its whole length)."""

    def __init__(self, store: Store, lease: float):
        self.store, self.every = store, lease / 4
        self.runs: set[str] = set()
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._beat, name="statetrack-heartbeat", daemon=True)

    def hold(self, run_id: str) -> None:
        with self.lock:
            self.runs.add(run_id)

    def release(self, run_id: str) -> None:
        with self.lock:
            self.runs.discard(run_id)

    def held_runs(self) -> list[str]:
        with self.lock:
            return sorted(self.runs)

    def _beat(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.store.renew_leases(self.held_runs())
            except Exception:  # a busy or briefly unreachable store: the next beat tries again
                pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C: the pool's workers are stopped and the driver's leases released."""


@contextmanager
def terminate_as_interrupt():
    """Within the block, SIGTERM raises `Terminated` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def training_cost(run: RunSpec, steps: int | None = None) -> float:
    """A run's training arithmetic, to schedule the longest first: per curriculum stage, steps x batch
    x the FLOPs of a forward + backward pass per sequence of the stage's task (`sizing.pass_flops`,
    the mean over the stage's shortest and longest lengths). `steps`: of the run's first `steps`
    steps only (a run that stopped early), else of all of them."""
    stages, start, flops = run.stages, 0, 0.0
    for stage in stages:
        end = stage["end"] if steps is None else min(stage["end"], steps)
        if end <= start:
            break
        lengths = {stage["min_length"], stage["max_length"]}
        task = {**run.task, **stage["task"]}
        flops += (end - start) * sum(pass_flops(run.model, task, n) for n in lengths) / len(lengths)
        start = stage["end"]
    return flops * run.train.get("batch_size", 64)


def describe(run: RunSpec) -> str:
    return f"{run.model_name} on {run.task_name}, lr={run.lr:g}, seed={run.seed}"


def short(run: RunSpec) -> str:
    """A run in the progress bar's one line: its model and seed."""
    return f"{run.model_name} s{run.seed}"


def record(store: Store, run: RunSpec, outcome: dict) -> str:
    """Write a worker's outcome to the store (the run must have been started); returns its status:
    'done', 'diverged' (stored done, with `diverged_at` and its evaluations at chance) or 'failed'."""
    if outcome["status"] in ("done", "diverged"):
        store.finish_run(
            run.id,
            outcome["evals"],
            outcome["curve"],
            outcome["steps"],
            outcome["num_parameters"],
            outcome["train_seconds"],
            outcome["eval_seconds"],
            host=outcome.get("host"),
            diverged_at=outcome.get("diverged_at"),
            threads=outcome.get("threads"),
        )
    else:
        store.fail_run(run.id, outcome["error"], host=outcome.get("host"))
    return outcome["status"]


@dataclass(frozen=True)
class RunOptions:
    """How an experiment's runs are carried out; none of it is part of a run's id.

    backend 'local': `workers` runs at a time on a process pool (default: one per core; 1 runs
    them in this process, with progress bars). backend 'ray': one Ray task per run on the cluster
    at `address`, or on a local Ray instance with `workers` CPUs. `tensorboard` (a folder), `wandb`
    (a project) and `mlflow` (a tracking URI) log every run to those trackers. `retry_failed`: train
    runs that failed before again. `lease`: seconds a driver's claim on a run lasts unless renewed."""

    device: str = "auto"
    workers: int | None = None
    backend: str = "local"
    address: str | None = None
    gpus_per_run: float | None = None
    tensorboard: str | Path | None = None
    wandb: str | None = None
    mlflow: str | None = None
    retry_failed: bool = True
    lease: float = LEASE_SECONDS
    progress: bool = True

    def check(self) -> None:
        """Check the options' values (a backend option that does not apply, an empty tracker name, a
        Ray address that does not answer), so the command line calls it before the spec's modules
        are imported. Once per options object: `run_experiment` calls it too, and a Ray address is
        probed once, not again for each experiment `reproduce` runs with the same options."""
        if self.__dict__.get("_checked"):
            return
        check_backend(self.backend, self.workers, self.address, self.device, self.gpus_per_run, self.lease)
        for option, value in (("--tensorboard", self.tensorboard), ("--wandb", self.wandb), ("--mlflow", self.mlflow)):
            if value is not None and not str(value).strip():
                raise StatetrackError(f"{option} needs a value; got an empty one")
        object.__setattr__(self, "_checked", True)  # frozen: the mark is no field, in no comparison

    def trackers(self) -> dict:
        """The trackers to log every run to, each checked before anything is written (a tracking
        server that cannot be reached, a folder that cannot be written)."""
        log_to = {
            k: v
            for k, v in {
                "tensorboard": str(Path(self.tensorboard).resolve()) if self.tensorboard else None,
                "wandb": self.wandb,
                "mlflow": self.mlflow,
            }.items()
            if v is not None
        }
        check_log_to(log_to)  # fail now, not after the first run
        if self.tensorboard:
            check_writable(self.tensorboard, "--tensorboard folder")
        return log_to


def run_experiment(
    experiment: Experiment,
    results_dir: str | Path = "results",
    options: RunOptions = RunOptions(),
    store_path: str | Path | None = None,
    log=print,
) -> None:
    """Train every unfinished run of `experiment` (`spec.resolve`) into the store (`store_path`, by
    default `results_dir`/statetrack.db) and record its plan.

    Several drivers may run the same experiment on one store: each claims a run before training it
    and renews its lease every `options.lease` / 4 seconds; the others skip claimed runs, wait for
    them, and take over a run whose lease lapsed (its driver was killed).
    Everything is checked (the options, the device, every folder a run writes) before the store is
    opened, so a bad setting trains nothing and writes nothing.
    """
    options.check()
    log_to = options.trackers()
    spec, runs, imports = experiment.spec, list(experiment.runs), list(experiment.imports)
    device, workers, backend, lease = options.device, options.workers, options.backend, options.lease
    retry_failed, progress, tensorboard = options.retry_failed, options.progress, options.tensorboard
    scale = experiment.scale
    device = experiment_device(spec["name"], runs, device, backend)
    # every file a run and the report write resolves inside its root (a link planted at one is refused
    # now) and can be written: a folder where a checkpoint goes, a read-only results folder, fail before training
    store_at = Path(store_path or store_file(results_dir))
    if not os.path.lexists(store_at) or (store_at.is_file() and not store_at.is_symlink()):
        check_output(store_at, "results store")  # a link, a FIFO, a folder: Store says what it is
    for run in runs:
        check_output(checkpoint_path(results_dir, run.experiment, run.id), "checkpoint")
        if tensorboard:
            tensorboard_dir(tensorboard, run)
    check_outputs(report_outputs(results_dir, spec["name"]), "report file")
    results_dir = Path(results_dir)
    store = Store(store_path or store_file(results_dir))
    git_rev = git_revision()
    if log_to:  # what the trackers tag each run with and score it by
        log_to["context"] = {"git_rev": git_rev, "selection": experiment.selection}
    status = {r.id: store.status(r.id) for r in runs}
    finished = {"done"} if retry_failed else {"done", "failed"}
    # the longest runs first, so that the workers finish together instead of one waiting on a late long run
    todo = sorted((r for r in runs if status[r.id] not in finished), key=training_cost, reverse=True)
    failed_before = sum(1 for r in runs if status[r.id] == "failed")
    held = sum(1 for r in todo if store.holder(r.id, lease) is not None)
    summary = (
        f"experiment {spec['name']} ({scale}): {len(runs)} runs, "
        f"{sum(s == 'done' for s in status.values())} already done"
        + (f", {failed_before} failed before ({'retried' if retry_failed else 'skipped'})" if failed_before else "")
        + (f", {held} in training by other drivers" if held else "")
    )
    # the backend first (a Ray cluster that refuses to be joined fails here), then the plan
    pool = (
        make_backend(
            backend,
            workers,
            results_dir,
            device,
            options.address,
            options.gpus_per_run,
            imports,
            runs=len(todo),
            progress=progress,
            log_to=log_to,
        )
        if todo
        else None
    )
    store.set_plan(spec["name"], spec, experiment.plan())
    if pool is None:  # nothing to train
        log(summary)
        return
    log(f"{summary}; {pool.describe()}")
    pending, started = list(todo), 0
    in_flight: dict[Any, RunSpec] = {}  # the backend's handle -> its run
    elsewhere: list[RunSpec] = []  # runs that another driver trains
    steps: dict[str, tuple[int, int]] = {}  # run id -> (step, total) as pool workers report it
    by_id = {r.id: r for r in todo}
    heartbeat = Heartbeat(store, lease)
    cancel = True
    try:
        with (
            terminate_as_interrupt(),
            heartbeat,
            tqdm(total=len(todo), desc="runs", disable=not progress or pool.in_process) as bar,
        ):
            # in this process each run shows its own progress bars; elsewhere one bar counts the runs
            say = log if pool.in_process else bar.write
            while pending or in_flight or elsewhere:
                while pending and len(in_flight) < pool.slots:
                    run = pending.pop(0)
                    if not store.start_run(
                        run.id,
                        run.experiment,
                        run.model_name,
                        run.task_name,
                        run.seed,
                        run.lr,
                        run.config,
                        git_rev,
                        lease=lease,
                        retry_failed=retry_failed and status[run.id] == "failed",
                    ):
                        if (
                            store.status(run.id) == "running"
                        ):  # another driver trains it: wait for it, or its lease to lapse
                            elsewhere.append(run)
                        else:  # another driver finished it since
                            bar.update(1)
                        continue
                    heartbeat.hold(run.id)
                    started += 1
                    if pool.in_process:
                        pool.share_cores(bool(store.drivers_here(lease)))
                        say(f"[{started}/{len(todo)}] {describe(run)}")
                    in_flight[pool.submit(run)] = run
                if not in_flight and not pending:
                    time.sleep(POLL_SECONDS)  # only other drivers' runs are left
                reports = hasattr(pool, "reports")  # pool workers report their steps: wake up to show them
                for handle in (
                    pool.wait(list(in_flight), timeout=POLL_SECONDS if elsewhere or reports else None)
                    if in_flight
                    else []
                ):
                    run = in_flight.pop(handle)
                    outcome = pool.outcome(handle)
                    outcome_status = record(store, run, outcome)
                    heartbeat.release(run.id)
                    if outcome_status == "failed":
                        say(f"  failed: {describe(run)} (run {run.id}): {outcome['error'].splitlines()[0]}")
                    elif outcome_status == "diverged":
                        say(f"  diverged: {describe(run)} at step {outcome['diverged_at']} (scored as chance)")
                    elif not pool.in_process:
                        say(f"done    {describe(run)}")
                    steps.pop(run.id, None)
                    bar.update(1)
                if reports:
                    steps.update(pool.reports())
                    if steps and progress:
                        bar.set_postfix_str(
                            "; ".join(f"{short(by_id[i])} {s}/{n}" for i, (s, n) in steps.items() if i in by_id),
                            refresh=True,
                        )
                still = []
                for run in elsewhere:  # finished by their driver, or free again (that driver was killed)
                    if store.status(run.id) != "running":
                        bar.update(1)
                    elif store.holder(run.id, lease) is None:
                        say(f"taking over {describe(run)} (its driver stopped renewing its lease)")
                        pending.append(run)
                    else:
                        still.append(run)
                elsewhere = still
        cancel = False
    finally:
        if cancel:
            store.release_leases(heartbeat.held_runs())
        pool.close(cancel=cancel)
