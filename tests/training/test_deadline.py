"""Training in slices: a run reaching its deadline saves its checkpoint at the end of a logging
window and stops (`Trainer.fit(deadline)`, `Paused`); trained again it ends exactly as a run never
paused, curve included. The driver (`RunOptions.deadline`, `--stop-after`) starts no run after the
deadline, gives up its claim on the paused ones, and the same command resumes them."""

import itertools
import time

import pytest
import torch

from statetrack.experiments import runner
from statetrack.experiments.runner import run_experiment
from statetrack.experiments.spec import resolve
from statetrack.models import zoo
from statetrack.options import RunOptions
from statetrack.schema import TrainConfig
from statetrack.store import Store
from statetrack.tasks import make_task
from statetrack.training import train
from statetrack.training.train import Paused, Trainer

CONFIG = dict(steps=40, batch_size=8, min_length=2, max_length=6, lr=1e-2, log_every=5, checkpoint_every=1000)


def _model(task, seed=0):
    torch.manual_seed(seed)
    return zoo.build_model({"name": "lstm", "d_model": 8}, task.vocab_size, task.num_classes)


def _clock(monkeypatch, deadline_at: int):
    """The wall clock as the trainer reads it: before the deadline for `deadline_at` readings, past it after."""
    readings = itertools.count()
    for module in (train, runner):  # the trainer's clock, and the driver's (the same function)
        monkeypatch.setattr(module, "now", lambda: 1.0 if next(readings) >= deadline_at else 0.0)


def test_a_paused_run_resumes_to_the_model_and_curve_of_one_never_paused(tmp_path, monkeypatch):
    task = make_task("parity")
    straight = _model(task)
    full = Trainer(straight, task, TrainConfig(**CONFIG), progress=False).fit()

    _clock(monkeypatch, deadline_at=1)  # past the deadline from the second reading on
    paused = _model(task)
    with pytest.raises(Paused) as stop:
        Trainer(paused, task, TrainConfig(**CONFIG), tmp_path / "run.pt", progress=False).fit(deadline=0.5)
    assert stop.value.step == 10  # read at step 5 (before), then at the next window's end
    assert torch.load(tmp_path / "run.pt", weights_only=True)["step"] == 10

    resumed = _model(task, seed=7)  # another init: everything comes from the checkpoint
    trainer = Trainer(resumed, task, TrainConfig(**CONFIG), tmp_path / "run.pt", progress=False).fit()
    assert trainer.step == 40 and [p["step"] for p in trainer.curve] == [p["step"] for p in full.curve]
    for a, b in zip(trainer.curve, full.curve):
        assert a["loss"] == b["loss"] and a["accuracy"] == b["accuracy"]
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)


def test_no_pause_once_the_last_step_is_taken(tmp_path, monkeypatch):
    _clock(monkeypatch, deadline_at=0)
    task = make_task("parity")
    config = TrainConfig(**{**CONFIG, "steps": 5})  # one window: its end is the run's end
    assert Trainer(_model(task), task, config, tmp_path / "run.pt", progress=False).fit(deadline=0.5).step == 5


SPEC = """
name: slices
task: {name: parity}
models: [{name: lstm, d_model: 8}]
train: {steps: 40, batch_size: 8, min_length: 2, max_length: 6, log_every: 5, early_stop_fit: null,
        early_stop_loss: null}
eval: {lengths: [6, 12], samples: 16}
lrs: [1.0e-2]
seeds: [0, 1]
"""


def test_the_driver_stops_at_the_deadline_and_the_same_command_resumes(tmp_path, monkeypatch):
    spec = tmp_path / "slices.yaml"
    spec.write_text(SPEC)
    options = RunOptions(workers=1, progress=False)
    run_experiment(resolve(str(spec)), tmp_path / "straight", options, log=lambda *_: None)
    straight = Store(tmp_path / "straight" / "statetrack.db").results("slices")

    said = []
    _clock(monkeypatch, deadline_at=3)  # the driver's reading and two of the trainer's
    sliced = RunOptions(workers=1, progress=False, deadline=0.5)
    run_experiment(resolve(str(spec)), tmp_path / "sliced", sliced, log=said.append)
    store = Store(tmp_path / "sliced" / "statetrack.db")
    runs = store.runs("slices")
    assert [r["status"] for r in runs] == ["running"] and store.holder(runs[0]["id"]) is None  # free to resume
    assert any("1 runs paused with their checkpoints, 1 not started" in line for line in said)

    monkeypatch.setattr(train, "now", time.time)
    monkeypatch.setattr(runner, "now", time.time)
    run_experiment(resolve(str(spec)), tmp_path / "sliced", options, log=lambda *_: None)
    assert [r["status"] for r in store.runs("slices")] == ["done", "done"]
    assert store.results("slices") == straight  # bit for bit: the pause changed nothing


def test_a_run_resumed_at_another_revision_records_both(tmp_path, monkeypatch):
    """The checkpoint carries the revisions a run trained at; the store's git_rev names each, in order."""
    spec = tmp_path / "slices.yaml"
    spec.write_text(SPEC)
    monkeypatch.setattr(runner, "git_revision", lambda: "aaa1111")  # the trainer's revision and the driver's claim
    _clock(monkeypatch, deadline_at=3)
    run_experiment(resolve(str(spec)), tmp_path, RunOptions(workers=1, progress=False, deadline=0.5), log=lambda *_: None)
    store = Store(tmp_path / "statetrack.db")
    (paused,) = store.runs("slices")
    checkpoint = torch.load(runner.checkpoint_path(tmp_path, "slices", paused["id"]), weights_only=True)
    assert checkpoint["revisions"] == ["aaa1111"]

    monkeypatch.setattr(runner, "git_revision", lambda: "bbb2222")
    monkeypatch.setattr(train, "now", time.time)
    monkeypatch.setattr(runner, "now", time.time)
    run_experiment(resolve(str(spec)), tmp_path, RunOptions(workers=1, progress=False), log=lambda *_: None)
    revisions = {r["id"]: r["git_rev"] for r in store.runs("slices")}
    assert revisions.pop(paused["id"]) == "aaa1111 and bbb2222"
    assert list(revisions.values()) == ["bbb2222"]  # the run that started after the pause trained at one


def test_stop_after_is_a_positive_number_of_seconds(capsys):
    from statetrack.cli import main

    for bad in ("0", "-5", "soon", "nan"):
        assert main(["run", "demo", "--stop-after", bad, "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert "--stop-after" in err and "must be a number of seconds > 0" in err and err.count("\n") == 1
    before = time.time()
    from statetrack.cli import build_parser

    deadline = build_parser().parse_args(["run", "demo", "--stop-after", "90"]).deadline
    assert before + 90 <= deadline <= time.time() + 90


def test_every_backend_hands_the_deadline_to_the_worker(tmp_path):
    from statetrack.experiments import backends

    spec = tmp_path / "slices.yaml"
    spec.write_text(SPEC)
    run = resolve(str(spec)).runs[0]
    pool = backends.make_backend(RunOptions(workers=2, deadline=123.0), tmp_path, "cpu", runs=2)
    try:
        assert isinstance(pool, backends.LocalBackend) and pool.deadline == 123.0
    finally:
        pool.close()
    assert backends.make_backend(RunOptions(workers=1), tmp_path, "cpu").deadline is None
    outcome = backends._run_in_worker(run, str(tmp_path), "cpu", None, 0.0)  # what a pool worker runs
    assert outcome["status"] == "paused" and outcome["steps"] == 5
