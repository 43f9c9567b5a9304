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
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from statetrack.errors import StatetrackError, terminate_as_interrupt
from statetrack.experiments.backends import check_backend, experiment_device, make_backend
from statetrack.experiments.spec import Experiment, RunSpec
from statetrack.experiments.worker import checkpoint_path
from statetrack.models.sizing import pass_flops
from statetrack.options import RunOptions
from statetrack.paths import SNAPSHOTS, check_output, check_outputs, check_writable, report_outputs, store_file
from statetrack.store import Outcome, Plan, Store
from statetrack.training.loggers import check_log_to, tensorboard_dir
from statetrack.training.train import now

SNAPSHOTS_IN_PACKAGE = f":(exclude){SNAPSHOTS}/*.json"  # a git pathspec, relative to the package


def git_revision(here: Path | None = None) -> str:
    """The git revision of the package's source (with '+dirty' for uncommitted changes to the
    package, shipped specs included, under `here`: the statetrack folder), or 'unknown'. Only the
    code and the specs count: what `reproduce` and `table --zoo` write (the committed snapshots, in
    the package's SNAPSHOTS folder, the book, the README's blocks) changes no result, so an
    experiment measured after another one's snapshot was written (or the state table after its
    pilot's) still names a clean revision."""
    here = here or Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--", ".", SNAPSHOTS_IN_PACKAGE],
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
    'done', 'diverged' (stored done, with `diverged_at` and its evaluations at chance), 'paused'
    (stopped at its deadline with its checkpoint: the claim is given up, so any driver resumes it)
    or 'failed'."""
    if outcome["status"] == "paused":
        store.release_leases([run.id])
    elif outcome["status"] in ("done", "diverged"):
        store.finish_run(
            run.id,
            Outcome(
                outcome["evals"],
                outcome["curve"],
                outcome["steps"],
                outcome["num_parameters"],
                outcome["train_seconds"],
                outcome["eval_seconds"],
                host=outcome.get("host"),
                diverged_at=outcome.get("diverged_at"),
                threads=outcome.get("threads"),
                revisions=tuple(outcome.get("revisions", ())),
            ),
        )
    else:
        store.fail_run(run.id, outcome["error"], host=outcome.get("host"))
    return outcome["status"]


def check_options(options: RunOptions) -> None:
    """Check the options' values (a backend option that does not apply, an empty tracker name, a
    Ray address that does not answer), so the command line calls it before the spec's modules are
    imported. Once per options object: `run_experiment` calls it too, and a Ray address is probed
    once, not again for each experiment `reproduce` runs with the same options."""
    if options.__dict__.get("_checked"):
        return
    check_backend(
        options.backend, options.workers, options.address, options.device, options.gpus_per_run, options.lease
    )
    for option, value in (
        ("--tensorboard", options.tensorboard),
        ("--wandb", options.wandb),
        ("--mlflow", options.mlflow),
    ):
        if value is not None and not str(value).strip():
            raise StatetrackError(f"{option} needs a value; got an empty one")
    object.__setattr__(options, "_checked", True)  # frozen: the mark is no field, in no comparison


def trackers(options: RunOptions) -> dict:
    """The trackers to log every run to, each checked before anything is written (a tracking server
    that cannot be reached, a folder that cannot be written)."""
    log_to = {
        k: v
        for k, v in {
            "tensorboard": str(Path(options.tensorboard).resolve()) if options.tensorboard else None,
            "wandb": options.wandb,
            "mlflow": options.mlflow,
        }.items()
        if v is not None
    }
    check_log_to(log_to)  # fail now, not after the first run
    if options.tensorboard:
        check_writable(options.tensorboard, "--tensorboard folder")
    return log_to


def run_experiment(
    experiment: Experiment,
    results_dir: str | Path = "results",
    options: RunOptions | None = None,
    store_path: str | Path | None = None,
    log=print,
) -> Plan:
    """Train every unfinished run of `experiment` (`spec.resolve`) into the store (`store_path`, by
    default `results_dir`/statetrack.db) and record its plan, under `options` (default: `RunOptions()`);
    returns the plan as stored.

    Several drivers may run the same experiment on one store: each claims a run before training it
    and renews its lease every `options.lease` / 4 seconds; the others skip claimed runs, wait for
    them, and take over a run whose lease lapsed (its driver was killed).
    Everything is checked (the options, the device, every folder a run writes) before the store is
    opened, so a bad setting trains nothing and writes nothing.
    """
    options = options or RunOptions()
    check_options(options)
    log_to = trackers(options)
    spec, runs = experiment.spec, list(experiment.runs)
    device = experiment_device(spec["name"], runs, options.device, options.backend)
    _check_outputs(experiment, results_dir, store_path, options.tensorboard)
    results_dir = Path(results_dir)
    store = Store(store_path or store_file(results_dir))
    git_rev = git_revision()
    if log_to:  # what the trackers tag each run with and score it by
        log_to["context"] = {"git_rev": git_rev, "selection": experiment.selection}
    status = {r.id: store.status(r.id) for r in runs}
    finished = {"done"} if options.retry_failed else {"done", "failed"}
    # the longest runs first, so that the workers finish together instead of one waiting on a late long run
    todo = sorted((r for r in runs if status[r.id] not in finished), key=training_cost, reverse=True)
    failed_before = sum(1 for r in runs if status[r.id] == "failed")
    held = sum(1 for r in todo if store.holder(r.id, options.lease) is not None)
    summary = (
        f"experiment {spec['name']} ({experiment.scale}): {len(runs)} runs, "
        f"{sum(s == 'done' for s in status.values())} already done"
        + (
            f", {failed_before} failed before ({'retried' if options.retry_failed else 'skipped'})"
            if failed_before
            else ""
        )
        + (f", {held} in training by other drivers" if held else "")
    )
    if todo and options.deadline is not None and now() >= options.deadline:
        summary += f"; past the deadline (--stop-after): {len(todo)} runs not started, the same command resumes them"
        todo = []
    # the backend first (a Ray cluster that refuses to be joined fails here), then the plan
    pool = (
        make_backend(options, results_dir, device, list(experiment.imports), runs=len(todo), log_to=log_to)
        if todo
        else None
    )
    plan = store.set_plan(experiment.plan())
    if pool is None:  # nothing to train
        log(summary)
        return plan
    log(f"{summary}; {pool.describe()}")
    _Drive(pool, store, options, git_rev, status, todo, log).run()
    return plan


def _check_outputs(experiment: Experiment, results_dir, store_path, tensorboard) -> None:
    """Every file a run and the report write resolves inside its root (a link planted at one is
    refused now) and can be written: a folder where a checkpoint goes, a read-only results folder,
    fail before training."""
    store_at = Path(store_path or store_file(results_dir))
    if not os.path.lexists(store_at) or (store_at.is_file() and not store_at.is_symlink()):
        check_output(store_at, "results store")  # a link, a FIFO, a folder: Store says what it is
    for run in experiment.runs:
        check_output(checkpoint_path(results_dir, run.experiment, run.id), "checkpoint")
        if tensorboard:
            tensorboard_dir(tensorboard, run)
    check_outputs(report_outputs(results_dir, experiment.name), "report file")


class _Drive:
    """One driver's training of `todo` on `pool` (`run_experiment`): it claims each run in the store
    before submitting it, records each outcome, waits for the runs another driver trains and takes
    over those whose lease lapsed."""

    def __init__(self, pool, store: Store, options: RunOptions, git_rev: str, status: dict, todo: list[RunSpec], log):
        self.pool, self.store, self.options, self.git_rev, self.status = pool, store, options, git_rev, status
        self.todo, self.log = todo, log
        self.pending, self.started, self.finished = list(todo), 0, 0
        self.in_flight: dict[Any, RunSpec] = {}  # the backend's handle -> its run
        self.elsewhere: list[RunSpec] = []  # runs that another driver trains
        self.steps: dict[str, tuple[int, int]] = {}  # run id -> (step, total) as pool workers report it
        self.by_id = {r.id: r for r in todo}
        self.paused: list[RunSpec] = []  # runs stopped at the deadline, to resume
        self.heartbeat = Heartbeat(store, options.lease)

    def run(self) -> None:
        pool, cancel = self.pool, True
        try:
            with (
                terminate_as_interrupt(),
                self.heartbeat,
                tqdm(total=len(self.todo), desc="runs", disable=not self.options.progress or pool.in_process) as bar,
            ):
                # in this process each run shows its own progress bars; elsewhere one bar counts the runs
                say = self.log if pool.in_process else bar.write
                while self.in_flight or ((self.pending or self.elsewhere) and not self.past_deadline()):
                    while self.pending and len(self.in_flight) < pool.slots and not self.past_deadline():
                        self._submit(self.pending.pop(0), bar, say)
                    if not self.in_flight and not self.pending:
                        time.sleep(POLL_SECONDS)  # only other drivers' runs are left
                    self._collect(bar, say)
                    self._check_elsewhere(bar, say)
            cancel = False
            if self.paused or (self.past_deadline() and self.pending):
                self.log(
                    f"stopped at the deadline (--stop-after): {len(self.paused)} runs paused with their checkpoints, "
                    f"{len(self.pending)} not started; the same command again resumes them"
                )
        finally:
            if cancel:
                self.store.release_leases(self.heartbeat.held_runs())
            pool.close(cancel=cancel)

    def past_deadline(self) -> bool:
        """Whether training has reached `options.deadline`: no run starts after it."""
        return self.options.deadline is not None and now() >= self.options.deadline

    def _submit(self, run: RunSpec, bar, say) -> None:
        """Claim `run` in the store and hand it to the pool; a run another driver holds is waited
        for, one it finished since is counted."""
        retry = self.options.retry_failed and self.status[run.id] == "failed"
        if not self.store.start_run(run.claim(self.git_rev), lease=self.options.lease, retry_failed=retry):
            if self.store.status(run.id) == "running":  # another driver trains it: wait for it, or its lease to lapse
                self.elsewhere.append(run)
            else:  # another driver finished it since
                self._count(bar)
            return
        self.heartbeat.hold(run.id)
        self.started += 1
        if self.pool.in_process:
            self.pool.share_cores(bool(self.store.drivers_here(self.options.lease)))
            say(f"[{self.started}/{len(self.todo)}] {describe(run)}")
        self.in_flight[self.pool.submit(run)] = run

    def _collect(self, bar, say) -> None:
        """Record the outcomes of the runs that finished (waiting for one when nothing else is to be
        done), and show the steps pool workers report."""
        pool = self.pool
        reports = hasattr(pool, "reports")  # pool workers report their steps: wake up to show them
        handles = (
            pool.wait(list(self.in_flight), timeout=POLL_SECONDS if self.elsewhere or reports else None)
            if self.in_flight
            else []
        )
        for handle in handles:
            run = self.in_flight.pop(handle)
            outcome = pool.outcome(handle)
            outcome_status = record(self.store, run, outcome)
            self.heartbeat.release(run.id)
            if outcome_status == "failed":
                say(f"  failed: {describe(run)} (run {run.id}): {outcome['error'].splitlines()[0]}")
            elif outcome_status == "diverged":
                say(f"  diverged: {describe(run)} at step {outcome['diverged_at']} (scored as chance)")
            elif outcome_status == "paused":
                self.paused.append(run)
                say(f"  paused: {describe(run)} at step {outcome['steps']} (its checkpoint resumes it)")
            elif not pool.in_process:
                say(f"done    [{self.finished + 1}/{len(self.todo)}] {describe(run)}")  # the count without a bar
            self.steps.pop(run.id, None)
            if outcome_status != "paused":
                self._count(bar)
        if reports:
            self.steps.update(pool.reports())
            if self.steps and self.options.progress:
                bar.set_postfix_str(
                    "; ".join(f"{short(self.by_id[i])} {s}/{n}" for i, (s, n) in self.steps.items() if i in self.by_id),
                    refresh=True,
                )

    def _count(self, bar) -> None:
        """One more run of the plan finished (here or by another driver)."""
        self.finished += 1
        bar.update(1)

    def _check_elsewhere(self, bar, say) -> None:
        """The runs other drivers train: counted once finished, taken over once free again (that
        driver was killed)."""
        still = []
        for run in self.elsewhere:
            if self.store.status(run.id) != "running":
                self._count(bar)
            elif self.store.holder(run.id, self.options.lease) is None:
                say(f"taking over {describe(run)} (its driver stopped renewing its lease)")
                self.pending.append(run)
            else:
                still.append(run)
        self.elsewhere = still
