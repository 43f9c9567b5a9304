"""One run on a worker: train, evaluate, and hand back an outcome; touches no store.

Every backend (in this process, a local process pool, Ray) calls `train_and_evaluate`, and the
driver alone writes what it returns to the store. `checkpoint_path` is where a run's checkpoint
lives under the results folder, for the trainer (resume) and for analyses of a finished run.

A worker process ends with its driver, however the driver ends (kill -9 included; `die_with`): a
worker left running would go on training and write the checkpoint that a driver taking the run
over also writes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from statetrack.allocator import keep_freed_memory
from statetrack.experiments.spec import RunSpec
from statetrack.models import zoo
from statetrack.paths import under
from statetrack.plugins import load_imports
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.loggers import ProgressLogger, run_loggers, selection_score
from statetrack.training.train import Diverged, Paused, Trainer


def checkpoint_path(results_dir: str | Path, experiment: str, run_id: str) -> Path:
    return under(results_dir, experiment, "checkpoints", f"{run_id}.pt")


def failed_outcome(error: str, host: str | None = None) -> dict:
    return {"status": "failed", "error": error, "host": host}


def chance_evals(run: RunSpec, task) -> list[dict]:
    """The evaluation rows of a run whose training diverged: at every evaluation length and variant,
    accuracy at that (variant) task's chance, scaled and sequence accuracy 0, no samples. The model
    (its parameters nan or inf) is not evaluated: an argmax over nan logits can land above chance."""
    variants = {"": {}, **(run.eval.get("variants") or {})}
    rows = []
    for variant, overrides in variants.items():
        chance = (task if not overrides else make_task(**{**run.task, **overrides})).chance
        rows += [
            {
                "length": length,
                "accuracy": chance,
                "scaled_accuracy": 0.0,
                "sequence_accuracy": 0.0,
                "samples": 0,
                "variant": variant,
            }
            for length in run.eval["lengths"]
        ]
    return rows


PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCH_SECONDS = 1.0  # how often the watchdog looks for the driver
_watched: set[tuple[int, int | None]] = set()  # the drivers this process already ends with


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (/proc, Linux), None where unknown:
    with the pid, it names a process even after the pid is reused."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def driver_identity() -> tuple[str, int, int | None]:
    """(host, pid, start time) of this process, for `die_with` in the workers it starts."""
    return socket.gethostname(), os.getpid(), process_start(os.getpid())


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        pass
    return start is None or process_start(pid) in (start, None)


def _end_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_with(driver: tuple[str, int, int | None] | None) -> None:
    """End this process (SIGKILL) when the driver `driver_identity()` names ends. The driver's child
    on Linux: the kernel's parent-death signal (prctl PR_SET_PDEATHSIG), armed and then checked
    against a driver that ended before it was; otherwise (another OS, or a Ray worker, whose
    parent is Ray's) a daemon thread that looks for the driver's process every WATCH_SECONDS. A
    driver on another host is left to Ray, which ends the tasks of a driver that has gone. Each
    driver is watched once per process."""
    if driver is None:
        return
    host, pid, start = driver
    if host != socket.gethostname() or pid == os.getpid() or (pid, start) in _watched:
        return
    _watched.add((pid, start))
    child = os.getppid() == pid
    if child and sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
        if armed:
            if os.getppid() != pid:  # the driver ended before the signal was armed
                _end_now()
            return

    def watch():
        while (os.getppid() == pid) if child else _alive(pid, start):
            time.sleep(WATCH_SECONDS)
        _end_now()

    threading.Thread(target=watch, name="statetrack-driver-watch", daemon=True).start()


def prepare_worker(
    threads: int | None, imports: Sequence[str] = (), driver: tuple[str, int, int | None] | None = None
) -> None:
    """Set up a worker process: it ends with its `driver` (`die_with`; None in the driver itself),
    torch threads (1 for pool workers: small models run best single-threaded side by side, and
    repeatably) and the user's modules, imported before any run."""
    die_with(driver)
    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()  # large tensors reuse heap memory instead of faulting in fresh pages
    load_imports(list(imports))


def evaluate_run(run: RunSpec, model, task, progress: bool = True) -> list[dict]:
    """A trained run's evaluation rows: at every length of `run.eval`, on its task (variant '') and
    on each of its evaluation variants."""
    e = run.eval
    variants = {"": {}, **(e.get("variants") or {})}  # '' = the training task itself
    evals = []
    for variant, overrides in variants.items():
        scored = task if not overrides else make_task(**{**run.task, **overrides})
        rows = evaluate_lengths(
            model,
            scored,
            e["lengths"],
            Sampling.of(e, chunked=zoo.get_entry(run.model["name"]).recurrent),
            progress=progress,
            traces=e.get("traces", 0),
            positions=True,
        )
        evals += [{**row, "variant": variant} for row in rows]
    return evals


def train_and_evaluate(
    run: RunSpec,
    results_dir: str | Path,
    device: str = "auto",
    progress: bool = True,
    log_to: dict | None = None,
    progress_queue=None,
    deadline: float | None = None,
) -> dict:
    """Train and evaluate one run; returns its outcome.

    Outcome: {status: 'done', evals, curve, steps, num_parameters, train_seconds, eval_seconds, host,
    threads}; {status: 'diverged', diverged_at, message, evals, curve, steps, num_parameters,
    train_seconds, eval_seconds, host, threads} when the training loss became non-finite at step
    diverged_at (an outcome of the setting: evals at chance, `chance_evals`; curve up to there);
    {status: 'paused', steps, host} when training reached `deadline` (a `time.time()`) first, its
    checkpoint saved (`Trainer.fit`); or {status: 'failed', error, host} for an exception (the grid
    goes on). `threads`: the torch threads it trained with (a run is bit-identical at a fixed thread
    count only); `revisions`: the code's revisions it trained at, in order (more than one when it was
    resumed from a checkpoint written at another).
    """
    threads = torch.get_num_threads()
    loggers, ended = [], "failed"  # how the run ended, as the trackers are told
    try:
        torch.manual_seed(run.seed)  # parameter initialisation
        task = make_task(**run.task)
        model = zoo.build_model(run.model, task.vocab_size, task.num_classes)
        assert run.settings is not None  # set with the run
        config = run.settings.model_copy(update={"device": device})  # the trainer checks it
        path = checkpoint_path(results_dir, run.experiment, run.id)
        loggers = run_loggers(run, log_to or {})
        if progress_queue is not None:
            loggers.append(ProgressLogger(progress_queue, run.id, config.steps))
        from statetrack.experiments.runner import git_revision  # the runner imports this module

        trainer = Trainer(model, task, config, path, progress=progress, loggers=loggers, revision=git_revision())
        try:
            trainer.fit(deadline)
        except Paused:
            ended = "killed"  # to the trackers: this attempt ends here, the next one resumes the run
            return {"status": "paused", "steps": trainer.step, "host": socket.gethostname()}
        except Diverged as diverged:
            evals = chance_evals(run, task)
            for logger in loggers:
                logger.log_eval(evals, selection_score(evals, log_to or {}))
            ended = "diverged"
            return {
                "status": "diverged",
                "diverged_at": diverged.step,
                "message": str(diverged),
                "evals": evals,
                "curve": trainer.curve,
                "steps": trainer.step,
                "num_parameters": model.num_parameters(),
                "train_seconds": trainer.seconds,
                "eval_seconds": 0.0,
                "host": socket.gethostname(),
                "threads": threads,
                "revisions": trainer.revisions,
            }
        start = time.perf_counter()
        evals = evaluate_run(run, model, task, progress)
        for logger in loggers:
            logger.log_eval(evals, selection_score(evals, log_to or {}))
        ended = "done"
        return {
            "status": "done",
            "evals": evals,
            "curve": trainer.curve,
            "steps": trainer.step,
            "num_parameters": model.num_parameters(),
            "train_seconds": trainer.seconds,
            "eval_seconds": time.perf_counter() - start,
            "host": socket.gethostname(),
            "threads": threads,
            "revisions": trainer.revisions,
        }
    except KeyboardInterrupt:
        ended = "killed"
        raise
    except Exception as error:  # recorded, and the grid goes on
        return failed_outcome(f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}", socket.gethostname())
    finally:
        for logger in loggers:
            try:
                logger.close(ended)
            except Exception as error:  # a tracker that cannot close its run costs the tracker, never the stored result
                print(
                    f"warning: {type(logger).__name__} could not end run {run.id}: "
                    f"{' '.join(str(error).split())[:200]}",
                    file=sys.stderr,
                )
