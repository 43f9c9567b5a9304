"""Training loggers: one interface the trainer calls with each point of a run's training curve as it
is written, then with the run's evaluation.

A `Logger` has `log_point(point)` (a curve point: step, loss, accuracy and the model's metrics, see
`Trainer`), `log_eval(rows, score)` (the per-length evaluation rows, as the store keeps them, and
the run's selection score) and `close(status)` (done, diverged, failed or killed). The same loggers
serve a run while it trains (`statetrack run --tensorboard DIR --wandb PROJECT --mlflow URI`,
written from the process that trains it) and a finished run replayed from the store (`statetrack
export`). TensorBoard, Weights & Biases and MLflow are optional packages, imported when a logger is
made, with an error naming the extra to install.

What the trackers hold per run: its settings (MLflow: flattened params, `train.steps`; W&B: the
nested config), tags (experiment, statetrack version, git revision, host; W&B groups runs by
experiment), the training curve per step, one metric per evaluation length
(`eval/scaled_accuracy/256`, `eval_VARIANT/...` for an evaluation variant) and `selection/score`
(the value the spec's selection rule ranks runs by), and its outcome: a diverged, failed or
interrupted run ends as failed (MLflow FAILED or KILLED, W&B exit code 1) with its status as a tag.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
import warnings
from pathlib import Path

from statetrack.errors import StatetrackError
from statetrack.paths import check_outputs, open_for_write, under

# where `log_to` (a run's logging settings) may point: {"tensorboard": DIR, "wandb": PROJECT, "mlflow": URI},
# beside "context": {"selection": the spec's selection rule, "git_rev": the driver's revision}
KINDS = ("tensorboard", "wandb", "mlflow")
EVAL_KEYS = ("accuracy", "scaled_accuracy", "sequence_accuracy")
CHECK_SECONDS = 5.0  # how long a tracking server has to answer before any run starts


def scalars(prefix: str, row: dict, keys: tuple[str, ...]) -> dict[str, float]:
    """`prefix/key` -> value for the keys present (not None) and every entry of row['metrics']."""
    out = {f"{prefix}/{k}": float(row[k]) for k in keys if row.get(k) is not None}
    out.update({f"{prefix}/{k}": float(v) for k, v in (row.get("metrics") or {}).items() if v is not None})
    return out


def eval_label(row: dict) -> str:
    """'eval' for the training task, 'eval_VARIANT' for an evaluation variant."""
    return f"eval_{row['variant']}" if row.get("variant") else "eval"


def eval_metrics(rows: list[dict], score: float | None = None) -> dict[str, float]:
    """One value per metric and length, `eval/scaled_accuracy/256` (a tracker's run table then
    shows every length, not the last one logged), and `selection/score` when there is one."""
    out = {
        f"{key}/{row['length']}": value
        for row in rows
        for key, value in scalars(eval_label(row), row, EVAL_KEYS).items()
    }
    if score is not None:
        out["selection/score"] = float(score)
    return out


def flatten(settings: dict, prefix: str = "") -> dict[str, str]:
    """Nested settings as one level of dotted keys (`train.steps`, `model.d_model`), values as text
    (lists as JSON): what MLflow params can filter and sort on."""
    out: dict[str, str] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return out


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

    def log_eval(self, rows: list[dict], score: float | None = None) -> None:
        pass

    def close(self, status: str = "done") -> None:
        pass


class TensorBoardLogger(Logger):
    """TensorBoard events in `folder`: train/loss, train/accuracy and train/<metric> per step, flushed
    at each point (the event file grows while the run trains); eval/<metric> with the length as step
    (a curve over length), selection/score at step 0."""

    def __init__(self, folder: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise StatetrackError(
                "TensorBoard logging needs the tensorboard package: pip install 'statetrack[tensorboard]'"
            ) from None
        self.folder = Path(folder)
        self.writer = SummaryWriter(log_dir=str(folder))

    def log_point(self, point: dict) -> None:
        for key, value in scalars("train", point, ("loss", "accuracy")).items():
            self.writer.add_scalar(key, value, point["step"])
        self.writer.flush()

    def log_eval(self, rows: list[dict], score: float | None = None) -> None:
        for row in rows:
            for key, value in scalars(eval_label(row), row, EVAL_KEYS).items():
                self.writer.add_scalar(key, value, row["length"])
        if score is not None:
            self.writer.add_scalar("selection/score", score, 0)
        self.writer.flush()

    def close(self, status: str = "done") -> None:
        self.writer.close()


class WandbLogger(Logger):
    """A Weights & Biases run in `project`, grouped by experiment: train/* per step as history;
    eval/* as a table (one row per variant and length) and as summary values
    `eval/<metric>/<length>`, with `selection/score`. `mode` as wandb's (online, offline; default:
    WANDB_MODE, else online). A run that did not end done finishes with exit code 1 (failed in the
    W&B interface) and its status in the summary."""

    def __init__(
        self,
        project: str,
        name: str,
        config: dict,
        group: str | None = None,
        tags: dict | None = None,
        folder: str | Path | None = None,
        mode: str | None = None,
    ):
        try:
            import wandb
        except ImportError:
            raise StatetrackError("W&B logging needs the wandb package: pip install 'statetrack[wandb]'") from None
        self.wandb = wandb
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
        labels = [f"{key}:{value}"[:64] for key, value in (tags or {}).items()]  # W&B tags are short strings
        self.run = wandb.init(
            project=project,
            name=name,
            config={**config, **(tags or {})},
            group=group,
            tags=labels,
            mode=mode,  # type: ignore[arg-type]  # WANDB_MODE as given; wandb checks it against its Literal
            reinit="create_new",
            dir=str(folder) if folder else None,
        )

    def log_point(self, point: dict) -> None:
        self.run.log(scalars("train", point, ("loss", "accuracy")), step=point["step"])

    def log_eval(self, rows: list[dict], score: float | None = None) -> None:
        if rows:
            columns: list[str | int] = ["variant", "length", *EVAL_KEYS]  # the type wandb.Table declares
            table = self.wandb.Table(
                columns=columns,
                data=[[r.get("variant") or "", r["length"], *(r.get(k) for k in EVAL_KEYS)] for r in rows],
            )
            self.run.log({"eval/table": table})
        for key, value in eval_metrics(rows, score).items():
            self.run.summary[key] = value

    def close(self, status: str = "done") -> None:
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "done" else 1)


class MLflowLogger(Logger):
    """An MLflow run in experiment `experiment` at `tracking_uri`: the run's settings as flattened
    params (`train.steps`), `tags`, train/* per step, one metric per evaluation length
    (`eval/scaled_accuracy/256`) and `selection/score`; it ends FINISHED when the run is done,
    KILLED when interrupted, FAILED otherwise (diverged or failed, tag `statetrack.status`)."""

    TERMINAL = {"done": "FINISHED", "killed": "KILLED"}  # anything else: FAILED

    def __init__(self, tracking_uri: str, experiment: str, name: str, params: dict, tags: dict | None = None):
        try:
            import mlflow
            from mlflow.entities import Param
        except ImportError:
            raise StatetrackError("MLflow logging needs the mlflow package: pip install 'statetrack[mlflow]'") from None
        self.client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            try:
                found = self.client.get_experiment(self.client.create_experiment(experiment))
            except mlflow.exceptions.MlflowException:  # another worker created it first
                found = self.client.get_experiment_by_name(experiment)
                if found is None:
                    raise
        experiment_id = found.experiment_id
        run_tags = {f"statetrack.{key}": str(value) for key, value in (tags or {}).items()}
        if tags and tags.get("git_rev", "unknown") != "unknown":
            run_tags["mlflow.source.git.commit"] = str(tags["git_rev"]).removesuffix("+dirty")
        self.run_id = self.client.create_run(experiment_id, run_name=name, tags=run_tags).info.run_id
        self.client.log_batch(self.run_id, params=[Param(key, value[:6000]) for key, value in flatten(params).items()])

    def _log(self, values: dict[str, float], step: int) -> None:
        """One request per point, not one per metric."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, stamp, step) for key, value in values.items()])

    def log_point(self, point: dict) -> None:
        self._log(scalars("train", point, ("loss", "accuracy")), point["step"])

    def log_eval(self, rows: list[dict], score: float | None = None) -> None:
        values = eval_metrics(rows, score)
        if values:
            self._log(values, 0)

    def close(self, status: str = "done") -> None:
        self.client.set_tag(self.run_id, "statetrack.status", status)
        self.client.set_terminated(self.run_id, status=self.TERMINAL.get(status, "FAILED"))


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
    """Fail now, before anything trains, when a logger's package is missing, its setting is bad or
    the MLflow tracking store does not answer (`check_mlflow`)."""
    kinds = {k: v for k, v in log_to.items() if k != "context"}
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise StatetrackError(f"unknown logger {unknown[0]!r}; expected one of {', '.join(KINDS)}")
    packages = {
        "tensorboard": ("torch.utils.tensorboard", "tensorboard"),
        "wandb": ("wandb", "wandb"),
        "mlflow": ("mlflow", "mlflow"),
    }
    for kind, value in kinds.items():
        if not value or not str(value).strip():
            raise StatetrackError(f"--{kind} needs a value (a folder, a project or a tracking URI), got {value!r}")
        module, extra = packages[kind]
        try:
            __import__(module)
        except ImportError:
            raise StatetrackError(f"--{kind} needs the {extra} package: pip install 'statetrack[{extra}]'") from None
    if kinds.get("mlflow"):
        check_mlflow(str(kinds["mlflow"]))


@contextlib.contextmanager
def _patient(seconds: float):
    """MLflow's HTTP client for the next `seconds`: one try, `seconds` long (its default retries
    with back-off for minutes)."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update(
        {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(max(1, seconds)))}
    )
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_mlflow(uri: str, seconds: float = CHECK_SECONDS) -> None:
    """Reach the MLflow tracking store at `uri` within about `seconds`, or raise a one-line error
    saying what to do: a tracking server (http, https) must answer its /health page; any store must
    list its experiments. A local store is `sqlite:///PATH` (the `mlflow` extra installs what it
    needs); MLflow 3 refuses a `file:` store unless MLFLOW_ALLOW_FILE_STORE=true."""
    import urllib.error
    import urllib.parse
    import urllib.request

    scheme = urllib.parse.urlparse(uri).scheme
    if scheme in ("http", "https"):
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=seconds).close()
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):
                raise StatetrackError(
                    f"--mlflow {uri}: the tracking server refused us (HTTP {error.code}); set "
                    "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN"
                ) from None
            # any other answer means a server is there: the experiment listing below decides
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise StatetrackError(
                f"--mlflow {uri}: no tracking server answered within {seconds:g} s ({reason})"
            ) from None
    import mlflow

    try:
        with _patient(seconds), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mlflow.tracking.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as error:  # MLflow's own errors, a missing driver, an unreadable folder
        text = " ".join(str(error).split())
        if "sqlalchemy" in text.lower() or "alembic" in text.lower():
            raise StatetrackError(
                f"--mlflow {uri}: a sqlite: store needs SQLAlchemy and Alembic: pip install 'statetrack[mlflow]'"
            ) from None
        if "filesystem tracking backend" in text.lower():
            raise StatetrackError(
                f"--mlflow {uri}: MLflow {mlflow.__version__} refuses a folder (file:) store; use a local database, "
                "--mlflow sqlite:///PATH/mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true"
            ) from None
        raise StatetrackError(f"--mlflow {uri}: the tracking store did not answer: {text[:300]}") from None


def run_loggers(run, log_to: dict, tags: dict | None = None) -> list[Logger]:
    """The loggers `log_to` asks for, for one run: an MLflow run in the experiment's name at the
    tracking URI, a W&B run in the project, TensorBoard events in DIR/EXPERIMENT/<run label>.
    `tags`: what identifies the run beyond its settings (default: the experiment, statetrack's
    version, `log_to['context']['git_rev']` and this host). MLflow comes first: a tracker that
    fails to open a run leaves no empty run in the others."""
    from statetrack.version import __version__

    context = log_to.get("context") or {}
    tags = tags or {
        "experiment": run.experiment,
        "version": __version__,
        "git_rev": context.get("git_rev", "unknown"),
        "host": socket.gethostname(),
    }
    loggers: list[Logger] = []
    try:
        settings = {
            "experiment": run.experiment,
            "run_id": run.id,
            "model": run.model,
            "task": run.task,
            "lr": run.lr,
            "seed": run.seed,
            "train": run.train,
        }
        if log_to.get("mlflow"):
            loggers.append(MLflowLogger(log_to["mlflow"], run.experiment, run_label(run), settings, tags))
        if log_to.get("wandb"):  # WANDB_MODE and WANDB_DIR read now, for each run (wandb reads them once per process)
            loggers.append(
                WandbLogger(
                    log_to["wandb"],
                    run_label(run),
                    settings,
                    group=run.experiment,
                    tags=tags,
                    folder=os.environ.get("WANDB_DIR") or None,
                    mode=os.environ.get("WANDB_MODE") or None,
                )
            )
        if log_to.get("tensorboard"):
            loggers.append(TensorBoardLogger(tensorboard_dir(log_to["tensorboard"], run)))
    except BaseException:
        for logger in loggers:
            logger.close("failed")
        raise
    return loggers


def selection_score(evals: list[dict], log_to: dict) -> float | None:
    """The run's score under the selection rule in `log_to['context']` (the default rule without one)."""
    from statetrack.schema import evals_score

    return evals_score(evals, (log_to.get("context") or {}).get("selection"))


def replay(
    loggers: list[Logger], curve: list[dict], evals: list[dict], score: float | None = None, status: str = "done"
) -> None:
    """A finished run's curve and evaluation, as it would have been logged live; closes the loggers."""
    try:
        for point in curve:
            for logger in loggers:
                logger.log_point(point)
        for logger in loggers:
            logger.log_eval(evals, score)
    finally:
        for logger in loggers:
            logger.close(status)


# ---- finished runs ---------------------------------------------------------------------------------
EXPORTS = ("csv", "tensorboard", "wandb", "mlflow")


def stored_run(row: dict):
    """A store's run row as the loggers read a run (experiment, id, model_name, task_name, lr, seed,
    model, task, train)."""
    from types import SimpleNamespace

    config = row.get("config") or {}
    return SimpleNamespace(
        experiment=row["experiment"],
        id=row["id"],
        model_name=row["model"],
        task_name=row["task"],
        lr=row["lr"],
        seed=row["seed"],
        model=config.get("model"),
        task=config.get("task"),
        train=config.get("train"),
    )


def export_runs(store, experiment: str, kind: str, target: str) -> tuple[int, str]:
    """Every finished run of `experiment` (done or diverged) to `kind`: csv (curves.csv and evals.csv
    in the folder `target`), tensorboard (events under the folder `target`), wandb (runs in the
    project `target`) or mlflow (runs at the tracking URI `target`). Returns (runs, where).
    A csv export's files are checked before anything is written, and the folders a failed export
    created are removed."""
    if kind not in EXPORTS:
        raise StatetrackError(f"unknown export {kind!r}; expected one of {', '.join(EXPORTS)}")
    rows = [r for r in store.runs(experiment) if r["status"] == "done"]
    if not rows:
        raise StatetrackError(f"experiment {experiment!r} has no finished runs in {store.path} to export")
    if kind == "csv":
        check_outputs([Path(target) / name for name in CSV_FILES], "export file")
    # the folders this export creates: a failed export leaves none of them behind
    made = [p for p in _export_folders(kind, target) if not os.path.lexists(p)]
    try:
        return _export(store, experiment, kind, target, rows)
    except BaseException:
        for folder in made:
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)
        raise


CSV_FILES = ("curves.csv", "evals.csv")


def _export_folders(kind: str, target: str) -> list[Path]:
    """The folders an export of `kind` writes into (W&B: WANDB_DIR and its wandb/ folder; a file
    tracker: its target folder)."""
    if kind == "wandb":
        base = Path(os.environ.get("WANDB_DIR") or ".")
        return [base, base / "wandb"]
    return [Path(target)] if kind in ("csv", "tensorboard") else []


def _export(store, experiment: str, kind: str, target: str, rows: list[dict]) -> tuple[int, str]:
    import csv

    from statetrack.version import __version__

    if kind != "csv":
        from statetrack.schema import selection_of

        plan = store.plan(experiment)
        log_to = {kind: target, "context": {"selection": selection_of(plan.spec) if plan else None}}
        check_log_to(log_to)
        for row in rows:
            run = stored_run(row)
            tags = {
                "experiment": run.experiment,
                "version": __version__,
                "git_rev": row.get("git_rev") or "unknown",
                "host": row.get("host") or "unknown",
            }
            status = "diverged" if row.get("diverged_at") is not None else "done"
            evals = store.evals(run.id)
            try:
                replay(
                    run_loggers(run, log_to, tags), store.curves(run.id), evals, selection_score(evals, log_to), status
                )
            except StatetrackError:
                raise
            except Exception as error:  # a tracker's own error, in one line
                raise StatetrackError(
                    f"export {kind} to {target}: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
                ) from None
        return len(rows), target
    folder = Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    keys = ["run_id", "model", "task", "lr", "seed"]
    curves, evals = [], []
    for row in rows:
        head = dict(zip(keys, (row["id"], row["model"], row["task"], row["lr"], row["seed"])))
        curves += [
            {**head, **{k: v for k, v in point.items() if k != "metrics"}, **(point.get("metrics") or {})}
            for point in store.curves(row["id"])
        ]
        evals += [
            {
                **head,
                "variant": e.get("variant") or "",
                **{k: v for k, v in e.items() if k not in ("metrics", "position_accuracy", "variant")},
                **(e.get("metrics") or {}),
            }
            for e in store.evals(row["id"])
        ]
    for name, table in zip(CSV_FILES, (curves, evals)):
        columns = list(dict.fromkeys(k for entry in table for k in entry))
        with open_for_write(folder / name, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(table)
    return len(rows), str(folder)
