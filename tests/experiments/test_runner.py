"""Runner and store: stable ids, resume, failures recorded, a run killed midway."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from statetrack.experiments import expand, load_spec
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.store import Plan, Store


def test_run_ids_are_stable_and_distinct(tiny_spec):
    path = str(tiny_spec())
    a, b = expand(load_spec(path)), expand(load_spec(path))
    assert [r.id for r in a] == [r.id for r in b]
    assert len({r.id for r in a}) == len(a) == 4
    c = expand(load_spec(path, overrides=["train.steps=21"]))
    assert not {r.id for r in a} & {r.id for r in c}


def test_rerun_skips_finished_runs(tiny_spec, tmp_path):
    path = str(tiny_spec())
    logs = []
    run_experiment(resolve(path), tmp_path / "r", RunOptions(progress=False), log=logs.append)
    store = Store(tmp_path / "r" / "statetrack.db")
    first = {r["id"]: r["finished_at"] for r in store.runs("tiny")}
    assert len(first) == 4 and all(r["status"] == "done" for r in store.runs("tiny"))
    assert len(store.results("tiny")) == 8  # 4 runs x 2 lengths
    run_experiment(resolve(path), tmp_path / "r", RunOptions(progress=False), log=logs.append)
    assert "4 runs, 4 already done" in logs[-1]
    assert {r["id"]: r["finished_at"] for r in store.runs("tiny")} == first


def test_failed_run_is_recorded_and_grid_goes_on(tiny_spec, tmp_path, monkeypatch):
    from statetrack.training.train import Trainer

    real = Trainer.fit

    def explode(self, deadline=None):
        if self.model.blocks[0].mixer.__class__.__name__ == "LSTM":
            raise FloatingPointError("training loss became nan at step 3")
        return real(self, deadline)

    monkeypatch.setattr(Trainer, "fit", explode)
    spec, logs = str(tiny_spec()), []
    run_experiment(resolve(spec), tmp_path, RunOptions(workers=1, progress=False), log=logs.append)
    store = Store(tmp_path / "statetrack.db")
    runs = store.runs("tiny")
    assert sorted(r["status"] for r in runs) == ["done", "done", "failed", "failed"]
    assert all("loss became nan" in r["error"] for r in runs if r["status"] == "failed")
    # a re-run with retry_failed=False (--skip-failed) leaves them; the default retries exactly them
    run_experiment(resolve(spec), tmp_path, RunOptions(workers=1, retry_failed=False, progress=False), log=logs.append)
    assert "4 runs, 2 already done, 2 failed before (skipped)" in logs[-1]
    assert [r["finished_at"] for r in store.runs("tiny")] == [r["finished_at"] for r in runs]
    monkeypatch.setattr(Trainer, "fit", real)
    run_experiment(resolve(spec), tmp_path, RunOptions(workers=1, progress=False), log=logs.append)
    assert "4 runs, 2 already done, 2 failed before (retried)" in logs[-3]
    assert all(r["status"] == "done" and r["error"] is None for r in store.runs("tiny"))


def _statuses(db):
    try:
        with sqlite3.connect(db, timeout=1) as c:
            return [row[0] for row in c.execute("SELECT status FROM runs")]
    except sqlite3.Error:
        return []


@pytest.mark.parametrize("workers", ["1", "2"])
def test_store_survives_a_run_killed_midway(tiny_spec, tmp_path, workers):
    spec = str(tiny_spec(steps=80, seeds="[0]" if workers == "1" else "[0, 1]"))
    expected_runs = 2 if workers == "1" else 4
    results = tmp_path / "r"
    db = results / "statetrack.db"
    command = [sys.executable, "-m", "statetrack.cli", "run", spec, "--results-dir", str(results), "--no-progress", "--workers", workers]
    # its own process group, so the kill takes the runner and its pool workers at once
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline:  # kill once one run is done and the next is training
        s = _statuses(db)
        if s.count("done") >= 1 and "running" in s:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError(f"the run never reached the second run: {_statuses(db)}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = Store(db)
    before = {r["id"]: r for r in store.runs("tiny")}
    done_before = {i for i, r in before.items() if r["status"] == "done"}
    assert done_before and any(r["status"] == "running" for r in before.values())
    with sqlite3.connect(db) as c:  # a run that is not done has no evaluations
        for run_id, r in before.items():
            n = c.execute("SELECT COUNT(*) FROM evals WHERE run_id = ?", (run_id,)).fetchone()[0]
            assert n == (2 if r["status"] == "done" else 0)

    killed_at = time.time()
    rerun = subprocess.run(command, check=True, capture_output=True, text=True, timeout=600, env=env)
    assert f"{expected_runs} runs, {len(done_before)} already done" in rerun.stdout
    if workers == "2":  # a pool's lines count the runs, as the bar does where it shows
        left = expected_runs - len(done_before)
        assert f"done    [{left}/{left}] " in rerun.stdout and f"done    [{left + 1}/" not in rerun.stdout
    after = {r["id"]: r for r in store.runs("tiny")}
    assert len(after) == expected_runs and all(r["status"] == "done" for r in after.values())
    for run_id in done_before:  # finished runs were skipped, not redone
        assert after[run_id]["finished_at"] == before[run_id]["finished_at"]
    for run_id in set(after) - done_before:  # and exactly the others ran now
        assert after[run_id]["finished_at"] > killed_at
    assert len(store.results("tiny")) == 2 * expected_runs
    rows = json.loads(subprocess.run(
        [sys.executable, "-m", "statetrack.cli", "results", "tiny", "--json", "--results-dir", str(results)],
        check=True, capture_output=True, text=True).stdout)
    assert len(rows) == 2 * expected_runs


def test_models_sharing_a_display_name_are_told_apart():
    from statetrack.experiments.spec import expand

    spec = {"name": "twins", "task": {"name": "modadd", "m": 3}, "models": [{"name": "transformer"}, {"name": "transformer", "num_layers": 2}, {"name": "lstm"}],
            "model_defaults": {"d_model": 8}, "train": {"steps": 1, "min_length": 2, "max_length": 3}, "eval": {"lengths": [3]},
            "lrs": [1e-3], "seeds": [0]}
    assert sorted(r.model_name for r in expand(spec)) == ["LSTM", "Transformer (num_layers=1)", "Transformer (num_layers=2)"]


def test_the_longest_runs_are_scheduled_first(tiny_spec):
    from statetrack.experiments import expand, load_spec
    from statetrack.experiments.runner import training_cost
    from statetrack.models.sizing import pass_flops

    runs = expand(load_spec(str(tiny_spec()), overrides=["models=[{name: lstm, d_model: 8}, {name: lstm, d_model: 16}, {name: mamba, d_model: 8}]"]))
    wide, narrow = (next(r for r in runs if r.model == {**r.model, "name": "lstm", "d_model": d}) for d in (16, 8))
    mamba = next(r for r in runs if r.model["name"] == "mamba")
    assert training_cost(wide) > 2 * training_cost(narrow) > 0
    assert training_cost(mamba) > training_cost(narrow)  # the same width, more arithmetic per token
    curriculum = expand(load_spec(str(tiny_spec()), overrides=["train.curriculum=[{steps: 10, length: 2}, {steps: 10, length: 4}]"]))[0]
    per_sequence = [pass_flops(curriculum.model, curriculum.task, n) for n in (2, 4)]
    assert training_cost(curriculum) == pytest.approx((10 * per_sequence[0] + 10 * per_sequence[1]) * 8)  # steps x FLOPs x batch
    assert training_cost(curriculum, steps=15) == pytest.approx((10 * per_sequence[0] + 5 * per_sequence[1]) * 8)  # stopped early
    assert training_cost(curriculum, steps=10) == pytest.approx(10 * per_sequence[0] * 8)
    assert training_cost(curriculum, steps=99) == training_cost(curriculum)


def test_a_specs_device_is_the_device_the_runs_train_on(tiny_spec):
    """train.device (part of every run's id) is used, never overridden: --device auto gives way to it,
    a --device that contradicts it is refused; without it --device decides."""
    from statetrack.errors import StatetrackError
    from statetrack.experiments.backends import experiment_device

    runs = expand(load_spec(str(tiny_spec())))  # train.device: cpu
    assert {run.train["device"] for run in runs} == {"cpu"}
    assert experiment_device("tiny", runs, "auto") == experiment_device("tiny", runs, "cpu") == "cpu"
    with pytest.raises(StatetrackError, match="sets train.device cpu, but --device is cuda; drop one of them"):
        experiment_device("tiny", runs, "cuda")
    plain = expand(load_spec(str(tiny_spec()), overrides=["train.device=auto"]))
    assert experiment_device("tiny", plain, "cuda:1") == "cuda:1"
    mixed = runs + expand(load_spec(str(tiny_spec()), overrides=["train.device=cuda"]))
    with pytest.raises(StatetrackError, match="different train.device values"):
        experiment_device("tiny", mixed, "auto")


def test_a_backend_that_cannot_start_records_no_plan(tiny_spec, tmp_path, monkeypatch):
    """A cluster that answers but refuses the join fails before the plan is written: the store
    holds nothing of the experiment."""
    def refuse(*args, **kwargs):
        raise ConnectionError("the cluster refused the join")

    monkeypatch.setattr("statetrack.experiments.runner.make_backend", refuse)
    with pytest.raises(ConnectionError):
        run_experiment(resolve(str(tiny_spec())), tmp_path / "r", RunOptions(progress=False), log=lambda *a: None)
    store = Store(tmp_path / "r" / "statetrack.db")
    assert store.plan("tiny") is None and store.runs("tiny") == []


def test_a_plan_relabels_its_stored_runs(tiny_spec, tmp_path):
    """A label follows the latest plan: a run stored as 'LSTM' that a later plan calls 'LSTM (d_model=8)'
    (another LSTM beside it) is reported under the new label, with its results unchanged."""
    path = str(tiny_spec())
    run_experiment(resolve(path), tmp_path / "r", RunOptions(progress=False), log=lambda *a: None)
    store = Store(tmp_path / "r" / "statetrack.db")
    runs = expand(load_spec(path))
    before = {r["id"]: r["model"] for r in store.runs("tiny")}
    store.set_plan(Plan("tiny", {"name": "tiny"}, [{"id": r.id, "model": f"{r.model_name} (relabelled)", "task": r.task_name,
                                               "lr": r.lr, "seed": r.seed} for r in runs]))
    after = {r["id"]: r["model"] for r in store.runs("tiny")}
    assert after == {i: f"{m} (relabelled)" for i, m in before.items()}
    assert {row["model"] for row in store.results("tiny")} == set(after.values())


def test_a_model_entry_may_give_its_own_learning_rates(tmp_path):
    """`lrs` in a model entry replaces the spec's for that model's runs (a family's own grid); it is
    a run setting, not a model parameter, so the model's spec, name and ids are as without it."""
    from statetrack.errors import StatetrackError
    from statetrack.results.overview import planned_runs

    path = tmp_path / "own.yaml"
    path.write_text("task: {name: parity}\nmodels: [{name: lstm, lrs: [1.0e-2, 3.0e-3]}, {name: gru}]\n"
                    "model_defaults: {d_model: 8}\nlrs: [1.0e-3]\nseeds: [0, 1]\neval: {lengths: [40]}\n")
    runs = expand(load_spec(str(path)))
    by_model = {}
    for run in runs:
        by_model.setdefault(run.model_name, set()).add(run.lr)
        assert "lrs" not in run.model
    assert by_model == {"LSTM": {1e-2, 3e-3}, "GRU": {1e-3}} and len(runs) == 6
    assert planned_runs(str(path)) == 6
    path.write_text(path.read_text().replace("lrs: [1.0e-2, 3.0e-3]", "lrs: [-1]"))
    with pytest.raises(StatetrackError, match=r"models\[0\]\.lrs\[0\] must be"):
        load_spec(str(path))


def test_a_model_entry_may_give_its_own_training_settings(tmp_path, capsys):
    """`train:` in a model entry is merged over the spec's (and its task's) for that model's runs
    only: one model's budget grows alone. The other models' runs, and their ids, are as without
    it; the plan and the dry run show each run's own steps; a model cannot move the longest
    training length (the fit gate reads it per task), and a bad setting names its key path."""
    from cli_helpers import run_cli
    from statetrack.errors import StatetrackError

    base = ("task: {name: parity}\nmodels: [{name: lstm}, {name: gru}]\nmodel_defaults: {d_model: 8}\n"
            "lrs: [1.0e-3]\nseeds: [0, 1]\ntrain: {steps: 100, max_length: 12}\neval: {lengths: [12, 24]}\n")
    path = tmp_path / "own.yaml"
    path.write_text(base)
    before = {(r.model_name, r.seed): r for r in expand(load_spec(str(path)))}
    path.write_text(base.replace("{name: lstm}", "{name: lstm, lrs: [3.0e-3], train: {steps: 400, warmup: 10}}"))
    after = {(r.model_name, r.seed): r for r in expand(load_spec(str(path)))}
    assert set(after) == set(before) and len(after) == 4
    for seed in (0, 1):
        assert after["GRU", seed].id == before["GRU", seed].id
        lstm = after["LSTM", seed]
        assert lstm.train["steps"] == 400 and lstm.train["warmup"] == 10 and lstm.train["max_length"] == 12
        assert lstm.plan_entry()["steps"] == 400 and lstm.train_length == 12 and "train" not in lstm.model
        assert lstm.model == before["LSTM", seed].model and lstm.id != before["LSTM", seed].id
    # a model entry whose settings change nothing is the same run
    path.write_text(base.replace("{name: lstm}", "{name: lstm, train: {steps: 100}}"))
    assert {r.id for r in expand(load_spec(str(path)))} == {r.id for r in before.values()}
    path.write_text(base.replace("{name: lstm}", "{name: lstm, train: {steps: 400}}"))
    code, out, err = run_cli(capsys, "run", str(path), "--dry-run", "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    assert [line.split()[5] for line in out.splitlines() if line.split()[1:2] == ["LSTM"]] == ["400", "400"]
    for bad, message in (
        ("{steps: 0}", r"models\[0\]\.train\.steps must be"),
        ("{stepz: 5}", r"models\[0\]\.train.*stepz"),
        ("{max_length: 20}", "a model sets its own budget, not its lengths"),
        ("[1, 2]", r"models\[0\]\.train must be a mapping"),
    ):
        path.write_text(base.replace("{name: lstm}", f"{{name: lstm, train: {bad}}}"))
        with pytest.raises(StatetrackError, match=message):
            expand(load_spec(str(path)))


def test_the_quick_scale_stops_a_run_once_it_fits_unless_the_spec_says_otherwise(tmp_path):
    """At the quick scale every run stops once its held-out figure at the longest training length
    reaches STOP_FIT, read on the spec's fit measure (sequence accuracy where its claims read it);
    a spec, a task, a model or an override that sets early_stop_fit keeps its own (null: off); the
    paper scale trains every step as its paper does. A spec stopping on a loss at or below STOP_LOSS keeps
    that rule alone."""
    from statetrack.schema import STOP_FIT, STOP_LOSS

    base = ("task: {name: parity}\nmodels: [{name: lstm}]\nmodel_defaults: {d_model: 8}\nlrs: [1.0e-3]\n"
            "seeds: [0]\ntrain: {steps: 100, max_length: 12}\neval: {lengths: [12]}\nscales: {paper: {}}\n")
    path = tmp_path / "stop.yaml"
    path.write_text(base)
    (run,) = expand(load_spec(str(path)))
    assert run.train["early_stop_fit"] == STOP_FIT and run.train["early_stop_fit_loss"] == STOP_LOSS
    assert "early_stop_measure" not in run.train
    (paper,) = expand(load_spec(str(path), "paper"))
    assert "early_stop_fit" not in paper.train
    (off,) = expand(load_spec(str(path), overrides=["train.early_stop_fit=null"]))
    assert off.train["early_stop_fit"] is None
    path.write_text(base + "paper: {source: x, measure: sequence, claims: []}\n")
    (run,) = expand(load_spec(str(path)))
    assert run.train["early_stop_measure"] == "sequence"
    path.write_text(base.replace("{name: lstm}", "{name: lstm, train: {early_stop_fit: 0.9}}"))
    (run,) = expand(load_spec(str(path)))
    assert run.train["early_stop_fit"] == 0.9
    path.write_text(base.replace("max_length: 12}", "max_length: 12, early_stop_loss: 1.0e-4}"))
    (run,) = expand(load_spec(str(path)))  # the paper's own, stricter loss rule stops it alone
    assert run.train.get("early_stop_fit") is None and run.train["early_stop_loss"] == 1.0e-4
    path.write_text(base.replace("max_length: 12}", "max_length: 12, early_stop_loss: 0.08}"))
    (run,) = expand(load_spec(str(path)))  # a looser one does not stop a converged run: both rules
    assert run.train["early_stop_fit"] == STOP_FIT and run.train["early_stop_loss"] == 0.08


def test_dry_run_prints_the_plan_and_writes_nothing(tiny_spec, tmp_path, capsys):
    from cli_helpers import run_cli

    spec = str(tiny_spec(steps=10))
    runs = expand(load_spec(spec))
    code, out, err = run_cli(capsys, "run", spec, "--dry-run", "--results-dir", str(tmp_path / "r"), "train.steps=12")
    assert code == 0, err
    assert not (tmp_path / "r").exists()
    assert "name: tiny_train.steps-12" in out and "steps: 12" in out and "4 planned runs, 4 to train" in out
    planned = expand(load_spec(spec, overrides=["train.steps=12"]))
    assert all(f"{r.id}  {r.model_name}" in out and out.count(r.id) == 1 for r in planned)
    assert not {r.id for r in runs} & {r.id for r in planned}  # the override is part of every run's id
    run_experiment(resolve(spec), tmp_path / "r", RunOptions(workers=1, progress=False), log=lambda *a: None)
    code, out, _ = run_cli(capsys, "run", spec, "--dry-run", "--results-dir", str(tmp_path / "r"))
    assert code == 0 and "4 planned runs, 0 to train" in out and out.count("  done") == 4
    code, _, err = run_cli(capsys, "run", spec, "--dry-run", "models=[{name: nope}]")
    assert code == 2 and "nope" in err


def test_run_options_are_checked_once(monkeypatch):
    """The command line checks its options before importing a spec's modules, and `run_experiment`
    checks them again: one options object is checked once (a Ray address is probed once), and a
    changed copy is checked afresh."""
    import dataclasses

    from statetrack.errors import StatetrackError
    from statetrack.experiments import runner

    calls = []
    monkeypatch.setattr(runner, "check_backend", lambda *args: calls.append(args))
    options = RunOptions(workers=2, progress=False)
    runner.check_options(options)
    runner.check_options(options)
    assert len(calls) == 1
    runner.check_options(dataclasses.replace(options, workers=1))
    assert len(calls) == 2
    assert options == RunOptions(workers=2, progress=False)  # the mark is in no comparison
    with pytest.raises(StatetrackError, match="--wandb needs a value"):
        runner.check_options(RunOptions(wandb=" "))
