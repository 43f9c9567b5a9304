"""`statetrack export KIND EXPERIMENT`: an experiment's finished runs to CSV, TensorBoard, W&B or MLflow
(statetrack.training.loggers)."""

from __future__ import annotations

from pathlib import Path

from statetrack.cli.common import STORE, Arg, Command, open_store
from statetrack.errors import StatetrackError
from statetrack.paths import check_name, check_writable


def cmd_export(args) -> int:
    import os

    from statetrack.paths import under
    from statetrack.training.loggers import export_runs

    check_name(args.experiment)
    if args.kind == "mlflow":
        target = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not target:
            raise StatetrackError("export mlflow needs a tracking URI: --tracking-uri URI or MLFLOW_TRACKING_URI")
    elif args.kind == "wandb":
        target = args.project
    else:
        target = args.out or str(
            under(args.results_dir, args.experiment, "csv")
            if args.kind == "csv"
            else Path(args.results_dir) / "tensorboard"
        )
        check_writable(target, "--out folder")
    count, where = export_runs(open_store(args, read_only=True), args.experiment, args.kind, target)
    print(f"exported {count} runs of {args.experiment} to {args.kind}: {where}")
    return 0


EXPORT = Command(
    "export",
    "an experiment's finished runs (curves and evaluations) as CSV, TensorBoard events, W&B runs or MLflow runs",
    cmd_export,
    (
        STORE,
        Arg(
            "kind",
            choices=["csv", "tensorboard", "wandb", "mlflow"],
            metavar="KIND",
            help="csv, tensorboard, wandb or mlflow",
        ),
        Arg("experiment", metavar="EXPERIMENT"),
        Arg(
            "--out",
            default=None,
            metavar="DIR",
            help="csv, tensorboard: the folder (default: RESULTS_DIR/EXPERIMENT/csv, RESULTS_DIR/tensorboard)",
        ),
        Arg(
            "--project",
            default="statetrack",
            help="wandb: the project (default: statetrack; WANDB_MODE=offline works offline)",
        ),
        Arg(
            "--tracking-uri",
            default=None,
            metavar="URI",
            help="mlflow: the tracking URI (default: $MLFLOW_TRACKING_URI), "
            "runs in an MLflow experiment of the experiment's name",
        ),
    ),
)
