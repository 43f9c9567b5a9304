"""How an experiment's runs are carried out (`RunOptions`), and the command line's flags for it.

The one list of the run options: each field carries its flag and help, so `statetrack run` and
`statetrack reproduce` take exactly these (`add_arguments`, `from_arguments`). This module imports
nothing heavy, so building the command line's parser stays fast; the options are checked by
`experiments.runner.check_options`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path

from statetrack import limits
from statetrack.store import LEASE_SECONDS


def _option(default, flag: str, help: str, **argument):
    """A field with its command-line flag: `switch` (a flag without value that sets the field to the
    opposite of its default) or the keyword arguments of `add_argument` (type, choices, metavar)."""
    return field(default=default, metadata={"flag": flag, "help": help, **argument})


@dataclass(frozen=True)
class RunOptions:
    """How an experiment's runs are carried out; none of it is part of a run's id.

    backend 'local': `workers` runs at a time on a process pool (default: one per core; 1 runs
    them in this process, with progress bars). backend 'ray': one Ray task per run on the cluster
    at `address`, or on a local Ray instance with `workers` CPUs. `tensorboard` (a folder), `wandb`
    (a project) and `mlflow` (a tracking URI) log every run to those trackers. `retry_failed`: train
    runs that failed before again. `lease`: seconds a driver's claim on a run lasts unless renewed.
    `deadline` (a `time.time()`; on the command line `--stop-after SECONDS`, counted from the
    command's start): training stops there, each run in flight saving its checkpoint and none
    starting after it; the same command again resumes them (a time-limited session in slices)."""

    device: str = _option("auto", "--device", "auto (CUDA when present), cpu or cuda")
    progress: bool = _option(True, "--no-progress", "no progress bars", switch=True)
    workers: int | None = _option(
        None,
        "--workers",
        "local: parallel runs on a process pool (default: CPU cores; 1 on CUDA); ray: CPUs of a local Ray instance",
        type=limits.argparse_int(),
    )
    backend: str = _option(
        "local",
        "--backend",
        "local: a process pool on this machine; ray: one Ray task per run (pip install 'statetrack[ray]')",
        choices=["local", "ray"],
    )
    address: str | None = _option(
        None,
        "--address",
        "ray: join the cluster at this address (e.g. auto, or HEAD_IP:6379); default: a local Ray instance",
    )
    gpus_per_run: float | None = _option(
        None,
        "--gpus-per-run",
        "ray: GPUs per run (default: 1 when the cluster has GPUs; fractions share one)",
        type=float,
    )
    tensorboard: str | Path | None = _option(
        None,
        "--tensorboard",
        "log each run to TensorBoard while it trains, under DIR/EXPERIMENT (pip install 'statetrack[tensorboard]')",
        metavar="DIR",
    )
    wandb: str | None = _option(
        None,
        "--wandb",
        "log each run to Weights & Biases while it trains, in PROJECT (WANDB_MODE=offline works offline; "
        "pip install 'statetrack[wandb]')",
        metavar="PROJECT",
    )
    mlflow: str | None = _option(
        None,
        "--mlflow",
        "log each run to MLflow while it trains, at the tracking URI (e.g. http://host:5000), in an MLflow "
        "experiment of the experiment's name (pip install 'statetrack[mlflow]')",
        metavar="URI",
    )
    retry_failed: bool = _option(
        True,
        "--skip-failed",
        "on a re-run, leave runs that failed before as they are (default: retry them)",
        switch=True,
    )
    lease: float = _option(
        LEASE_SECONDS,
        "--lease",
        "drivers sharing a store: a run whose driver has not renewed its claim for this long is taken over "
        f"(default: {LEASE_SECONDS:g}; on one machine a killed driver's runs are free at once)",
        type=float,
        metavar="SECONDS",
    )

    deadline: float | None = _option(
        None,
        "--stop-after",
        "stop training this many seconds after the command starts: runs in flight save a checkpoint and stop, "
        "none starts after it; the same command again resumes them",
        type=limits.seconds_from_now,
        metavar="SECONDS",
    )

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Every option as a flag of `parser`, in the order of the fields."""
        for f in fields(cls):
            meta = dict(f.metadata)
            flag, help = meta.pop("flag"), meta.pop("help")
            if meta.pop("switch", False):
                parser.add_argument(
                    flag, dest=f.name, action="store_const", const=not f.default, default=f.default, help=help
                )
            else:
                parser.add_argument(flag, dest=f.name, default=f.default, help=help, **meta)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RunOptions:
        """The options a parser built with `add_arguments` parsed."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})
