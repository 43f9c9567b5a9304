"""A run whose training loss becomes non-finite is an outcome of the sweep, not an error: stored
done with the step it diverged at, scored as chance at every evaluation length and variant, never
retried, shown as diverged in the report, and `statetrack run` exits 0."""

import json
import textwrap

import pytest
import torch
from torch import nn

from cli_helpers import run_cli
from statetrack.experiments import expand, load_spec
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.experiments.worker import train_and_evaluate
from statetrack.models import zoo
from statetrack.results.report import write_report
from statetrack.results.scoring import score_store
from statetrack.store import Store
from statetrack.training.train import Diverged


class Fragile(nn.Module):
    """Scales its input by sqrt(1 - s^2) + s: finite while |s| <= 1, nan beyond.

    s starts at 0, and AdamW's first step moves it by the learning rate (the update is lr times
    the gradient's sign), so lr 2 makes the loss nan at step 1 and lr 1e-3 stays finite for
    hundreds of steps."""

    def __init__(self, d_model: int):
        super().__init__()
        self.s = nn.Parameter(torch.zeros(()))

    def forward(self, x, state=None):
        return x * (torch.sqrt(1 - self.s**2) + self.s), state


SPEC = """
name: fragile
description: one learning rate diverges
task: {name: fsm, states: 3}
models: [{name: test_fragile}]
model_defaults: {d_model: 8}
train: {steps: 8, batch_size: 8, min_length: 2, max_length: 5, early_stop_loss: null, device: cpu, log_every: 1, checkpoint_every: 4}
eval: {lengths: [5, 9], samples: 16, variants: {other: {machine_seed: 1}}}
lrs: [1.0e-3, 2.0]
seeds: [0]
"""
CHANCE = 1 / 3  # fsm with 3 states: three answers


@pytest.fixture
def fragile_spec(registry, tmp_path):
    zoo.register_model("test_fragile", display="Fragile")(Fragile)
    path = tmp_path / "fragile.yaml"
    path.write_text(textwrap.dedent(SPEC))
    return str(path)


def _runs_by_lr(store):
    return {r["lr"]: r for r in store.runs("fragile")}


def test_the_trainer_raises_diverged_with_the_step_and_the_loss(fragile_spec):
    (run,) = [r for r in expand(load_spec(fragile_spec)) if r.lr == 2.0]
    from statetrack.tasks import make_task
    from statetrack.training.train import TrainConfig, Trainer

    task = make_task(**run.task)
    model = zoo.build_model(run.model, task.vocab_size, task.num_classes)
    with pytest.raises(Diverged) as caught:
        Trainer(model, task, TrainConfig.from_dict(run.train), progress=False).fit()
    assert caught.value.step == 1 and caught.value.loss != caught.value.loss  # nan
    assert isinstance(caught.value, FloatingPointError) and "loss became nan at step 1" in str(caught.value)


def test_a_diverged_run_is_an_outcome_scored_at_chance(fragile_spec, tmp_path):
    (run,) = [r for r in expand(load_spec(fragile_spec)) if r.lr == 2.0]
    outcome = train_and_evaluate(run, tmp_path, device="cpu", progress=False)
    assert outcome["status"] == "diverged" and outcome["diverged_at"] == outcome["steps"] == 1
    assert "loss became nan at step 1" in outcome["message"]
    assert [p["step"] for p in outcome["curve"]] == [1]  # the curve up to the divergence
    assert outcome["num_parameters"] > 0 and outcome["train_seconds"] > 0 and outcome["host"]
    assert {(e["variant"], e["length"]) for e in outcome["evals"]} == {(v, n) for v in ("", "other") for n in (5, 9)}
    for e in outcome["evals"]:
        assert e["accuracy"] == pytest.approx(CHANCE)
        assert (e["scaled_accuracy"], e["sequence_accuracy"], e["samples"]) == (0.0, 0.0, 0)
        assert "metrics" not in e and "position_accuracy" not in e


def test_a_diverged_run_is_done_at_chance_and_never_retried(fragile_spec, tmp_path):
    logs = []
    run_experiment(resolve(fragile_spec), tmp_path, RunOptions(workers=1, progress=False), log=logs.append)
    assert any(line.startswith("  diverged: Fragile on fsm(states=3), lr=2, seed=0 at step 1 (scored as chance)") for line in logs)
    assert not any("failed" in line for line in logs)
    store = Store(tmp_path / "statetrack.db")
    runs = _runs_by_lr(store)
    assert runs[2.0]["status"] == "done" and runs[2.0]["diverged_at"] == 1 and runs[2.0]["steps"] == 1
    assert runs[1e-3]["status"] == "done" and runs[1e-3]["diverged_at"] is None and runs[1e-3]["steps"] == 8
    evals = store.evals(runs[2.0]["id"], None)
    assert len(evals) == 4 and all(e["accuracy"] == pytest.approx(CHANCE) and e["scaled_accuracy"] == 0.0 for e in evals)
    rows = store.results("fragile")
    assert len(rows) == 8 and {r["diverged"] for r in rows if r["lr"] == 2.0} == {True}
    assert {r["diverged"] for r in rows if r["lr"] == 1e-3} == {False}
    assert all("metric_diverged" not in r for r in rows)
    # a re-run trains nothing: the diverged run is the outcome of its setting
    run_experiment(resolve(fragile_spec), tmp_path, RunOptions(workers=1, progress=False), log=logs.append)
    assert logs[-1] == "experiment fragile (quick): 2 runs, 2 already done"
    assert _runs_by_lr(store)[2.0]["finished_at"] == runs[2.0]["finished_at"]
    md = (write_report(score_store(store, "fragile", run_data=True), tmp_path) / "report.md").read_text()
    assert "| diverged at step 1 |" in md and md.count("| done |") == 1


def test_statetrack_run_exits_0_when_a_learning_rate_diverges(fragile_spec, tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", fragile_spec, "--workers", "1", "--no-progress", "--results-dir", str(tmp_path))
    assert code == 0, err
    assert "diverged: Fragile on fsm(states=3), lr=2, seed=0 at step 1" in out
    code, out, _ = run_cli(capsys, "results", "fragile", "--json", "--results-dir", str(tmp_path))
    rows = json.loads(out)
    assert code == 0 and sorted({(r["lr"], r["diverged"]) for r in rows}) == [(1e-3, False), (2.0, True)]
