"""Training loggers: one interface the trainer calls with each point of a run's training curve as it
is written, then with the run's evaluation.

A `Logger` has `log_point(point)` (a curve point: step, loss, accuracy and the model's metrics, see
`Trainer`), `log_eval(rows)` (the per-length evaluation rows, as the store keeps them) and
`close()`. The same loggers serve a run while it trains (`statetrack run --tensorboard DIR
--wandb PROJECT --mlflow URI`, written from the process that trains it) and a finished run replayed
from the store (`statetrack export`). TensorBoard, Weights & Biases and MLflow are optional
packages, imported when a logger is made, with an error naming the extra to install.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from statetrack.errors import StatetrackError
from statetrack.paths import open_for_write, under

# where `log_to` (a run's logging settings) may point: {"tensorboard": DIR, "wandb": PROJECT, "mlflow": URI}
KINDS = ("tensorboard", "wandb", "mlflow")
EVAL_KEYS = ("accuracy", "scaled_accuracy", "sequence_accuracy")


def scalars(prefix: str, row: dict, keys: tuple[str, ...]) -> dict[str, float]:
    """`prefix/key` -> value for the keys present (not None) and every entry of row['metrics']."""
    out = {f"{prefix}/{k}": float(row[k]) for k in keys if row.get(k) is not None}
    out.update({f"{prefix}/{k}": float(v) for k, v in (row.get("metrics") or {}).items() if v is not None})
    return out


def eval_label(row: dict) -> str:
    """'eval' for the training task, 'eval_VARIANT' for an evaluation variant."""
    return f"eval_{row['variant']}" if row.get("variant") else "eval"


def tensorboard_dir(root: str | Path, run) -> Path:
    """A run's TensorBoard folder: ROOT/EXPERIMENT/<run label>, refused outside ROOT."""
    return under(root, run.experiment, run_label(run))


def run_label(run) -> str:
    """A run's name in a tracker: model, task, lr, seed and the first 8 characters of its id."""
    text = f"{run.model_name}_{run.task_name}_lr{run.lr:g}_seed{run.seed}_{run.id[:8]}"
    return re.sub(r"[^A-Za-z0-9.=,+-]+", "_", text).strip("_")


class Logger:
    """The interface: every method may be called any number of times (none included)."""

    def log_point(self, point: dict) -> None:
        pass

    def log_eval(self, rows: list[dict]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(Logger):
    """TensorBoard events in `folder`: train/loss, train/accuracy and train/<metric> per step, flushed
    at each point (the event file grows while the run trains); eval/<metric> with the length as step."""

    def __init__(self, folder: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise StatetrackError("TensorBoard logging needs the tensorboard package: pip install 'statetrack[tensorboard]'") from None
        self.folder = Path(folder)
        self.writer = SummaryWriter(log_dir=str(folder))

    def log_point(self, point: dict) -> None:
        for key, value in scalars("train", point, ("loss", "accuracy")).items():
            self.writer.add_scalar(key, value, point["step"])
        self.writer.flush()

    def log_eval(self, rows: list[dict]) -> None:
        for row in rows:
            for key, value in scalars(eval_label(row), row, EVAL_KEYS).items():
                self.writer.add_scalar(key, value, row["length"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger(Logger):
    """A Weights & Biases run in `project`: train/* per step as history; eval/* as a table (one row
    per variant and length) and as summary values `eval/<metric>@<length>`. `mode` as wandb's
    (online, offline; default: WANDB_MODE, else online)."""

    def __init__(self, project: str, name: str, config: dict, folder: str | Path | None = None, mode: str | None = None):
        try:
            import wandb
        except ImportError:
            raise StatetrackError("W&B logging needs the wandb package: pip install 'statetrack[wandb]'") from None
        self.wandb = wandb
        kwargs = {"dir": str(folder)} if folder else {}
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, name=name, config=config, mode=mode, reinit="create_new", **kwargs)

    def log_point(self, point: dict) -> None:
        self.run.log(scalars("train", point, ("loss", "accuracy")), step=point["step"])

    def log_eval(self, rows: list[dict]) -> None:
        if not rows:
            return
        columns = ["variant", "length", *EVAL_KEYS]
        table = self.wandb.Table(columns=columns, data=[[r.get("variant") or "", r["length"], *(r.get(k) for k in EVAL_KEYS)] for r in rows])
        self.run.log({"eval/table": table})
        for row in rows:
            for key, value in scalars(eval_label(row), row, EVAL_KEYS).items():
                self.run.summary[f"{key}@{row['length']}"] = value

    def close(self) -> None:
        self.run.finish()


class MLflowLogger(Logger):
    """An MLflow run in experiment `experiment` at `tracking_uri`: the run's settings as params,
    train/* per step, eval/* with the length as step (MLflow metric keys allow '/')."""

    def __init__(self, tracking_uri: str, experiment: str, name: str, params: dict):
        try:
            import mlflow
            from mlflow.entities import Param
        except ImportError:
            raise StatetrackError("MLflow logging needs the mlflow package: pip install 'statetrack[mlflow]'") from None
        self.client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        self.client.log_batch(self.run_id, params=[Param(key, str(value)[:6000]) for key, value in params.items()])

    def _log(self, values: dict[str, float], step: int) -> None:
        """One request per point, not one per metric."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, stamp, step) for key, value in values.items()])

    def log_point(self, point: dict) -> None:
        self._log(scalars("train", point, ("loss", "accuracy")), point["step"])

    def log_eval(self, rows: list[dict]) -> None:
        for row in rows:
            self._log(scalars(eval_label(row), row, EVAL_KEYS), row["length"])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class ProgressLogger(Logger):
    """Sends (run id, step, total steps) to a queue at each curve point: how a pool worker shows the
    driver where its run is."""

    def __init__(self, queue, run_id: str, total: int):
        self.queue, self.run_id, self.total = queue, run_id, total

    def log_point(self, point: dict) -> None:
        try:
            self.queue.put_nowait((self.run_id, point["step"], self.total))
        except Exception:  # a full or closed queue costs the display, never the run
            pass


def check_log_to(log_to: dict) -> None:
    """Fail now, before anything trains, when a logger's package is missing or its setting is bad."""
    unknown = sorted(set(log_to) - set(KINDS))
    if unknown:
        raise StatetrackError(f"unknown logger {unknown[0]!r}; expected one of {', '.join(KINDS)}")
    packages = {"tensorboard": ("torch.utils.tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}
    for kind, value in log_to.items():
        if not value or not str(value).strip():
            raise StatetrackError(f"--{kind} needs a value (a folder, a project or a tracking URI), got {value!r}")
        module, extra = packages[kind]
        try:
            __import__(module)
        except ImportError:
            raise StatetrackError(f"--{kind} needs the {extra} package: pip install 'statetrack[{extra}]'") from None


def run_loggers(run, log_to: dict) -> list[Logger]:
    """The loggers `log_to` asks for, for one run: TensorBoard events in DIR/EXPERIMENT/<run label>,
    a W&B run in the project, an MLflow run in the experiment's name at the tracking URI."""
    loggers: list[Logger] = []
    try:
        if log_to.get("tensorboard"):
            loggers.append(TensorBoardLogger(tensorboard_dir(log_to["tensorboard"], run)))
        settings = {"experiment": run.experiment, "run_id": run.id, "model": run.model, "task": run.task, "lr": run.lr,
                    "seed": run.seed, "train": run.train}
        if log_to.get("wandb"):
            loggers.append(WandbLogger(log_to["wandb"], run_label(run), settings))  # WANDB_MODE, WANDB_DIR as wandb reads them
        if log_to.get("mlflow"):
            loggers.append(MLflowLogger(log_to["mlflow"], run.experiment, run_label(run), settings))
    except BaseException:
        for logger in loggers:
            logger.close()
        raise
    return loggers


def replay(loggers: list[Logger], curve: list[dict], evals: list[dict]) -> None:
    """A finished run's curve and evaluation, as it would have been logged live; closes the loggers."""
    try:
        for point in curve:
            for logger in loggers:
                logger.log_point(point)
        for logger in loggers:
            logger.log_eval(evals)
    finally:
        for logger in loggers:
            logger.close()


# ---- finished runs ---------------------------------------------------------------------------------
EXPORTS = ("csv", "tensorboard", "wandb", "mlflow")


def stored_run(row: dict):
    """A store's run row as the loggers read a run (experiment, id, model_name, task_name, lr, seed,
    model, task, train)."""
    from types import SimpleNamespace

    config = row.get("config") or {}
    return SimpleNamespace(experiment=row["experiment"], id=row["id"], model_name=row["model"], task_name=row["task"], lr=row["lr"],
                           seed=row["seed"], model=config.get("model"), task=config.get("task"), train=config.get("train"))


def export_runs(store, experiment: str, kind: str, target: str) -> tuple[int, str]:
    """Every finished run of `experiment` (done or diverged) to `kind`: csv (curves.csv and evals.csv
    in the folder `target`), tensorboard (events under the folder `target`), wandb (runs in the
    project `target`) or mlflow (runs at the tracking URI `target`). Returns (runs, where)."""
    import csv

    if kind not in EXPORTS:
        raise StatetrackError(f"unknown export {kind!r}; expected one of {', '.join(EXPORTS)}")
    rows = [r for r in store.runs(experiment) if r["status"] == "done"]
    if not rows:
        raise StatetrackError(f"experiment {experiment!r} has no finished runs in {store.path} to export")
    if kind != "csv":
        check_log_to({kind: target})
        for row in rows:
            run = stored_run(row)
            replay(run_loggers(run, {kind: target}), store.curves(run.id), store.evals(run.id))
        return len(rows), target
    folder = Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    keys = ["run_id", "model", "task", "lr", "seed"]
    curves, evals = [], []
    for row in rows:
        head = dict(zip(keys, (row["id"], row["model"], row["task"], row["lr"], row["seed"])))
        curves += [{**head, **{k: v for k, v in point.items() if k != "metrics"}, **(point.get("metrics") or {})} for point in store.curves(row["id"])]
        evals += [{**head, "variant": e.get("variant") or "", **{k: v for k, v in e.items() if k not in ("metrics", "position_accuracy", "variant")},
                   **(e.get("metrics") or {})} for e in store.evals(row["id"])]
    for name, table in (("curves.csv", curves), ("evals.csv", evals)):
        columns = list(dict.fromkeys(k for entry in table for k in entry))
        with open_for_write(folder / name, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(table)
    return len(rows), str(folder)
