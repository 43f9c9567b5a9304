"""Training loggers: TensorBoard written while a run trains, W&B and MLflow runs, CSV export, and
the steps pool workers report to the driver."""

import csv
import json
import time
from pathlib import Path

import pytest
import torch

from cli_helpers import run_cli
from statetrack.cli import main
from statetrack.experiments import expand, load_spec
from statetrack.experiments.backends import make_backend
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.models import zoo
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.training.loggers import Logger, TensorBoardLogger, export_runs, run_label, tensorboard_dir
from statetrack.training.train import TrainConfig, Trainer


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
    run_experiment(resolve(spec), tmp_path / "r", RunOptions(workers=1, progress=False), log=lambda *a: None)
    return Store(tmp_path / "r" / "statetrack.db"), expand(load_spec(spec))


def test_run_logs_every_run_to_tensorboard_as_it_trains(tiny_spec, tmp_path):
    pytest.importorskip("tensorboard")
    spec = str(tiny_spec(steps=10, seeds="[0]"))
    run_experiment(resolve(spec), tmp_path / "r", RunOptions(workers=1, tensorboard=tmp_path / "tb", progress=False), log=lambda *a: None)
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


def wandb_records(path):
    """The records of a W&B offline run file (`run-*.wandb`): a LevelDB-style log of 32 KiB blocks,
    each record a chunk header (crc32, length, type) and a protobuf `Record`."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block = Path(path).read_bytes(), 32768
    pos, records, partial = 7, [], b""  # after the 7-byte file header
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        partial += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last chunk
            record = pb.Record()
            record.ParseFromString(partial)
            records.append(record)
            partial = b""
    return records


def wandb_runs(folder, wait: float = 30.0):
    """{run name: (group, tags, summary {key: value}, exit code)} of every offline run under `folder`.
    W&B writes a run's file from a process of its own: the files are read again until each holds
    its run and its exit record, for at most `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        out = _wandb_files(folder)
        if (None not in out and all(v[3] is not None for v in out.values())) or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def _wandb_files(folder):
    out = {}
    for path in sorted(Path(folder).glob("wandb/offline-run-*/run-*.wandb")):
        group, tags, summary, code, name = None, [], {}, None, None
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                group, tags, name = record.run.run_group, list(record.run.tags), record.run.display_name
            elif kind == "summary":
                summary.update({"/".join(u.nested_key) or u.key: json.loads(u.value_json) for u in record.summary.update})
            elif kind == "exit":
                code = record.exit.exit_code
        out[name] = (group, tags, summary, code)
    return out


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path / "wb"


def test_wandb_offline_export_writes_one_run_per_finished_run(tiny_spec, tmp_path, wandb_offline):
    store, runs = _finished(tiny_spec, tmp_path)
    count, where = export_runs(store, "tiny", "wandb", "statetrack-tests")
    assert count == 2 and where == "statetrack-tests"
    found = wandb_runs(wandb_offline)
    assert sorted(found) == sorted(run_label(r) for r in runs)
    for run in runs:
        group, tags, summary, code = found[run_label(run)]
        assert group == "tiny" and code == 0 and summary["status"] == "done"
        assert "experiment:tiny" in tags and any(t.startswith("git_rev:") for t in tags)
        first = store.evals(run.id)[0]
        assert summary[f"eval/scaled_accuracy/{first['length']}"] == pytest.approx(first["scaled_accuracy"])
        assert summary["selection/score"] == pytest.approx(sum(e["scaled_accuracy"] for e in store.evals(run.id)) / 2)


def _mlflow_runs(uri, experiment):
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client, {r.data.params["run_id"]: r for r in client.search_runs([found.experiment_id])}


def test_mlflow_export_to_a_local_database(tiny_spec, tmp_path, monkeypatch):
    """The `mlflow` extra's sqlite store, with no setting: flattened params, tags, one metric per
    length and the selection score, every run FINISHED."""
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    store, runs = _finished(tiny_spec, tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert export_runs(store, "tiny", "mlflow", uri)[0] == 2
    client, found = _mlflow_runs(uri, "tiny")
    assert set(found) == {r.id for r in runs}
    for run in runs:
        mlrun = found[run.id]
        assert mlrun.info.status == "FINISHED" and mlrun.data.tags["statetrack.status"] == "done"
        assert mlrun.data.params["train.steps"] == "10" and mlrun.data.params["model.d_model"] == "8"
        assert mlrun.data.tags["statetrack.experiment"] == "tiny" and mlrun.data.tags["statetrack.git_rev"]
        history = client.get_metric_history(mlrun.info.run_id, "train/loss")
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx([p["loss"] for p in store.curves(run.id)], rel=1e-6)
        evals = {e["length"]: e["scaled_accuracy"] for e in store.evals(run.id)}
        assert {n: mlrun.data.metrics[f"eval/scaled_accuracy/{n}"] for n in (5, 9)} == pytest.approx(evals)
        assert mlrun.data.metrics["selection/score"] == pytest.approx(sum(evals.values()) / 2)


def test_failed_and_diverged_runs_end_failed_in_the_trackers(tiny_spec, tmp_path, monkeypatch, wandb_offline):
    """Live logging: the LSTM's runs raise (failed), DeltaNet's seed 1 diverges, seed 0 is done. The
    console names the failed runs' error and id; MLflow ends them FAILED, W&B with exit code 1; the
    diverged run logs its evaluation at chance."""
    pytest.importorskip("mlflow")
    from statetrack.training.train import Diverged

    real = Trainer.fit

    def fit(self, deadline=None):
        if self.model.blocks[0].mixer.__class__.__name__ == "LSTM":
            raise RuntimeError("the cell exploded")
        if self.config.seed == 1:
            raise Diverged(3, float("nan"))
        return real(self, deadline)

    monkeypatch.setattr(Trainer, "fit", fit)
    uri, logs = f"sqlite:///{tmp_path / 'mlflow.db'}", []
    spec = str(tiny_spec(steps=10))
    run_experiment(resolve(spec), tmp_path / "r", RunOptions(workers=1, wandb="statetrack-tests", mlflow=uri, progress=False), log=logs.append)
    runs = expand(load_spec(spec))
    expected = {r.id: "failed" if r.model["name"] == "lstm" else "done" if r.seed == 0 else "diverged" for r in runs}
    for run in runs:
        if expected[run.id] == "failed":
            line = f"failed: {run.model_name} on modadd(m=3), lr=0.01, seed={run.seed} (run {run.id}): RuntimeError: the cell exploded"
            assert line in [entry.strip() for entry in logs], logs
    _, found = _mlflow_runs(uri, "tiny")
    status = {"done": "FINISHED", "diverged": "FAILED", "failed": "FAILED"}
    assert {i: (r.info.status, r.data.tags["statetrack.status"]) for i, r in found.items()} == \
        {i: (status[s], s) for i, s in expected.items()}
    diverged = next(found[i] for i, s in expected.items() if s == "diverged")
    assert diverged.data.metrics["eval/scaled_accuracy/9"] == 0.0 and diverged.data.metrics["selection/score"] == 0.0
    wb = wandb_runs(wandb_offline)
    assert {name: (summary["status"], code) for name, (_, _, summary, code) in wb.items()} == \
        {run_label(r): (expected[r.id], 0 if expected[r.id] == "done" else 1) for r in runs}


def _listening_socket():
    """A loopback socket that accepts connections into its backlog and never answers them."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_a_bad_mlflow_uri_is_one_line_before_anything_runs(tiny_spec, tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    spec = str(tiny_spec(steps=10))
    silent, closed = _listening_socket(), _listening_socket()
    refused = closed.getsockname()[1]
    closed.close()
    try:
        cases = [(f"http://127.0.0.1:{refused}", "no tracking server answered within 5 s"),
                 (f"http://127.0.0.1:{silent.getsockname()[1]}", "no tracking server answered within 5 s"),
                 ((tmp_path / "mlruns").as_uri(), "use a local database, --mlflow sqlite:///PATH/mlflow.db")]
        for uri, message in cases:
            start = time.monotonic()
            code, out, err = run_cli(capsys, "run", spec, "--results-dir", str(tmp_path / "r"), "--mlflow", uri, "--no-progress")
            assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
            assert time.monotonic() - start < 10
    finally:
        silent.close()
    assert not (tmp_path / "r").exists() and not (tmp_path / "mlruns").exists()  # nothing trained, nothing written
    _finished(tiny_spec, tmp_path)
    code, _, err = run_cli(capsys, "export", "mlflow", "tiny", "--results-dir", str(tmp_path / "r"), "--tracking-uri", f"http://127.0.0.1:{refused}")
    assert code == 2 and "no tracking server answered" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A local MLflow tracking server on a free loopback port (the full mlflow package), stopped afterwards."""
    pytest.importorskip("mlflow.server")
    import socket
    import subprocess
    import sys
    import urllib.request

    folder = tmp_path_factory.mktemp("mlflow-server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(folder / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                               "--backend-store-uri", f"sqlite:///{folder / 'server.db'}", "--default-artifact-root", str(folder / "artifacts")],
                              stdout=subprocess.DEVNULL, stderr=log)
    uri, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    try:
        while True:
            try:
                urllib.request.urlopen(uri + "/health", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the MLflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield uri
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_run_logs_to_a_local_mlflow_server(tiny_spec, tmp_path, mlflow_server, capsys):
    spec = str(tiny_spec(steps=10, seeds="[0]"))
    # two pool workers: both open their run in an experiment that does not exist yet
    code, out, err = run_cli(capsys, "run", spec, "--results-dir", str(tmp_path / "r"), "--mlflow", mlflow_server, "--no-progress", "--workers", "2")
    assert code == 0, err
    store = Store(tmp_path / "r" / "statetrack.db")
    _, found = _mlflow_runs(mlflow_server, "tiny")
    assert set(found) == {r["id"] for r in store.runs("tiny")}
    assert all(r.info.status == "FINISHED" and "eval/accuracy/9" in r.data.metrics for r in found.values())


def test_export_errors_name_what_is_expected(tmp_path, capsys, tiny_spec, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _finished(tiny_spec, tmp_path)
    assert main(["export", "mlflow", "tiny", "--results-dir", str(tmp_path / "r")]) == 2
    assert "--tracking-uri URI or MLFLOW_TRACKING_URI" in capsys.readouterr().err
    assert main(["export", "csv", "nothing", "--results-dir", str(tmp_path / "r")]) == 2
    assert "has no finished runs" in capsys.readouterr().err


def test_pool_workers_report_their_steps(tiny_spec, tmp_path):
    run = expand(load_spec(str(tiny_spec(steps=10, seeds="[0]"))))[0]
    pool = make_backend(RunOptions(workers=2), tmp_path, "cpu", runs=2)
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
