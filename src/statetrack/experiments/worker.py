"""One run on a worker: train, evaluate, and hand back an outcome; touches no store.

Every backend (in this process, a local process pool, Ray) calls `train_and_evaluate`, and the
driver alone writes what it returns to the store. `checkpoint_path` is where a run's checkpoint
lives under the results folder, for the trainer (resume) and for analyses of a finished run.
"""

from __future__ import annotations

import socket
import time
import traceback
from pathlib import Path

import torch

from statetrack import zoo
from statetrack.allocator import keep_freed_memory
from statetrack.evaluate import evaluate_lengths
from statetrack.experiments.spec import RunSpec
from statetrack.paths import under
from statetrack.plugins import load_imports
from statetrack.tasks import make_task
from statetrack.train import Diverged, Trainer, TrainConfig


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
        rows += [{"length": length, "accuracy": chance, "scaled_accuracy": 0.0, "sequence_accuracy": 0.0, "samples": 0,
                  "variant": variant} for length in run.eval["lengths"]]
    return rows


def prepare_worker(threads: int | None, imports: list[str] = ()) -> None:
    """Set up a worker process: torch threads (1 for pool workers: small models run best
    single-threaded side by side, and repeatably) and the user's modules, imported before any run."""
    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()  # large tensors reuse heap memory instead of faulting in fresh pages
    load_imports(list(imports))


def train_and_evaluate(run: RunSpec, results_dir: str | Path, device: str = "auto", progress: bool = True) -> dict:
    """Train and evaluate one run; returns its outcome.

    Outcome: {status: 'done', evals, curve, steps, num_parameters, train_seconds, eval_seconds, host};
    {status: 'diverged', diverged_at, message, evals, curve, steps, num_parameters, train_seconds,
    eval_seconds, host} when the training loss became non-finite at step diverged_at (an outcome
    of the setting: evals at chance, `chance_evals`; curve up to there); or {status: 'failed',
    error, host} for an exception (the grid goes on).
    """
    try:
        torch.manual_seed(run.seed)  # parameter initialisation
        task = make_task(**run.task)
        model = zoo.build_model(run.model, task.vocab_size, task.num_classes)
        config = TrainConfig.from_dict({**run.train, "device": device})
        path = checkpoint_path(results_dir, run.experiment, run.id)
        trainer = Trainer(model, task, config, path, progress=progress)
        try:
            trainer.fit()
        except Diverged as diverged:
            return {"status": "diverged", "diverged_at": diverged.step, "message": str(diverged), "evals": chance_evals(run, task),
                    "curve": trainer.curve, "steps": trainer.step, "num_parameters": model.num_parameters(),
                    "train_seconds": trainer.seconds, "eval_seconds": 0.0, "host": socket.gethostname()}
        start = time.perf_counter()
        e = run.eval
        variants = {"": {}, **(e.get("variants") or {})}  # '' = the training task itself
        evals = []
        for variant, overrides in variants.items():
            scored = task if not overrides else make_task(**{**run.task, **overrides})
            rows = evaluate_lengths(
                model, scored, e["lengths"], samples=e["samples"], batch_size=e["batch_size"], seed=e["seed"],
                chunk_size=e["chunk_size"] if zoo.get_entry(run.model["name"]).recurrent else None,
                device=trainer.device, progress=progress, traces=e.get("traces", 0),
            )
            evals += [{**row, "variant": variant} for row in rows]
        return {"status": "done", "evals": evals, "curve": trainer.curve, "steps": trainer.step,
                "num_parameters": model.num_parameters(), "train_seconds": trainer.seconds,
                "eval_seconds": time.perf_counter() - start, "host": socket.gethostname()}
    except KeyboardInterrupt:
        raise
    except Exception as error:  # recorded, and the grid goes on
        return failed_outcome(f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}", socket.gethostname())
