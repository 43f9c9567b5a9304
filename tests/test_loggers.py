"""Training loggers: TensorBoard written while a run trains, W&B and MLflow runs, CSV export, and
the steps pool workers report to the driver."""

import csv
import time

import pytest
import torch

from statetrack import zoo
from statetrack.cli import main
from statetrack.experiments import expand, load_spec
from statetrack.experiments.backends import make_backend
from statetrack.experiments.runner import run_experiment
from statetrack.loggers import Logger, TensorBoardLogger, export_runs, tensorboard_dir
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.train import Trainer, TrainConfig


def _events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return events


def test_tensorboard_events_grow_while_the_run_trains(tmp_path):
    """A second logger reads the event file after each point the TensorBoard logger wrote: every
    point is there at once, not when the run ends."""
    pytest.importorskip("tensorboard")
    seen = []

    class Reader(Logger):
        def log_point(self, point):
            loss = _events(tmp_path / "tb").Scalars("train/loss")
            seen.append((point["step"], [e.step for e in loss]))

    task = make_task("modadd", m=3)
    torch.manual_seed(0)
    model = zoo.build_model({"name": "lstm", "d_model": 8}, task.vocab_size, task.num_classes)
    config = TrainConfig(steps=15, batch_size=8, min_length=2, max_length=5, log_every=5, early_stop_loss=None, device="cpu")
    tb = TensorBoardLogger(tmp_path / "tb")
    trainer = Trainer(model, task, config, progress=False, loggers=[tb, Reader()])
    trainer.fit()
    tb.close()
    assert seen == [(5, [5]), (10, [5, 10]), (15, [5, 10, 15])]
    assert [p["step"] for p in trainer.curve] == [5, 10, 15]


def _finished(tiny_spec, tmp_path):
    spec = str(tiny_spec(steps=10, seeds="[0]"))
    run_experiment(spec, results_dir=tmp_path / "r", progress=False, workers=1, log=lambda *a: None)
    return Store(tmp_path / "r" / "statetrack.db"), expand(load_spec(spec))


def test_run_logs_every_run_to_tensorboard_as_it_trains(tiny_spec, tmp_path):
    pytest.importorskip("tensorboard")
    spec = str(tiny_spec(steps=10, seeds="[0]"))
    run_experiment(spec, results_dir=tmp_path / "r", progress=False, workers=1, tensorboard=tmp_path / "tb", log=lambda *a: None)
    store = Store(tmp_path / "r" / "statetrack.db")
    for run in expand(load_spec(spec)):
        events = _events(tensorboard_dir(tmp_path / "tb", run))
        assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([p["loss"] for p in store.curves(run.id)], rel=1e-6)
        assert [e.step for e in events.Scalars("eval/accuracy")] == [5, 9]


def test_csv_export_has_every_point_and_evaluation(tiny_spec, tmp_path, capsys):
    store, runs = _finished(tiny_spec, tmp_path)
    assert main(["export", "csv", "tiny", "--results-dir", str(tmp_path / "r"), "--out", str(tmp_path / "csv")]) == 0
    assert "exported 2 runs of tiny to csv" in capsys.readouterr().out
    curves = list(csv.DictReader(open(tmp_path / "csv" / "curves.csv", encoding="utf-8")))
    evals = list(csv.DictReader(open(tmp_path / "csv" / "evals.csv", encoding="utf-8")))
    assert len(curves) == sum(len(store.curves(r.id)) for r in runs)
    assert {(e["run_id"], int(e["length"])) for e in evals} == {(r.id, n) for r in runs for n in (5, 9)}
    first = store.evals(runs[0].id)[0]
    row = next(e for e in evals if e["run_id"] == runs[0].id and int(e["length"]) == first["length"])
    assert float(row["scaled_accuracy"]) == pytest.approx(first["scaled_accuracy"]) and row["model"] == runs[0].model_name


def test_wandb_offline_export_writes_one_run_per_finished_run(tiny_spec, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    store, runs = _finished(tiny_spec, tmp_path)
    count, where = export_runs(store, "tiny", "wandb", "statetrack-tests")
    assert count == 2 and where == "statetrack-tests"
    files = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2 and all(f.stat().st_size > 0 for f in files)


def test_mlflow_export_has_the_curves_and_evaluations(tiny_spec, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store, runs = _finished(tiny_spec, tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    assert export_runs(store, "tiny", "mlflow", uri)[0] == 2
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tiny")
    found = {r.data.params["run_id"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(found) == {r.id for r in runs}
    for run in runs:
        history = client.get_metric_history(found[run.id].info.run_id, "train/loss")
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx([p["loss"] for p in store.curves(run.id)], rel=1e-6)
        evals = client.get_metric_history(found[run.id].info.run_id, "eval/accuracy")
        assert sorted(m.step for m in evals) == [5, 9]


def test_export_errors_name_what_is_expected(tmp_path, capsys, tiny_spec, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _finished(tiny_spec, tmp_path)
    assert main(["export", "mlflow", "tiny", "--results-dir", str(tmp_path / "r")]) == 2
    assert "--tracking-uri URI or MLFLOW_TRACKING_URI" in capsys.readouterr().err
    assert main(["export", "csv", "nothing", "--results-dir", str(tmp_path / "r")]) == 2
    assert "has no finished runs" in capsys.readouterr().err


def test_pool_workers_report_their_steps(tiny_spec, tmp_path):
    run = expand(load_spec(str(tiny_spec(steps=10, seeds="[0]"))))[0]
    pool = make_backend("local", 2, tmp_path, "cpu", runs=2)
    try:
        handle = pool.submit(run)
        assert pool.wait([handle]) == [handle] and pool.outcome(handle)["status"] == "done"
        reports, deadline = {}, time.time() + 10
        while run.id not in reports and time.time() < deadline:
            reports.update(pool.reports())
            time.sleep(0.05)
        assert reports[run.id] == (10, 10)
    finally:
        pool.close()
